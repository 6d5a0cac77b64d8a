//! Weight × activation columns: Q8_0 and F16 weights of a Qwen3-0.6B-sized FFN matrix
//! (3072 × 1024) and a K3-drafter-sized one (14336 × 7168), with 1 (decode) and 8 (verify)
//! columns, on all cores. Throughput is weight bytes read per call.
//! `cargo bench -p dspark-quant --bench gemm`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dspark_gguf::GgmlType;
use dspark_quant::gemm::{gemm, Matrix};
use dspark_testkit::rng::SplitMix64;

fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let mut rng = SplitMix64(0x2545_f491_4f6c_dd1d);
    let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.02).collect();
    let f = dspark_quant::format_of(ty).expect("a format of the table");
    let mut q = vec![0u8; f.row_bytes(cols) * rows];
    (f.quantize_ref)(&v, &mut q);
    q
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm");
    g.sample_size(20);
    for (name, rows, cols) in [("qwen3-0.6b-ffn", 3072, 1024), ("k3-ffn", 14336, 7168)] {
        for ty in [GgmlType::Q8_0, GgmlType::F16] {
            let data = weights(ty, rows, cols);
            let w = Matrix::new(ty, rows, cols, &data).unwrap();
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
