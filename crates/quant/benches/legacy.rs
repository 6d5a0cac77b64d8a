//! The formats of 32-value runs (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q1_0) beside Q8_0
//! at the sizes that matter for them: SmolLM2-135M's projections (576 → 1536 and 1536 →
//! 576, Q4_1 in its published file) and Kimi K3's routed experts (7168 → 2048 and 2048 →
//! 7168, MXFP4), with 1 (decode) and 8 (verify) columns, on the file's layout and, where
//! this CPU's kernel reads one, on the packed copy. Throughput is weight bytes per call.
//! `cargo bench -p dspark-quant --bench legacy [-- FILTER]` (e.g. `smollm2.*Q4_1`);
//! `RAYON_NUM_THREADS=1` for one thread.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dspark_gguf::GgmlType;
use dspark_quant::gemm::{gemm, Matrix};
use dspark_testkit::rng::SplitMix64;

fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let f = dspark_quant::format_of(ty).expect("a format of the table");
    let Some(quantize) = f.quantize_ref else {
        return f.sample(rows * cols, 0x2545_f491_4f6c_dd1d);
    };
    let mut rng = SplitMix64(0x2545_f491_4f6c_dd1d);
    let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.02).collect();
    let mut q = vec![0u8; f.row_bytes(cols) * rows];
    quantize(&v, &mut q);
    q
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("legacy");
    g.sample_size(30);
    let shapes = [
        ("smollm2-576x1536", 1536usize, 576usize),
        ("smollm2-1536x576", 576, 1536),
        ("k3-7168x2048", 2048, 7168),
        ("k3-2048x7168", 7168, 2048),
    ];
    for (name, rows, cols) in shapes {
        for ty in dspark_quant::matrix_types() {
            if ty.block_size() == 1 || !cols.is_multiple_of(ty.block_size() as usize) {
                continue;
            }
            let data = weights(ty, rows, cols);
            let w = Matrix::new(ty, rows, cols, &data).unwrap();
            let f = dspark_quant::format_of(ty).unwrap();
            let packed = f.pack.and_then(|pack| pack(&w).unwrap());
            let mut layouts = vec![("file", w)];
            if let Some(p) = &packed {
                layouts.push(("packed", w.with_packed(p)));
            }
            for (layout, m) in layouts {
                for n in [1usize, 8] {
                    let mut rng = SplitMix64(7);
                    let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
                    let mut y = vec![0.0f32; n * rows];
                    g.throughput(Throughput::Bytes(data.len() as u64));
                    g.bench_function(BenchmarkId::new(format!("{name}/{ty}/{layout}"), n), |b| {
                        b.iter(|| gemm(&m, &x, &mut y))
                    });
                }
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
