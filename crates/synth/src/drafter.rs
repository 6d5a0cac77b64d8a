//! Synthetic drafter checkpoints: a `config.json` and a BF16 `model.safetensors` with the
//! SpecForge tensor names and Gaussian weights, deterministic from a seed.
//!
//! Used for tests, the README example and the full-size benchmark. Values are drawn per
//! chunk of [`SYNTH_CHUNK`] elements from a [`SplitMix64`] stream keyed by (seed, tensor,
//! chunk), so the bytes do not depend on the thread count, and the file is streamed to
//! disk (an [`AtomicFile`] renamed at the end), so memory stays small even for 4.5 GB.

use std::io::{BufWriter, Write};
use std::path::Path;

use dspark_contract::names::tensors::LayerDims;
use dspark_convert::names::{HEAD_TENSORS, LAYER_TENSORS, TAIL_TENSORS};
use dspark_output::AtomicFile;
use rayon::prelude::*;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::rng::SplitMix64;
use crate::{Result, SynthError};

/// Values generated per independent random stream.
pub const SYNTH_CHUNK: usize = 1 << 20;

/// The shape of a synthetic drafter.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct SynthGeometry {
    pub name: &'static str,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub markov_rank: u64,
    pub target_layer_ids: Vec<u64>,
    /// The target's depth.
    pub target_layers: u64,
    pub block_size: u64,
    pub max_position_embeddings: u64,
    pub rope_theta: f64,
    pub yarn_factor: f64,
    pub yarn_original: u64,
    pub mask_token_id: u64,
    pub bos_token_id: u64,
    pub eos_token_id: u64,
    pub pad_token_id: u64,
}

impl SynthGeometry {
    /// The Kimi K3 DSpark reference geometry (`docs/GGUF.md` §7): 2,249,289,601 parameters.
    pub fn kimi_k3_dspark() -> SynthGeometry {
        SynthGeometry {
            name: "kimi-k3-dspark",
            hidden: 7168,
            layers: 5,
            heads: 64,
            kv_heads: 16,
            head_dim: 64,
            ffn: 14336,
            vocab: 163_840,
            markov_rank: 256,
            target_layer_ids: vec![7, 23, 51, 67, 83],
            target_layers: 93,
            block_size: 7,
            max_position_embeddings: 1_048_576,
            rope_theta: 10000.0,
            yarn_factor: 16.0,
            yarn_original: 65_536,
            mask_token_id: 163_824,
            bos_token_id: 163_584,
            eos_token_id: 163_586,
            pad_token_id: 163_839,
        }
    }

    /// A small geometry with the same structure (GQA, captured ids that are not 0..n-1,
    /// target deeper than the capture count, YaRN on), about 0.3 MB as BF16.
    pub fn tiny() -> SynthGeometry {
        SynthGeometry {
            name: "tiny",
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            vocab: 512,
            markov_rank: 32,
            target_layer_ids: vec![1, 4, 6],
            target_layers: 8,
            block_size: 4,
            max_position_embeddings: 4096,
            rope_theta: 10000.0,
            yarn_factor: 4.0,
            yarn_original: 1024,
            mask_token_id: 500,
            bos_token_id: 1,
            eos_token_id: 2,
            pad_token_id: 511,
        }
    }

    /// A mid-size geometry (≈ 250 M parameters, 0.5 GB as BF16): big enough that a
    /// conversion takes a moment, for tests that interrupt or disturb one.
    pub fn small() -> SynthGeometry {
        SynthGeometry {
            name: "small",
            hidden: 1024,
            layers: 16,
            heads: 16,
            kv_heads: 4,
            head_dim: 64,
            ffn: 4096,
            vocab: 32768,
            markov_rank: 64,
            target_layer_ids: vec![2, 9, 17, 24],
            target_layers: 28,
            block_size: 8,
            max_position_embeddings: 32768,
            rope_theta: 1_000_000.0,
            yarn_factor: 4.0,
            yarn_original: 8192,
            mask_token_id: 32000,
            bos_token_id: 1,
            eos_token_id: 2,
            pad_token_id: 32767,
        }
    }

