//! Scaled dot-product attention of a group of query heads over keys and values stored
//! at a fixed stride (a KV cache, a block's own keys): the step both models share. What differs —
//! which keys a query sees — stays in each model.

use dspark_quant::kernels;
use dspark_quant::vector::CacheValue;

use crate::nn::ops::softmax;

/// Keys and values of consecutive positions stored row by row (a KV cache, a block's own
/// keys): position p's head is `keys[p · stride .. p · stride + head_dim]` (the slices
/// start at the head's offset in a row).
#[derive(Clone, Copy)]
pub(crate) struct Span<'k> {
    pub keys: &'k [f32],
    pub values: &'k [f32],
    pub count: usize,
}

/// The query heads sharing one KV head (`qs`: g heads of `head_dim`) attending over the
/// keys of `spans` in order, rows `stride` apart:
/// `out_j = Σ_p softmax_p(scale · q_j·k_p) v_p` (`scale`: `1/sqrt(d)` unless the model
/// says otherwise). Each query's scores come from one
/// strided kernel call and its output from another, so the arithmetic of every query is
/// the same whatever the group or the batch around it, and batched and single-position
/// forwards agree bit for bit.
pub(crate) fn attend_group(
    qs: &[f32],
    head_dim: usize,
    stride: usize,
    spans: &[Span<'_>],
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let k = kernels();
    let g = qs.len() / head_dim;
    let n_keys: usize = spans.iter().map(|s| s.count).sum();
    scores.clear();
    scores.resize(g * n_keys, 0.0);
    for (q, row) in qs
        .chunks_exact(head_dim)
        .zip(scores.chunks_exact_mut(n_keys.max(1)))
    {
        let mut at = 0;
        for s in spans {
            (k.dots_f32)(q, s.keys, stride, &mut row[at..at + s.count]);
            at += s.count;
        }
        for v in row.iter_mut() {
            *v *= scale;
        }
        softmax(row);
    }
    out.fill(0.0);
    for (o, row) in out
        .chunks_exact_mut(head_dim)
        .zip(scores.chunks_exact(n_keys.max(1)))
    {
        let mut at = 0;
        for s in spans {
            (k.axpys_f32)(o, &row[at..at + s.count], s.values, stride);
            at += s.count;
        }
    }
}

/// The cells llama.cpp's KV cache shows a forward (`n_kv`) are the cells in use rounded up
/// to a multiple of this.
pub(crate) const KV_PAD: usize = 256;

/// From this many cells in view (`n_kv`), llama.cpp's flash attention splits a single-row
/// forward's keys among its threads (`use_split_kv_path`).
pub(crate) const SPLIT_KV_MIN: usize = 512;

/// Into how many chunks of keys llama.cpp's flash attention splits a query row that sees
/// `view` positions, in a forward of `n` rows (`prompt`: a prompt's forward) on `threads`
/// threads: its thread count for a single-row forward once `n_kv` (`view` rounded up to
/// [`KV_PAD`]) reaches [`SPLIT_KV_MIN`], else 1. dspark's decode and verify rows all
/// take the single-row rule (a verify row is a decode step, bit for bit); a prompt's
/// forward of several rows does not split. (llama.cpp's `n_kv` is also capped by its
/// context size, assumed here to be at least the padded count.)
pub(crate) fn kv_chunks(n: usize, view: usize, prompt: bool, threads: usize) -> usize {
    if (n == 1 || !prompt) && view.next_multiple_of(KV_PAD) >= SPLIT_KV_MIN {
        threads.max(1)
    } else {
        1
    }
}

/// One query row (`q16`, F16-valued) over `count` positions whose keys and values lie at
/// `stride` apart in `keys` and `values` (F16 valued; a head's `out.len()` values at each
/// position of `values`, its `q16.len()` at each of `keys`), by llama.cpp's one-chunk
/// flash-attention recipe (`docs/LLAMA-CPP.md` §6; ggml's
/// `ggml_compute_forward_flash_attn_ext_f16_one_chunk` with an F16 V): a running maximum M
/// and sum S in f32; on a new maximum the F16 accumulator is rescaled by `exp(M_old − M)`;
/// each value is added with weight `exp(s − M)` by a fused multiply-add rounded to F16
/// (ggml's SIMD steps and, contracted by its compiler, its scalar leftovers);
/// `out = acc / S`. Kimi K3's MLA reads keys and values from the same rows.
///
/// With `chunks` > 1 ([`kv_chunks`]), llama.cpp's split-KV path: the `n_kv` cells (`count`
/// rounded up to [`KV_PAD`]) cut into `chunks` runs of `⌈n_kv / chunks⌉`, each run's
/// unnormalised `(M, S, acc)` by the recipe above over its positions below `count`, then
/// the runs merged in order (`M' = max`, each side rescaled by `exp(M_side − M')`,
/// `acc = fma(acc, s_old, acc_run · s_new)`, `S` likewise; runs with `S = 0` skipped),
/// `out = acc · (1 / S)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_f16<T: CacheValue>(
    q16: &[f32],
    keys: &[T],
    values: &[T],
    stride: usize,
    count: usize,
    scale: f32,
    out: &mut [f32],
    chunks: usize,
) {
    let sum = if chunks <= 1 {
        T::attend_chunk_f16(kernels())(q16, keys, values, stride, 0..count, scale, out).1
    } else {
        let n_kv = count.next_multiple_of(KV_PAD);
        let size = n_kv.div_ceil(chunks);
        let mut run = vec![0.0f32; out.len()];
        let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        out.fill(0.0);
        for c in 0..chunks {
            let (lo, hi) = ((c * size).min(count), ((c + 1) * size).min(count));
            let (mc, sc) =
                T::attend_chunk_f16(kernels())(q16, keys, values, stride, lo..hi, scale, &mut run);
            if sc == 0.0 {
                continue;
            }
            let m_new = m.max(mc);
            let (s_old, s_new) = ((m - m_new).exp(), (mc - m_new).exp());
            for (a, &b) in out.iter_mut().zip(&run) {
                *a = a.mul_add(s_old, b * s_new);
            }
            sum = sum.mul_add(s_old, sc * s_new);
            m = m_new;
        }
        sum
    };
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|a| *a *= inv);
}

