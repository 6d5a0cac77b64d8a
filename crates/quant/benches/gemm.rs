//! Weight × activation columns: Q8_0 and F16 weights of a Qwen3-0.6B-sized FFN matrix
//! (3072 × 1024) and a K3-drafter-sized one (14336 × 7168), with 1 (decode) and 8 (verify)
//! columns, on all cores. Throughput is weight bytes read per call.
//! `cargo bench -p dspark-quant --bench gemm`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dspark_quant::gemm::{gemm, Matrix, WeightType};
use dspark_quant::q8_0::quantize_ref;

fn weights(ty: WeightType, rows: usize, cols: usize) -> Vec<u8> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let v: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
        })
        .collect();
    match ty {
        WeightType::Q8_0 => {
            let mut q = vec![0u8; ty.row_bytes(cols) * rows];
            quantize_ref(&v, &mut q);
            q
        }
        _ => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm");
    g.sample_size(20);
    for (name, rows, cols) in [("qwen3-0.6b-ffn", 3072, 1024), ("k3-ffn", 14336, 7168)] {
        for ty in [WeightType::Q8_0, WeightType::F16] {
            let data = weights(ty, rows, cols);
            let w = Matrix::new(ty, rows, cols, &data).unwrap();
            for n in [1usize, 8] {
                let x = vec![0.01f32; n * cols];
                let mut y = vec![0.0f32; n * rows];
                g.throughput(Throughput::Bytes(data.len() as u64));
                g.bench_function(BenchmarkId::new(format!("{name}/{ty:?}"), n), |b| {
                    b.iter(|| gemm(&w, &x, &mut y))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
