//! The Q8_K superblock formats (IQ4_XS, IQ1_S, IQ1_M, TQ1_0, TQ2_0) beside Q8_0, on one
//! thread, at Kimi K3's expert shapes (up/gate 7168 → 2048, down 2048 → 7168) and
//! SmolLM2-135M's FFN down projection (1536 → 576, the one SmolLM2 tensor whose rows are
//! whole superblocks), with 1 (decode) and 8 (verify) columns, for each kernel set this CPU
//! has. Throughput is weight bytes read per call.
//! `cargo bench -p dspark-quant --bench superblock [-- FILTER]` (e.g. `IQ4_XS/k3-up`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dspark_gguf::GgmlType;
use dspark_quant::gemm::{gemm_with, Matrix};
use dspark_quant::Kernels;
use dspark_testkit::rng::SplitMix64;

const TYPES: [GgmlType; 6] = [
    GgmlType::Q8_0,
    GgmlType::IQ4_XS,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
];

/// `(name, rows, cols)`.
const SHAPES: [(&str, usize, usize); 3] = [
    ("k3-up", 2048, 7168),
    ("k3-down", 7168, 2048),
    ("smollm2-down", 576, 1536),
];

fn weights(k: &Kernels, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let f = k.format(ty).expect("a format of the table");
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
    let mut g = c.benchmark_group("superblock");
    g.sample_size(20);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let sets: Vec<Kernels> = [Kernels::avx512(), Kernels::avx2()]
        .into_iter()
        .flatten()
        .collect();
    for (name, rows, cols) in SHAPES {
        for ty in TYPES {
            for k in &sets {
                let data = weights(k, ty, rows, cols);
                let w = Matrix::new(ty, rows, cols, &data).unwrap();
                let packed = k.format(ty).unwrap().pack.and_then(|p| p(&w).unwrap());
                let w = match &packed {
                    Some(p) => w.with_packed(p),
                    None => w,
                };
                let mut rng = SplitMix64(7);
                for n in [1usize, 8] {
                    let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
                    let mut y = vec![0.0f32; n * rows];
                    g.throughput(Throughput::Bytes(data.len() as u64));
                    let id = BenchmarkId::new(format!("{ty}/{name}/{}", k.isa), n);
                    g.bench_function(id, |b| {
                        b.iter(|| one.install(|| gemm_with(k, &w, &x, &mut y)))
                    });
                }
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
