//! Loading and running models in tests, in one line each.

use std::sync::Arc;

use dspark_runtime::generate::{autoregressive, speculative, Outcome, Quiet, Request};
use dspark_runtime::{Drafter, KimiK3, Qwen3};

/// A target from GGUF bytes.
///
/// # Panics
/// If the bytes are not a valid target (tests build valid ones).
pub fn target(bytes: Vec<u8>) -> Arc<Qwen3> {
    Arc::new(Qwen3::open(Arc::new(bytes)).expect("a valid qwen3 target"))
}

/// A Kimi K3 target from GGUF bytes.
///
/// # Panics
/// If the bytes are not a valid target (tests build valid ones).
pub fn kimi_k3(bytes: Vec<u8>) -> Arc<KimiK3> {
    Arc::new(KimiK3::open(Arc::new(bytes)).expect("a valid kimi-k3 target"))
}

/// A drafter from GGUF bytes, fitted to `target`.
///
/// # Panics
/// If the bytes are not a valid drafter for it.
pub fn drafter(bytes: Vec<u8>, target: &Qwen3) -> Arc<Drafter> {
    drafter_for(bytes, &target.shape())
}

/// A drafter from GGUF bytes, fitted to a target of `shape`.
///
/// # Panics
/// If the bytes are not a valid drafter for it.
pub fn drafter_for(bytes: Vec<u8>, shape: &dspark_runtime::TargetShape) -> Arc<Drafter> {
    Arc::new(Drafter::open(Arc::new(bytes), shape).expect("a valid drafter for the target"))
}

/// A request of `max_tokens` after `prompt`, ending at `stop`, within a context of 4096.
pub fn request<'a>(prompt: &'a [u32], max_tokens: usize, stop: &'a [u32]) -> Request<'a> {
    Request {
        prompt,
        max_tokens,
        context: 4096,
        stop,
        eos: None,
        sampling: Default::default(),
    }
}

/// Plain greedy decoding in a fresh session.
pub fn greedy(model: &Arc<Qwen3>, req: &Request<'_>) -> Outcome {
    let mut s = model.session(req.positions(0)).expect("a session");
    autoregressive(&mut s, req, &mut Quiet).expect("decoding runs")
}

/// Speculative decoding in fresh sessions.
pub fn spec(model: &Arc<Qwen3>, drafter: &Arc<Drafter>, req: &Request<'_>) -> Outcome {
    let n = req.positions(drafter.drafts_per_block());
    let mut s = model.session(n).expect("a session");
    let mut d = drafter.session(n).expect("a drafter session");
    speculative(&mut s, &mut d, req, &mut Quiet).expect("decoding runs")
}

/// Converts the drafter checkpoint in `dir` (default options) to GGUF bytes in memory.
///
/// # Panics
/// If the checkpoint does not convert.
pub fn convert(dir: &std::path::Path) -> Vec<u8> {
    use dspark_convert::config::DraftConfig;
    use dspark_convert::plan::{Options, Plan};
    use dspark_convert::source::{Checkpoint, SourceLayout};
    use std::io::{Read, Seek};
    let layout = SourceLayout::discover(dir).expect("a checkpoint folder");
    let config = DraftConfig::read(&layout.config_path()).expect("its config");
    let ckpt = Checkpoint::open(layout).expect("its weights");
    let plan = Plan::new(config, &ckpt, Options::default()).expect("a plan");
    let mut out = tempfile_in_memory();
    dspark_convert::write::write_gguf(
        &plan,
        &ckpt,
        &out,
        std::path::Path::new("draft.gguf"),
        1,
        &std::sync::atomic::AtomicBool::new(false),
        &|_, _| {},
    )
    .expect("the conversion runs");
    let mut bytes = Vec::new();
    out.rewind().expect("rewind");
    out.read_to_end(&mut bytes).expect("read back");
    bytes
}

/// An anonymous temporary file.
fn tempfile_in_memory() -> std::fs::File {
    tempfile::tempfile().expect("a temporary file")
}
