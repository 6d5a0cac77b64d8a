//! Diagnostic trace of a forward's intermediate tensors: with `DSPARK_TRACE=DIR` set,
//! each [`put`] writes its values as raw little-endian f32 to `DIR/<seq>_<name>.f32`
//! (seq: the order they were computed in), for comparing a forward with llama.cpp's
//! dumped nodes (`bench/llama_dump --dump`, `bench/trace_compare.py`). Unset, a put
//! costs one load of a cached flag.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
static SEQ: AtomicUsize = AtomicUsize::new(0);
static PAUSED: AtomicBool = AtomicBool::new(false);

fn dir() -> Option<&'static PathBuf> {
    DIR.get_or_init(|| std::env::var_os("DSPARK_TRACE").map(PathBuf::from))
        .as_ref()
}

/// Whether tracing is on (and not paused).
pub fn on() -> bool {
    dir().is_some() && !PAUSED.load(Ordering::Relaxed)
}

/// Pauses or resumes tracing: a tool traces one forward of several (`k3_logits` with
/// `DSPARK_TRACE_AT`).
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
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