    /// A drafter for a target of `hidden` size, `vocab` tokens and `target_layers`
    /// layers, capturing `target_layer_ids`: one layer with the target's head layout.
    #[allow(clippy::too_many_arguments)]
    pub fn for_target(
        name: &'static str,
        hidden: u64,
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        ffn: u64,
        vocab: u64,
        target_layers: u64,
        target_layer_ids: Vec<u64>,
    ) -> SynthGeometry {
        SynthGeometry {
            name,
            hidden,
            layers: 1,
            heads,
            kv_heads,
            head_dim,
            ffn,
            vocab,
            markov_rank: 32,
            target_layer_ids,
            target_layers,
            block_size: 4,
            max_position_embeddings: 40_960,
            rope_theta: 1_000_000.0,
            yarn_factor: 1.0,
            yarn_original: 40_960,
            mask_token_id: vocab - 1,
            bos_token_id: 1,
            eos_token_id: 2,
            pad_token_id: vocab - 1,
        }
    }

    /// Looks a geometry up by its CLI name.
    pub fn by_name(name: &str) -> Option<SynthGeometry> {
        match name {
            "tiny" => Some(SynthGeometry::tiny()),
            "small" => Some(SynthGeometry::small()),
            "kimi-k3-dspark" => Some(SynthGeometry::kimi_k3_dspark()),
            _ => None,
        }
    }

    /// Every tensor (SpecForge name, PyTorch shape), sorted by name.
    pub fn tensors(&self) -> Vec<(String, Vec<u64>)> {
        let h = self.hidden;
        let n_cap = self.target_layer_ids.len() as u64;
        // SpecForge's names: the first source spelling of each converter table entry.
        let (r, v) = (self.markov_rank, self.vocab);
        let mut t: Vec<(String, Vec<u64>)> = vec![
            (HEAD_TENSORS[0].0[0].into(), vec![h, n_cap * h]),
            (HEAD_TENSORS[1].0[0].into(), vec![h]),
            (TAIL_TENSORS[0].0[0].into(), vec![h]),
            (TAIL_TENSORS[1].0[0].into(), vec![v, r]),
            (TAIL_TENSORS[2].0[0].into(), vec![v, r]),
            (TAIL_TENSORS[3].0[0].into(), vec![1, h + r]),
            (TAIL_TENSORS[4].0[0].into(), vec![1]),
        ];
        let dims = LayerDims {
            hidden: h,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
        };
        for i in 0..self.layers {
            for (src, layer_tensor, _) in LAYER_TENSORS {
                let ne = layer_tensor.ne(&dims);
                t.push((format!("layers.{i}.{src}"), ne.into_iter().rev().collect()));
            }
        }
        t.sort();
        t
    }

    /// Total parameters.
    pub fn parameters(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|(_, s)| s.iter().product::<u64>())
            .sum()
    }

    /// The SpecForge-style `config.json`.
    pub fn config_json(&self) -> serde_json::Value {
        let rope = if self.yarn_factor > 1.0 {
            json!({
                "rope_type": "yarn",
                "factor": self.yarn_factor,
                "original_max_position_embeddings": self.yarn_original,
                "rope_theta": self.rope_theta
            })
        } else {
            json!({"rope_type": "default", "rope_theta": self.rope_theta})
        };
        json!({
            "architectures": ["DSparkDraftModel"],
            "model_type": "qwen3",
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.ffn,
            "vocab_size": self.vocab,
            "rms_norm_eps": 1e-05,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_parameters": rope,
            "block_size": self.block_size,
            "num_target_layers": self.target_layers,
            "layer_types": vec!["full_attention"; self.layers as usize],
            "sliding_window": null,
            "dflash_config": {
                "target_layer_ids": self.target_layer_ids,
                "mask_token_id": self.mask_token_id,
                "markov_rank": self.markov_rank,
                "markov_head_type": "vanilla",
                "enable_confidence_head": true,
                "confidence_head_with_markov": true,
                "projector_type": "dspark",
                "attention_mode": "gqa"
            },
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "hidden_act": "silu",
            "attention_bias": false,
            "tie_word_embeddings": false,
            "dtype": "bfloat16"
        })
    }
}

