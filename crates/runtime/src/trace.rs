//! Diagnostic trace of a forward's intermediate tensors: with `DSPARK_TRACE=DIR` set,
//! each [`put`] writes its values as raw little-endian f32 to `DIR/<seq>_<name>.f32`
//! (seq: the order they were computed in), for comparing a forward with llama.cpp's
//! dumped nodes (`bench/llama_dump --dump`, `bench/trace_compare.py`);
//! `DSPARK_TRACE_AT=K` keeps only the K-th forward's (from 0, as models count them with
//! [`begin_forward`]; `--dump-at K` on llama.cpp's side). Unset, a put costs one load of
//! a cached flag. Kimi K3 traces its forwards (`dspark generate` or
//! `crates/runtime/examples/k3_logits.rs`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
static SEQ: AtomicUsize = AtomicUsize::new(0);
static FORWARD: AtomicUsize = AtomicUsize::new(0);
static AT: OnceLock<Option<usize>> = OnceLock::new();

fn dir() -> Option<&'static PathBuf> {
    DIR.get_or_init(|| std::env::var_os("DSPARK_TRACE").map(PathBuf::from))
        .as_ref()
}

/// Whether this forward is traced.
pub fn on() -> bool {
    dir().is_some() && {
        let at = AT.get_or_init(|| {
            std::env::var("DSPARK_TRACE_AT")
                .ok()
                .and_then(|v| v.parse().ok())
        });
        at.is_none_or(|k| k + 1 == FORWARD.load(Ordering::Relaxed))
    }
}

/// Counts a forward's start (the first is forward 0).
pub fn begin_forward() {
    if dir().is_some() {
        FORWARD.fetch_add(1, Ordering::Relaxed);
    }
}

/// [`put`] with the name made only when this forward is traced (no formatting otherwise).
pub fn put_named(name: impl FnOnce() -> String, values: &[f32]) {
    if on() {
        put(&name(), values);
    }
}

/// Writes `values` under `name` when tracing is on (a failed write is reported on stderr,
/// never an error of the forward).
pub fn put(name: &str, values: &[f32]) {
    let Some(dir) = dir().filter(|_| on()) else {
        return;
    };
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let path = dir.join(format!("{seq:04}_{name}.f32"));
    if let Err(e) = std::fs::write(&path, bytes) {
        eprintln!("trace: {}: {e}", path.display());
    }
}
