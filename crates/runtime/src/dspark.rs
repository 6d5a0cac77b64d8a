//! The DSpark / DFlash drafter, loaded from a `dflash-draft` GGUF as `dspark convert`
//! writes it (or any file the generic loader accepts, with or without the DSpark heads).
//!
//! Follows `shared/spec/runtime-math.md`: §1.2 fusion `c_p = RMSNorm_hidden(W_fc f_p)` of
//! each captured feature row, §1.4 decoder layers over the block `[x0, MASK, …]` whose
//! attention sees the cached context keys and the whole block (no causal mask), §1.5 a
//! context K/V cache extended as tokens are committed (block K/V are never cached), §1.7
//! both draft-row conventions, §1.8 base logits through the target's LM head, §3.1 the
//! greedy Markov chain seeded with the anchor and §3.3 the confidence head.

use std::time::{Duration, Instant};

use dspark_gguf::{GgufFile, Value};
use dspark_quant::gemm::{gemm, Matrix};
use dspark_quant::ops::{Rope, Yarn};

use crate::error::{Result, RuntimeError};
use rayon::prelude::*;

use crate::layer::{attend_group, norm_rope_heads, norm_rows, rope_tables, DecoderLayer, Dims};
use crate::target::Target;
use crate::weights::Weights;

/// Hyper-parameters read from `dflash-draft.*` keys.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftConfig {
    /// Hidden size (= the target's).
    pub hidden: usize,
    /// Draft layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// FFN size.
    pub ffn: usize,
    /// Tokens per block (B).
    pub block_size: usize,
    /// Captured target layers, in `fc` input order.
    pub target_layer_ids: Vec<usize>,
    /// The mask token filling the block after the anchor.
    pub mask_token_id: u32,
    /// Drafts come from rows 0..B−1 (DSpark) rather than 1..B−1 (z-lab DFlash).
    pub sample_from_anchor: bool,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl DraftConfig {
    fn dims(&self) -> Dims {
        Dims {
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
        }
    }
}

struct Layer<'a> {
    w: DecoderLayer<'a>,
    /// Cached context keys, `[position][kv head][head_dim]`, post-norm and post-RoPE.
    k_cache: Vec<f32>,
    /// Cached context values, same layout.
    v_cache: Vec<f32>,
}

/// The DSpark heads.
struct Markov<'a> {
    /// `[V rows × R]`: embedding of the previous token.
    w1: Matrix<'a>,
    /// `[V rows × R]`: rank-R map to logits.
    w2: Matrix<'a>,
    /// Confidence weight (`hidden` or `hidden + R`) and bias.
    confidence: Option<(Vec<f32>, f32)>,
}

/// One drafted block.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    /// Drafted tokens x_1..x_γ.
    pub tokens: Vec<u32>,
    /// Per draft, the confidence head's acceptance probability (empty without the head).
    pub confidences: Vec<f32>,
    /// Where the drafting time went.
    pub times: DraftTimes,
}

/// Wall time of the phases of one [`Drafter::draft`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DraftTimes {
    /// Embedding, decoder layers and the final norm.
    pub layers: Duration,
    /// The target's LM head on the draft rows.
    pub lm_head: Duration,
    /// Markov chain, confidence head and argmax.
    pub heads: Duration,
}

/// A drafter borrowing its weights from a parsed GGUF.
pub struct Drafter<'a> {
    /// Hyper-parameters.
    pub config: DraftConfig,
    fc: Matrix<'a>,
    hidden_norm: Vec<f32>,
    output_norm: Vec<f32>,
    layers: Vec<Layer<'a>>,
    markov: Option<Markov<'a>>,
    rope: Rope,
    context: usize,
    len: usize,
}

const ACCEPTED_ARCHS: [&str; 3] = ["dflash-draft", "qwen35-dflash-draft", "gemma4-dflash-draft"];

