//! The products of one decode step against a plain read of the same bytes: Qwen3-0.6B's
//! one-column Q8_0 products (28 layers of q, k, v, o, gate, up, down, each layer its own
//! weights, then the 151,936-row LM head: 633 MB) and a multi-threaded read of those
//! bytes (`dspark_quant::stream::sum_words`: 64-bit words with the widest loads the CPU
//! has, one contiguous share per thread), alternated 20 times after 3
//! warm-ups, so the two meet the same machine; the products run on a worker of the pool,
//! as a forward does. Prints the read's bandwidth and the products' time over the read's
//! (median and minimum of the pairs): how far a decode step's products are from the
//! memory-bandwidth bound, without the rest of the step; and the same for the LM head's
//! one pass alone (the kernel's streaming without 112 passes' starts and joins). Then the
//! kernel's ceiling: one layer's products passed again and again with their bytes cached,
//! in GB/s, and what that ceiling alone makes of the bound of the median read (a product
//! pass cannot stream faster than it computes).
//! `cargo bench -p dspark-quant --bench stream` (`RAYON_NUM_THREADS` sets the threads).

use std::time::Instant;

use dspark_gguf::GgmlType;
use dspark_quant::gemm::{gemm_many_with, Matrix};
use rayon::prelude::*;

fn read(b: &[u8]) -> f64 {
    let share = (b.len() / rayon::current_num_threads()).div_ceil(64) * 64;
    let t = Instant::now();
    let s: u64 = b
        .par_chunks(share)
        .map(dspark_quant::stream::sum_words)
        .reduce(|| 0, u64::wrapping_add);
    std::hint::black_box(s);
    t.elapsed().as_secs_f64()
}

fn main() {
    // One decode step's products, grouped as the runtime runs them (q/k/v and gate/up in
    // one pass each).
    let layer: [&[(usize, usize)]; 4] = [
        &[(2048, 1024), (1024, 1024), (1024, 1024)],
        &[(1024, 2048)],
        &[(3072, 1024), (3072, 1024)],
        &[(1024, 3072)],
    ];
    let passes: Vec<&[(usize, usize)]> = (0..28)
        .flat_map(|_| layer)
        .chain([&[(151_936, 1024)][..]])
        .collect();
    let size = |&(r, c): &(usize, usize)| r * c / 32 * 34;
    let bytes: usize = passes.iter().flat_map(|p| p.iter()).map(size).sum();
    // Q8_0 blocks: scale 2^-8 (f16 0x1c00), varied quants.
    let data: Vec<u8> = (0..bytes)
        .map(|i| match i % 34 {
            0 => 0x00,
            1 => 0x1c,
            _ => (i * 7 % 251) as u8,
        })
        .collect();
    let mut at = 0;
    let mats: Vec<Vec<Matrix<'_>>> = passes
        .iter()
        .map(|p| {
            p.iter()
                .map(|s| {
                    let m = Matrix::new(GgmlType::Q8_0, s.0, s.1, &data[at..at + size(s)]);
                    at += size(s);
                    m.expect("a whole Q8_0 matrix")
                })
                .collect()
        })
        .collect();
    let mut ys: Vec<Vec<Vec<f32>>> = passes
        .iter()
        .map(|p| p.iter().map(|&(r, _)| vec![0.0; r]).collect())
        .collect();
    let kernels = dspark_quant::kernels();
    let head = mats.len() - 1;
    let head_bytes = size(&passes[head][0]);
    let run_passes = |passes: std::ops::Range<usize>, ys: &mut [Vec<Vec<f32>>]| {
        // On a worker of the pool, as the runtime runs a forward (`dspark_cli::on_pool`):
        // each split runs its first part in place and the caller waits by stealing.
        rayon::scope(|_| {
            let (from, count) = (passes.start, passes.len());
            for (ms, y) in mats.iter().zip(ys.iter_mut()).skip(from).take(count) {
                let x = vec![0.01f32; ms[0].cols];
                let ws: Vec<&Matrix<'_>> = ms.iter().collect();
                let mut outs: Vec<&mut [f32]> = y.iter_mut().map(|v| &mut v[..]).collect();
                gemm_many_with(kernels, &ws, &x, &mut outs);
            }
        });
    };
    let (mut ratios, mut reads, mut head_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..23 {
        let r = read(&data);
        let t = Instant::now();
        run_passes(0..mats.len(), &mut ys);
        let p = t.elapsed().as_secs_f64();
        // The LM head alone: one pass of 165 MB, its bytes read just before.
        let rh = read(&data[bytes - head_bytes..]);
        let t = Instant::now();
        run_passes(head..head + 1, &mut ys);
        let ph = t.elapsed().as_secs_f64();
        if run >= 3 {
            ratios.push(p / r);
            reads.push(bytes as f64 / r / 1e9);
            head_ratios.push(ph / rh);
        }
    }
    // The kernel's ceiling: the first layer's passes (17 MB, within the L3 of the machines
    // measured) again and again with nothing read between, so their bytes stay cached.
    let layer_bytes: usize = passes[..layer.len()]
        .iter()
        .flat_map(|p| p.iter())
        .map(size)
        .sum();
    let mut hot = Vec::new();
    for run in 0..53 {
        let t = Instant::now();
        for _ in 0..10 {
            run_passes(0..layer.len(), &mut ys);
        }
        if run >= 3 {
            hot.push(10.0 * layer_bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }
    for v in [&mut ratios, &mut reads, &mut head_ratios, &mut hot] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "decode-step products, {bytes} bytes, {} threads: read {:.1} GB/s (median); products ÷ read: median {:.3}, min {:.3}; the LM head's pass alone ÷ a read of its bytes: median {:.3}, min {:.3}",
        rayon::current_num_threads(),
        reads[reads.len() / 2],
        ratios[ratios.len() / 2],
        ratios[0],
        head_ratios[head_ratios.len() / 2],
        head_ratios[0]
    );
    // At a read of R GB/s the step's bound is bytes / R; its products alone cannot take less
    // than bytes / ceiling, however well reading and computing overlap.
    let ceiling = hot[hot.len() / 2];
    println!(
        "one layer's products with their {layer_bytes} bytes cached: {ceiling:.1} GB/s (median of 50, max {:.1}): the products alone are at least {:.2}x the bound of a read at {:.1} GB/s",
        hot[hot.len() - 1],
        reads[reads.len() / 2] / ceiling,
        reads[reads.len() / 2]
    );
}
