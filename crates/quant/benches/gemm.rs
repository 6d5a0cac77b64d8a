//! Weight × activation columns: every weight format of the table, in a Qwen3-0.6B-sized
//! FFN matrix (3072 × 1024), a K3-drafter-sized one (14336 × 7168), SmolLM2-135M's
//! `ffn_down` (576 × 1536, Q4_K / Q6_K in its Q4_K_M file) and Kimi K3's expert shapes
//! (2048 × 7168 and 7168 × 2048), with 1 (decode) and 8 (verify) columns, on all cores,
//! with the packed copy a format's table row makes (as the runtime loads weights;
//! `RAYON_NUM_THREADS` sets how many threads).
//! Throughput is weight bytes read per call.
//! `cargo bench -p dspark-quant --bench gemm [-- FILTER]` (e.g. `Q4_K`).

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
    let mut g = c.benchmark_group("gemm");
    g.sample_size(20);
    for (name, rows, cols) in [
        ("qwen3-0.6b-ffn", 3072, 1024),
        ("k3-ffn", 14336, 7168),
        ("smollm2-ffn-down", 576, 1536),
        ("k3-expert-up", 2048, 7168),
        ("k3-expert-down", 7168, 2048),
    ] {
        for ty in dspark_quant::matrix_types() {
            let data = weights(ty, rows, cols);
            let w = Matrix::new(ty, rows, cols, &data).unwrap();
            let f = dspark_quant::format_of(ty).expect("a format of the table");
            let packed = f.pack.map(|pack| pack(&w).unwrap()).unwrap_or(None);
            let w = match &packed {
                Some(p) => w.with_packed(p),
                None => w,
            };
            for n in [1usize, 8] {
                let x = vec![0.01f32; n * cols];
                let mut y = vec![0.0f32; n * rows];
                g.throughput(Throughput::Bytes(data.len() as u64));
                g.bench_function(BenchmarkId::new(format!("{name}/{ty}"), n), |b| {
                    b.iter(|| gemm(&w, &x, &mut y))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