/// The state of one random stream: the first 8 bytes of SHA256(tag, seed, tensor, chunk).
fn stream_seed(seed: u64, tensor: &str, chunk: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(b"dspark-synth/2\0");
    h.update(seed.to_le_bytes());
    h.update(tensor.as_bytes());
    h.update([0]);
    h.update(chunk.to_le_bytes());
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// BF16 bytes of chunk `chunk` of `tensor` (values `start..start+len`).
fn synth_chunk(seed: u64, tensor: &str, chunk: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64(stream_seed(seed, tensor, chunk));
    let is_norm = tensor.ends_with("norm.weight");
    let mut out = Vec::with_capacity(len * 2);
    for _ in 0..len {
        let z = rng.normal();
        let x = if is_norm { 1.0 + 0.05 * z } else { 0.02 * z };
        out.extend_from_slice(&dspark_quant::float::f32_to_bf16_bits(x).to_le_bytes());
    }
    out
}

/// The safetensors header for `tensors` (BF16, in the given order), padded with spaces
/// to a multiple of 8 as the reference writer does.
fn safetensors_header(tensors: &[(String, Vec<u64>)]) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    for (name, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * 2;
        map.insert(
            name.clone(),
            json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(map)).expect("header serializes");
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out
}

/// Writes `config.json` and `model.safetensors` of `geometry` into `out_dir`.
/// `progress` receives the data bytes written so far and the total; returning `false`
/// cancels the run (nothing is left behind).
pub fn write_synth(
    geometry: &SynthGeometry,
    out_dir: &Path,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> Result<()> {
    std::fs::create_dir_all(out_dir).map_err(|e| SynthError::io(out_dir, e))?;
    let tensors = geometry.tensors();
    let total: u64 = tensors
        .iter()
        .map(|(_, s)| s.iter().product::<u64>() * 2)
        .sum();
    let st_path = out_dir.join("model.safetensors");
    let tmp = AtomicFile::create(&st_path)?;
    let err = |e: std::io::Error| SynthError::io(&st_path, e);
    {
        let mut w = BufWriter::with_capacity(8 << 20, tmp.file());
        w.write_all(&safetensors_header(&tensors)).map_err(err)?;
        let mut done = 0u64;
        let batch = 2 * rayon::current_num_threads().max(1);
        for (name, shape) in &tensors {
            let n = shape.iter().product::<u64>() as usize;
            let n_chunks = n.div_ceil(SYNTH_CHUNK);
            for first in (0..n_chunks).step_by(batch) {
                let parts: Vec<Vec<u8>> = (first..(first + batch).min(n_chunks))
                    .into_par_iter()
                    .map(|c| {
                        synth_chunk(seed, name, c as u64, SYNTH_CHUNK.min(n - c * SYNTH_CHUNK))
                    })
                    .collect();
                for p in parts {
                    w.write_all(&p).map_err(err)?;
                    done += p.len() as u64;
                }
                if !progress(done, total) {
                    return Err(SynthError::Cancelled);
                }
            }
        }
        w.flush().map_err(err)?;
    }
    tmp.commit()?;
    let config =
        serde_json::to_string_pretty(&geometry.config_json()).expect("config serializes") + "\n";
    crate::write_atomic(&out_dir.join("config.json"), config.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kimi_k3_geometry_has_the_reference_parameter_count() {
        let g = SynthGeometry::kimi_k3_dspark();
        assert_eq!(g.parameters(), 2_249_289_601);
        assert_eq!(g.tensors().len(), 62);
        // The Python safetensors library writes 6,656 bytes before the data (length + JSON).
        let header = safetensors_header(&g.tensors());
        assert_eq!(header.len(), 6656);
        let data: u64 = g
            .tensors()
            .iter()
            .map(|(_, s)| s.iter().product::<u64>() * 2)
            .sum();
        assert_eq!(header.len() as u64 + data, 4_498_585_858);
    }
}
