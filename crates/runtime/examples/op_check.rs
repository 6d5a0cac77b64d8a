//! op_check: this runtime's operations, one at a time, on llama.cpp's own intermediate
//! tensors — the tool that finds which step of a forward pass departs from llama.cpp's
//! bits. `bench/llama_dump --dump DIR` writes every F32 node of llama.cpp's first decode;
//! for each decoder layer of a `qwen3` or `llama` file this feeds each operation
//! llama.cpp's input to that operation and compares the result with llama.cpp's output,
//! bit for bit (the RMSNorms, the q/k/v, output, gate/up/down products, the per-head norms,
//! RoPE, SwiGLU, the residual adds, the final norm and the LM head).
//!
//! ```text
//! llama_dump MODEL.gguf --tokens 1,2,3 --dump DIR --out x.json
//! op_check MODEL.gguf DIR [--layers N]
//! ```
//!
//! Prints one line per operation: elements that differ, the largest difference. The
//! products take llama.cpp's prompt order (`dspark_quant::tiled`; one-column order below
//! its 8 columns), as the dumped forward is a prompt's.

use std::collections::HashMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use dspark_gguf::{GgmlType, GgufFile};
use dspark_quant::gemm::gemm;
use dspark_quant::Matrix;
use dspark_runtime::nn::ops::{rms_norm, swiglu};
use dspark_runtime::nn::rope::{GgmlRope, GgmlRopeSettings, Pairing};

/// llama.cpp's dumped nodes: by name, each occurrence in computation order.
struct Dump {
    dir: PathBuf,
    nodes: HashMap<String, Vec<(String, String)>>,
}