impl<'a> Drafter<'a> {
    /// Loads a drafter; `max_context` bounds its context cache.
    pub fn load(file: &'a GgufFile<'a>, max_context: usize) -> Result<Drafter<'a>> {
        let w = Weights::new(file);
        let arch = match file.get("general.architecture").and_then(Value::as_str) {
            Some(a) if ACCEPTED_ARCHS.contains(&a) => a.to_string(),
            other => {
                return Err(RuntimeError::Key {
                    key: "general.architecture".into(),
                    msg: format!("is {other:?}, expected dflash-draft"),
                })
            }
        };
        let k = |s: &str| format!("{arch}.{s}");
        let u = |s: &str| w.u32(&k(s)).map(|v| v as usize);
        let (hidden, layers, heads, kv_heads, head_dim, ffn) = (
            u("embedding_length")?,
            u("block_count")?,
            u("attention.head_count")?,
            u("attention.head_count_kv")?,
            u("attention.key_length")?,
            u("feed_forward_length")?,
        );
        if [hidden, layers, heads, kv_heads, head_dim, ffn].contains(&0) || heads % kv_heads != 0 {
            return Err(RuntimeError::Key {
                key: k("attention.head_count_kv"),
                msg: "not a valid geometry".into(),
            });
        }
        let ids: Vec<usize> = match file.get(&k("dflash.target_layer_ids")) {
            Some(Value::Array(dspark_gguf::Array::I32(v))) if v.iter().all(|&x| x >= 0) => {
                v.iter().map(|&x| x as usize).collect()
            }
            _ => {
                return Err(RuntimeError::Key {
                    key: k("dflash.target_layer_ids"),
                    msg: "missing or not a non-negative INT32 array".into(),
                })
            }
        };
        let config = DraftConfig {
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            ffn,
            block_size: u("dflash.block_size")?,
            mask_token_id: w.u32(&k("dflash.mask_token_id"))?,
            sample_from_anchor: match file.get(&k("dflash.sample_from_anchor")) {
                Some(Value::Bool(b)) => *b,
                _ => file.tensor("dflash.dspark.markov.w1").is_ok(),
            },
            eps: w.f32_or(&k("attention.layer_norm_rms_epsilon"), 1e-6)?,
            target_layer_ids: ids,
        };
        if config.block_size < 2 {
            return Err(RuntimeError::Key {
                key: k("dflash.block_size"),
                msg: format!("{} is below 2", config.block_size),
            });
        }
        let yarn = match file.get(&k("rope.scaling.type")).and_then(Value::as_str) {
            Some("yarn") => Some(Yarn {
                factor: f64::from(w.f32_or(&k("rope.scaling.factor"), 1.0)?),
                original_context: f64::from(w.u32(&k("rope.scaling.original_context_length"))?),
                beta_fast: f64::from(w.f32_or(&k("rope.scaling.yarn_beta_fast"), 32.0)?),
                beta_slow: f64::from(w.f32_or(&k("rope.scaling.yarn_beta_slow"), 1.0)?),
                attention_factor: file
                    .get(&k("rope.scaling.attn_factor"))
                    .and_then(Value::as_f32)
                    .map(f64::from),
            }),
            _ => None,
        };
        let n_cap = config.target_layer_ids.len();
        let kv = kv_heads * head_dim;
        let dims = config.dims();
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            blocks.push(Layer {
                w: DecoderLayer::load(&w, i, dims)?,
                k_cache: vec![0.0; max_context * kv],
                v_cache: vec![0.0; max_context * kv],
            });
        }
        let markov = if w.has("dflash.dspark.markov.w1") {
            let t = w.tensor("dflash.dspark.markov.w1")?;
            let (r, v) = (
                t.info.dims[0] as usize,
                t.info.dims.get(1).copied().unwrap_or(1) as usize,
            );
            let confidence = if w.has("dflash.dspark.confidence.weight") {
                let cw = w.tensor("dflash.dspark.confidence.weight")?;
                let c = cw.info.dims[0] as usize;
                if c != hidden && c != hidden + r {
                    return Err(RuntimeError::Tensor {
                        tensor: "dflash.dspark.confidence.weight".into(),
                        msg: format!(
                            "width {c} is neither hidden ({hidden}) nor hidden + rank ({})",
                            hidden + r
                        ),
                    });
                }
                Some((
                    w.vector("dflash.dspark.confidence.weight", c)?,
                    w.vector("dflash.dspark.confidence.bias", 1)?[0],
                ))
            } else {
                None
            };
            Some(Markov {
                w1: w.matrix("dflash.dspark.markov.w1", v, r)?,
                w2: w.matrix("dflash.dspark.markov.w2", v, r)?,
                confidence,
            })
        } else {
            None
        };
        Ok(Drafter {
            fc: w.matrix("dflash.fc.weight", hidden, n_cap * hidden)?,
            hidden_norm: w.vector("dflash.hidden_norm.weight", hidden)?,
            output_norm: w.vector("output_norm.weight", hidden)?,
            layers: blocks,
            markov,
            rope: Rope::new(
                head_dim,
                f64::from(w.f32_or(&k("rope.freq_base"), 10000.0)?),
                yarn,
            ),
            context: max_context,
            len: 0,
            config,
        })
    }

    /// Checks that this drafter fits `target`: the same hidden size, captured layers that
    /// exist in it, and (with the DSpark heads) a Markov head over its vocabulary.
    pub fn check_target(&self, target: &dyn Target) -> Result<()> {
        let c = &self.config;
        if c.hidden != target.hidden_size() {
            return Err(RuntimeError::Request(format!(
                "the drafter's hidden size {} differs from the target's {}",
                c.hidden,
                target.hidden_size()
            )));
        }
        if let Some(&l) = c.target_layer_ids.iter().find(|&&l| l >= target.n_layers()) {
            return Err(RuntimeError::Request(format!(
                "the drafter captures target layer {l}, but the target has {} layers",
                target.n_layers()
            )));
        }
        if let Some(m) = &self.markov {
            if m.w2.rows != target.vocab_size() {
                return Err(RuntimeError::Request(format!(
                    "the drafter's Markov head covers {} tokens, the target's vocabulary {}",
                    m.w2.rows,
                    target.vocab_size()
                )));
            }
        }
        if c.mask_token_id as usize >= target.vocab_size() {
            return Err(RuntimeError::Request(format!(
                "the drafter's mask token {} is outside the target's vocabulary of {}",
                c.mask_token_id,
                target.vocab_size()
            )));
        }
        Ok(())
    }

    /// Context positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no context is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets context beyond `len` positions.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends context rows: `features` holds n rows of captured target features
    /// (`captured layers × hidden` each, the target's capture order), for positions
    /// `len()..len()+n`. Each layer caches their keys and values.
    pub fn add_context(&mut self, features: &[f32]) -> Result<()> {
        let c = &self.config;
        let width = c.target_layer_ids.len() * c.hidden;
        assert_eq!(features.len() % width, 0, "whole feature rows");
        let n = features.len() / width;
        if self.len + n > self.context {
            return Err(RuntimeError::Request(format!(
                "draft context full: {} + {n} > {}",
                self.len, self.context
            )));
        }
        let (h, kvd) = (c.hidden, c.kv_heads * c.head_dim);
        // 1. Fusion: c_p = RMSNorm_hidden(W_fc f_p).
        let mut fused = vec![0.0f32; n * h];
        gemm(&self.fc, features, &mut fused);
        let mut ctx = vec![0.0f32; n * h];
        norm_rows(&fused, &self.hidden_norm, c.eps, &mut ctx);
        // 2. Per layer: K/V of the context rows (no input norm), k_norm + RoPE, cached.
        let (mut k, mut v) = (vec![0.0f32; n * kvd], vec![0.0f32; n * kvd]);
        let tables = rope_tables(&self.rope, self.len, n, c.head_dim);
        for layer in &mut self.layers {
            gemm(&layer.w.k, &ctx, &mut k);
            gemm(&layer.w.v, &ctx, &mut v);
            norm_rope_heads(&mut k, kvd, &layer.w.k_norm, c.eps, &self.rope, &tables);
            let at = self.len * kvd;
            layer.k_cache[at..at + n * kvd].copy_from_slice(&k);
            layer.v_cache[at..at + n * kvd].copy_from_slice(&v);
        }
        self.len += n;
        Ok(())
    }

    /// Drafts one block after the cached context: the anchor `x0` at position `len()`,
    /// mask tokens after it. Returns γ = B drafts (anchor-row convention) or B − 1.
    pub fn draft(&self, target: &dyn Target, anchor: u32) -> Result<Draft> {
        let c = &self.config;
        let (b, h, hd) = (c.block_size, c.hidden, c.head_dim);
        let (qd, kvd, group) = (c.heads * hd, c.kv_heads * hd, c.heads / c.kv_heads);
        let dims = c.dims();
        let started = Instant::now();
        let mut tokens = vec![c.mask_token_id; b];
        tokens[0] = anchor;
        let mut z = vec![0.0f32; b * h];
        target.embed(&tokens, &mut z)?;
        let (mut u, mut q, mut k, mut v) = (
            vec![0.0f32; b * h],
            vec![0.0f32; b * qd],
            vec![0.0f32; b * kvd],
            vec![0.0f32; b * kvd],
        );
        let mut attn = vec![0.0f32; b * qd];
        let tables = rope_tables(&self.rope, self.len, b, hd);
        for layer in &self.layers {
            let lw = &layer.w;
            norm_rows(&z, &lw.attn_norm, c.eps, &mut u);
            lw.qkv(&u, &mut q, &mut k, &mut v);
            norm_rope_heads(&mut q, qd, &lw.q_norm, c.eps, &self.rope, &tables);
            norm_rope_heads(&mut k, kvd, &lw.k_norm, c.eps, &self.rope, &tables);
            // Keys: cached context (positions 0..len), then the whole block (no mask). Each
            // task is one block row's group of query heads sharing a KV head.
            let (k, v) = (&k, &v);
            let q = &q;
            attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                || Vec::with_capacity(group * (self.len + b)),
                |scores, (i, out)| {
                    let kvh = i % c.kv_heads;
                    let key = |p: usize| -> &[f32] {
                        if p < self.len {
                            &layer.k_cache[p * kvd + kvh * hd..p * kvd + (kvh + 1) * hd]
                        } else {
                            let j = p - self.len;
                            &k[j * kvd + kvh * hd..j * kvd + (kvh + 1) * hd]
                        }
                    };
                    let value = |p: usize| -> &[f32] {
                        if p < self.len {
                            &layer.v_cache[p * kvd + kvh * hd..p * kvd + (kvh + 1) * hd]
                        } else {
                            let j = p - self.len;
                            &v[j * kvd + kvh * hd..j * kvd + (kvh + 1) * hd]
                        }
                    };
                    let qs = &q[i * group * hd..(i + 1) * group * hd];
                    attend_group(qs, hd, self.len + b, key, value, scores, out);
                },
            );
            lw.output_residual(&attn, &mut z);
            lw.ffn_residual(&mut z, dims, c.eps);
        }
        // Final norm; the rows that predict drafts.
        norm_rows(&z, &self.output_norm, c.eps, &mut u);
        let rows: Vec<usize> = if c.sample_from_anchor {
            (0..b).collect()
        } else {
            (1..b).collect()
        };
        let hidden: Vec<f32> = rows
            .iter()
            .flat_map(|&r| u[r * h..(r + 1) * h].iter().copied())
            .collect();
        let vocab = target.vocab_size();
        let mut logits = vec![0.0f32; rows.len() * vocab];
        let layers_done = Instant::now();
        target.lm_head(&hidden, &mut logits);
        let head_done = Instant::now();
        // Markov chain (greedy), seeded with the anchor; confidence per draft.
        let mut drafted = Vec::with_capacity(rows.len());
        let mut confidences = Vec::new();
        let mut prev = anchor;
        let mut bias = vec![0.0f32; if self.markov.is_some() { vocab } else { 0 }];
        let mut e = Vec::new();
        for (i, base) in logits.chunks_exact(vocab).enumerate() {
            let hk = &hidden[i * h..(i + 1) * h];
            if let Some(m) = &self.markov {
                if prev as usize >= m.w1.rows || m.w2.rows != vocab {
                    return Err(RuntimeError::Request(format!("token {prev} or target vocabulary {vocab} does not fit the Markov head ({} rows)", m.w1.rows)));
                }
                e.resize(m.w1.cols, 0.0);
                m.w1.row_f32(prev as usize, &mut e);
                gemm(&m.w2, &e, &mut bias);
                if let Some((cw, cb)) = &m.confidence {
                    let mut s = *cb + cw[..h].iter().zip(hk).map(|(a, b)| a * b).sum::<f32>();
                    if cw.len() > h {
                        s += cw[h..].iter().zip(&e).map(|(a, b)| a * b).sum::<f32>();
                    }
                    confidences.push(1.0 / (1.0 + (-s).exp()));
                }
            }
            // argmax of base + bias, lowest index on ties (NaN never wins).
            let value = |j: usize| {
                if bias.is_empty() {
                    base[j]
                } else {
                    base[j] + bias[j]
                }
            };
            let mut best = (0usize, value(0));
            for j in 1..vocab {
                let v = value(j);
                if v > best.1 {
                    best = (j, v);
                }
            }
            let next = best.0 as u32;
            drafted.push(next);
            prev = next;
        }
        Ok(Draft {
            tokens: drafted,
            confidences,
            times: DraftTimes {
                layers: layers_done - started,
                lm_head: head_done - layers_done,
                heads: head_done.elapsed(),
            },
        })
    }
}
