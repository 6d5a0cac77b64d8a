//! Logits of a Kimi K3 GGUF after a token sequence, evaluated in the schedule
//! `bench/llama_dump` uses (`--chunks`): for comparing dspark's logits with llama.cpp's
//! where greedy tokens part (`bench/k3_llama_greedy.py`).
//!
//! ```text
//! cargo run --release -p dspark-runtime --example k3_logits -- MODEL.gguf 5,17,300 [3,1,...] [f16|f32]
//! ```
//!
//! Prints one JSON line: `{"logits": [[V floats] for the last position of each chunk]}`
//! (with one-token chunks after the prompt, the rows greedy decoding chose from). The
//! file is read into memory (this is a diagnostic for small files, not a loader).
//! `DSPARK_TRACE=DIR` writes the forwards' intermediates (`dspark_runtime::trace`;
//! `DSPARK_TRACE_AT=K` only the K-th forward's), for `bench/trace_compare.py`.

use std::sync::Arc;

use dspark_runtime::{Attention, KimiK3, Logits, Target};

fn ints(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().map_err(|e| format!("`{x}`: {e}")))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, tokens, rest @ ..] = args.as_slice() else {
        return Err("usage: k3_logits MODEL.gguf TOKENS [CHUNKS] [f16|f32]".into());
    };
    let tokens = ints(tokens)?;
    let chunks = match rest.first() {
        Some(c) => ints(c)?.into_iter().map(|x| x as usize).collect(),
        None => vec![tokens.len()],
    };
    if chunks.iter().sum::<usize>() != tokens.len() || chunks.contains(&0) {
        return Err("chunks must be positive and sum to the token count".into());
    }
    let attention = match rest.get(1).map(String::as_str) {
        None | Some("f16") => Attention::F16,
        Some("f32") => Attention::F32,
        Some(o) => return Err(format!("unknown attention `{o}`").into()),
    };
    let bytes = std::fs::read(model)?;
    let m = Arc::new(KimiK3::open(Arc::new(bytes))?);
    let mut s = m.session(tokens.len().max(1), 1)?;
    s.set_attention(attention);
    let mut at = 0;
    let mut rows = Vec::new();
    for c in chunks {
        // A chunk of more than one token is a prompt's forward: llama.cpp's prompt order
        // (as `dspark generate` runs its prefill).
        let chunk = &tokens[at..at + c];
        let f = if c > 1 {
            dspark_quant::gemm::prompt_order(|| s.forward_commit(chunk, &[], Logits::Last))?
        } else {
            s.forward_commit(chunk, &[], Logits::Last)?
        };
        rows.push(f.logits);
        at += c;
    }
    println!("{}", serde_json::json!({ "logits": rows }));
    Ok(())
}