impl Dump {
    fn open(dir: &Path) -> Result<Dump, Box<dyn Error>> {
        let mut nodes: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for line in std::fs::read_to_string(dir.join("index.txt"))?.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some((_, name)) = f[0].split_once('_') else {
                continue;
            };
            nodes
                .entry(name.to_string())
                .or_default()
                .push((f[0].to_string(), f[f.len() - 1].to_string()));
        }
        Ok(Dump {
            dir: dir.to_path_buf(),
            nodes,
        })
    }

    /// The first node called `name` computed by `op`.
    fn get(&self, name: &str, op: &str) -> Option<Vec<f32>> {
        let (file, _) = self.nodes.get(name)?.iter().find(|(_, o)| o == op)?;
        let bytes = std::fs::read(self.dir.join(format!("{file}.f32"))).ok()?;
        Some(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

fn report(what: &str, got: &[f32], want: &[f32]) {
    if got.len() != want.len() {
        println!("{what:28} length {} vs llama.cpp {}", got.len(), want.len());
        return;
    }
    let differ = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let max = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let mark = if differ == 0 { "exact" } else { "DIFF " };
    println!(
        "{what:28} {mark} {differ:6} of {:6} differ, max |Δ| {max:.3e}",
        got.len()
    );
}

fn main() -> Result<(), Box<dyn Error>> {
    // llama_dump's forward is a prompt's: products in llama.cpp's prompt order.
    dspark_quant::gemm::prompt_order(run)
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        return Err("usage: op_check MODEL.gguf DUMP_DIR [--layers N]".into());
    }
    let layers_arg = args
        .iter()
        .position(|a| a == "--layers")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse::<usize>())
        .transpose()?;
    let bytes = std::fs::read(&args[0])?;
    let file = GgufFile::parse(&bytes)?;
    let dump = Dump::open(Path::new(&args[1]))?;
    let arch = file
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .ok_or("no general.architecture")?
        .to_string();
    let key = |k: &str| file.get(&format!("{arch}.{k}"));
    let eps = key("attention.layer_norm_rms_epsilon")
        .and_then(|v| v.as_f32())
        .ok_or("no rms epsilon")?;
    let base = key("rope.freq_base")
        .and_then(|v| v.as_f32())
        .unwrap_or(10_000.0);
    let blocks = key("block_count")
        .and_then(|v| v.as_u32())
        .ok_or("no block_count")? as usize;
    let heads = key("attention.head_count")
        .and_then(|v| v.as_u32())
        .ok_or("no head_count")? as usize;
    let hidden = key("embedding_length")
        .and_then(|v| v.as_u32())
        .ok_or("no embedding_length")? as usize;
    let head_dim = key("attention.key_length")
        .and_then(|v| v.as_u32())
        .map_or(hidden / heads, |v| v as usize);

    let floats = |name: &str| -> Result<Vec<f32>, Box<dyn Error>> {
        let t = file.tensor(name)?;
        if t.info.ty != GgmlType::F32 {
            return Err(format!("{name} is not F32").into());
        }
        Ok(t.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let product = |name: &str, x: &[f32]| -> Result<(Vec<f32>, GgmlType), Box<dyn Error>> {
        let t = file.tensor(name)?;
        let (cols, rows) = (t.info.dims[0] as usize, t.info.dims[1] as usize);
        let m = Matrix::new(t.info.ty, rows, cols, t.data).ok_or("no kernel for the type")?;
        let mut y = vec![0.0f32; x.len() / cols * rows];
        gemm(&m, x, &mut y);
        Ok((y, t.info.ty))
    };
    let norm = |x: &[f32], w: &[f32]| {
        let mut y = vec![0.0f32; x.len()];
        for (xr, yr) in x.chunks_exact(w.len()).zip(y.chunks_exact_mut(w.len())) {
            rms_norm(xr, w, eps, yr);
        }
        y
    };
    let rope = GgmlRope::new(GgmlRopeSettings {
        dims: head_dim,
        pairing: if arch == "llama" {
            Pairing::Adjacent
        } else {
            Pairing::Halves
        },
        base,
        freq_scale: 1.0,
        yarn: false,
        attn_factor: 1.0,
        original_context: 4096,
        freq_factors: None,
    });
    let rotate = |x: &[f32], width: usize| {
        let mut y = x.to_vec();
        let mut cache = vec![0.0f32; head_dim];
        for (t, row) in y.chunks_exact_mut(width).enumerate() {
            rope.cache(t as u64, &mut cache);
            for head in row.chunks_exact_mut(head_dim) {
                rope.apply(head, &cache);
            }
        }
        y
    };
    let add = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<_>>();

    let layers = layers_arg.unwrap_or(blocks).min(blocks);
    for l in 0..layers {
        let input = if l == 0 {
            dump.get("embd", "GET_ROWS")
        } else {
            dump.get(&format!("l_out-{}", l - 1), "ADD")
        }
        .ok_or("no layer input")?;
        let p = |s: &str| format!("blk.{l}.{s}");
        let n = |s: &str| format!("{s}-{l}");
        let Some(attn_norm) = dump.get(&n("attn_norm"), "MUL") else {
            break;
        };
        report(
            &format!("{l} attn_norm"),
            &norm(&input, &floats(&p("attn_norm.weight"))?),
            &attn_norm,
        );
        for (t, cur) in [("attn_q", "Qcur"), ("attn_k", "Kcur"), ("attn_v", "Vcur")] {
            if let Some(want) = dump.get(&n(cur), "MUL_MAT") {
                let (y, ty) = product(&p(&format!("{t}.weight")), &attn_norm)?;
                report(&format!("{l} {t} {ty}"), &y, &want);
            }
        }
        for (cur, w) in [("Qcur", "attn_q_norm"), ("Kcur", "attn_k_norm")] {
            let normed = dump.get(&n(&format!("{cur}_normed")), "MUL");
            let raw = dump.get(&n(cur), "MUL_MAT");
            if let (Some(normed), Some(raw)) = (&normed, &raw) {
                report(
                    &format!("{l} {w}"),
                    &norm(raw, &floats(&p(&format!("{w}.weight")))?),
                    normed,
                );
            }
            let pre = normed.or(raw);
            if let (Some(pre), Some(want)) = (pre, dump.get(&n(cur), "ROPE")) {
                let width = pre.len() / (input.len() / hidden);
                report(&format!("{l} {cur} rope"), &rotate(&pre, width), &want);
            }
        }
        let ffn_inp = dump.get(&n("ffn_inp"), "ADD").ok_or("no ffn_inp")?;
        let kqv = dump
            .get(&n("kqv_out"), "CONT")
            .or_else(|| dump.get(&n("kqv_out"), "RESHAPE"));
        if let Some(kqv) = kqv {
            let (o, ty) = product(&p("attn_output.weight"), &kqv)?;
            report(
                &format!("{l} attn_output {ty} + res"),
                &add(&o, &input),
                &ffn_inp,
            );
        }
        let ffn_norm = dump.get(&n("ffn_norm"), "MUL").ok_or("no ffn_norm")?;
        report(
            &format!("{l} ffn_norm"),
            &norm(&ffn_inp, &floats(&p("ffn_norm.weight"))?),
            &ffn_norm,
        );
        let gate = dump.get(&n("ffn_gate"), "MUL_MAT").ok_or("no ffn_gate")?;
        let up = dump.get(&n("ffn_up"), "MUL_MAT").ok_or("no ffn_up")?;
        let (y, ty) = product(&p("ffn_gate.weight"), &ffn_norm)?;
        report(&format!("{l} ffn_gate {ty}"), &y, &gate);
        let (y, ty) = product(&p("ffn_up.weight"), &ffn_norm)?;
        report(&format!("{l} ffn_up {ty}"), &y, &up);
        let act = dump
            .get(&n("ffn_swiglu"), "SWIGLU")
            .ok_or("no ffn_swiglu")?;
        let mut mine = gate.clone();
        let ffn = gate.len() / (input.len() / hidden);
        for (g, u) in mine.chunks_exact_mut(ffn).zip(up.chunks_exact(ffn)) {
            swiglu(g, u);
        }
        report(&format!("{l} swiglu"), &mine, &act);
        let out = dump.get(&n("ffn_out"), "MUL_MAT").ok_or("no ffn_out")?;
        let (y, ty) = product(&p("ffn_down.weight"), &act)?;
        report(&format!("{l} ffn_down {ty}"), &y, &out);
        if let Some(l_out) = dump.get(&n("l_out"), "ADD") {
            report(&format!("{l} residual"), &add(&out, &ffn_inp), &l_out);
        }
    }
    if let (Some(last), Some(result_norm)) = (
        dump.get(&format!("l_out-{}", blocks - 1), "ADD"),
        dump.get("result_norm", "MUL"),
    ) {
        report(
            "output_norm",
            &norm(&last, &floats("output_norm.weight")?),
            &result_norm,
        );
        if let Some(logits) = dump.get("result_output", "MUL_MAT") {
            let head = if file.tensor("output.weight").is_ok() {
                "output.weight"
            } else {
                "token_embd.weight"
            };
            let (y, ty) = product(head, &result_norm)?;
            report(&format!("lm head {ty}"), &y, &logits);
        }
    }
    Ok(())
}