/// Query rows from which llama.cpp's CPU flash attention takes its tiled path (`GGML_FA_TILE_Q`)
/// — a prompt's forward of at least this many positions — and the keys per tile there
/// (`GGML_FA_TILE_KV`, the same number).
pub(crate) const FA_TILE: usize = 64;

/// One query row (`q`, f32: the tiled path does not round it) over `count` positions whose
/// keys and values (F16 valued) lie `stride` apart, by llama.cpp's tiled flash attention
/// (`ggml_compute_forward_flash_attn_ext_tiled`, `docs/LLAMA-CPP.md` §6), which it runs for
/// forwards of at least [`FA_TILE`] positions: keys in tiles of [`FA_TILE`] from position 0;
/// per tile each score a sequential fused dot product times `scale`, the tile's maximum
/// raising the running one (the accumulator and sum rescaled by libm's `exp(M_old − M)`),
/// the weights ggml's vectorised `exp(s − M)` summed in sixteens into an f64 added to the f32
/// sum, each value column a sequential fused sum over the tile; `out = acc · (1 / S)`.
pub(crate) fn attend_tiled<T: CacheValue>(
    q: &[f32],
    keys: &[T],
    values: &[T],
    stride: usize,
    count: usize,
    scale: f32,
    out: &mut [f32],
) {
    let k = dspark_quant::kernels();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    let mut p = [0.0f32; FA_TILE];
    let mut ic = 0;
    while ic < count {
        let tile = (count - ic).min(FA_TILE);
        T::fused_dots(k)(q, &keys[ic * stride..], stride, &mut p[..tile]);
        for (tk, w) in p.iter_mut().enumerate() {
            *w = if tk < tile {
                *w * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        let tile_max = p
            .iter()
            .fold(f32::NEG_INFINITY, |a, &v| if a > v { a } else { v });
        if tile_max != f32::NEG_INFINITY {
            let m_new = m.max(tile_max);
            if m_new > m {
                let ms = (m - m_new).exp();
                out.iter_mut().for_each(|a| *a *= ms);
                sum *= ms;
            }
            m = m_new;
            let mut tile_sum = 0.0f64;
            for group in p.chunks_exact_mut(16) {
                for w in group.iter_mut() {
                    *w = dspark_quant::vector::ggml_expf(*w - m);
                }
                let lanes: &[f32; 16] = (&*group).try_into().expect("groups of 16");
                tile_sum += f64::from(dspark_quant::lanes::hsum16(*lanes));
            }
            sum = (f64::from(sum) + tile_sum) as f32;
            T::fused_axpys(k)(out, &p[..tile], &values[ic * stride..], stride);
        }
        ic += FA_TILE;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|a| *a *= inv);
}

/// How attention is computed from the cached keys and values (a session option of every
/// target; llama and qwen3 targets and Kimi K3's MLA layers honour it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attention {
    /// f32 keys, values and queries; a softmax over all scores, then the weighted sum
    /// (the default; within 5e-4 of the float64 reference).
    #[default]
    F32,
    /// As llama.cpp's CPU flash attention computes it by default (`-fa auto` with its F16
    /// cache, or any cache once flash attention casts K and V to F16): keys, values and
    /// the query rounded to F16, scores in f32, an online softmax whose value accumulator
    /// is rounded to F16 after every key (`ggml_vec_mad_f16` / `ggml_vec_scale_f16`), the
    /// sum divided out at the end.
    F16,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's split-KV rule: single-row forwards from 512 cells in view (the view
    /// rounded up to 256), every decode or verify row alike, never a prompt of several rows.
    #[test]
    fn keys_split_as_llama_cpp_splits_a_decode_step() {
        assert_eq!(kv_chunks(1, 256, true, 2), 1);
        assert_eq!(kv_chunks(1, 257, true, 2), 2);
        assert_eq!(kv_chunks(1, 257, false, 3), 3);
        assert_eq!(
            kv_chunks(5, 300, false, 2),
            2,
            "a verify row is a decode step"
        );
        assert_eq!(kv_chunks(5, 300, true, 2), 1, "a prompt of several rows");
        assert_eq!(kv_chunks(1, 600, true, 0), 1);
    }

    /// One chunk split or not is the same arithmetic; two chunks are not (the merge rounds),
    /// but stay within rounding of the one-chunk result.
    #[test]
    fn split_attention_is_the_one_chunk_recipe_merged() {
        let (d, count) = (16usize, 300usize);
        let val = |i: usize| dspark_quant::vector::round_f16(((i * 37 % 101) as f32 - 50.0) / 40.0);
        let kv: Vec<f32> = (0..count * d).map(val).collect();
        let q: Vec<f32> = (0..d).map(|i| val(i * 7 + 3)).collect();
        let run = |chunks| {
            let mut o = vec![0.0f32; d];
            attend_f16(&q, &kv, &kv, d, count, 0.25, &mut o, chunks);
            o
        };
        let (one, two) = (run(1), run(2));
        let mut direct = vec![0.0f32; d];
        let (_, s) = dspark_quant::vector::attend_chunk_f16_ref(
            &q,
            &kv,
            &kv,
            d,
            0..count,
            0.25,
            &mut direct,
        );
        let direct: Vec<f32> = direct.iter().map(|a| a * (1.0 / s)).collect();
        assert_eq!(one, direct);
        assert_ne!(one, two, "two chunks should round differently somewhere");
        for (a, b) in one.iter().zip(&two) {
            assert!((a - b).abs() <= 2e-3 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }
}
