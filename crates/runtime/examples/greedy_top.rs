//! greedy_top: greedy decoding of a target GGUF by this runtime, printing the K largest
//! logits of every step — the runtime half of `bench/requant_vs_llama.sh`'s divergence
//! analysis (the llama.cpp half is `bench/llama_dump --gen-top K`).
//!
//! ```text
//! greedy_top MODEL.gguf --tokens 5,17,300 [-n 48] [-k 3] [-t 2] [--attention f16|f32]
//! ```
//!
//! Prints one JSON object: `{"prompt_tokens": [...], "tokens": [...], "top": [[[id, logit],
//! ...K] per generated token]}`. Every step is a plain decode step (the prompt in forwards
//! of up to 512 positions in the prompt order, then one token per forward), as `dspark
//! generate` without a drafter runs it;
//! the next token is the first largest logit, as [`dspark_runtime::generate::argmax`] picks.

use std::error::Error;
use std::sync::Arc;

use dspark_runtime::generate::argmax;
use dspark_runtime::{open_target, Attention, Logits, ModelBytes, SessionOptions};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (mut model, mut prompt, mut n, mut k, mut threads) = (None, Vec::new(), 48, 3, 2);
    let mut attention = Attention::F16;
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--tokens" => {
                prompt = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::parse)
                    .collect::<Result<Vec<u32>, _>>()?
            }
            "-n" => n = value()?.parse()?,
            "-k" => k = value()?.parse()?,
            "-t" => threads = value()?.parse()?,
            "--attention" => {
                attention = match value()?.as_str() {
                    "f16" => Attention::F16,
                    "f32" => Attention::F32,
                    other => return Err(format!("--attention {other}: f16 or f32").into()),
                }
            }
            _ if model.is_none() && !a.starts_with('-') => model = Some(a),
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let (Some(model), false) = (model, prompt.is_empty()) else {
        return Err("usage: greedy_top MODEL.gguf --tokens 1,2,3 [-n 48] [-k 3] [-t 2]".into());
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()?;
    let bytes: ModelBytes = Arc::new(std::fs::read(&model)?);
    let opened = open_target(bytes, None)?;
    let mut session = Arc::clone(&opened.model).session(&SessionOptions {
        positions: prompt.len() + n,
        undo: 1,
        attention,
    })?;
    let top = |logits: &[f32]| {
        let mut ids: Vec<usize> = (0..logits.len()).collect();
        // Largest first; among equal logits the lower id first (argmax's choice).
        ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        ids.truncate(k);
        ids.into_iter().map(|i| (i, logits[i])).collect::<Vec<_>>()
    };
    // The prompt as `dspark generate` prefills it: chunks of PREFILL_CHUNK, in llama.cpp's
    // prompt order.
    let mut logits = Vec::new();
    for chunk in prompt.chunks(dspark_runtime::generate::PREFILL_CHUNK) {
        logits =
            dspark_quant::gemm::prompt_order(|| session.forward_commit(chunk, &[], Logits::Last))?
                .logits;
    }
    let (mut tokens, mut tops) = (Vec::new(), Vec::new());
    for step in 0..n {
        let next = argmax(&logits);
        tokens.push(next);
        tops.push(top(&logits));
        if step + 1 < n {
            logits = session.forward_commit(&[next], &[], Logits::Last)?.logits;
        }
    }
    println!(
        "{}",
        serde_json::json!({ "prompt_tokens": prompt, "tokens": tokens, "top": tops })
    );
    Ok(())
}
