//! Per-sequence state that grows with positions: the KV cache (target and drafter alike).
//! A recurrent target's state and its rollback (ReplaySSM) will live here too.

mod kv;

pub use kv::{KvCache, KvRows};
