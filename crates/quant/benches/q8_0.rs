//! Q8_0 kernels: scalar reference vs AVX2, on an L2-sized row (256 KiB of f32) and a
//! memory-sized one (64 MiB). `cargo bench -p dspark-quant --bench q8_0`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dspark_quant::{error::error_sums_ref, q8_0, Kernels};

/// Values per row, by cache level.
const SIZES: [(&str, usize); 2] = [("L2", 64 * 1024), ("MEM", 16 * 1024 * 1024)];

fn input(n: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
        })
        .collect()
}

fn kernels() -> Vec<Kernels> {
    let mut k = vec![Kernels::scalar()];
    k.extend(Kernels::avx2());
    k
}

fn quantize(c: &mut Criterion) {
    let mut g = c.benchmark_group("q8_0_quantize");
    for (level, n) in SIZES {
        let x = input(n);
        let mut out = vec![0u8; n / 32 * 34];
        g.throughput(Throughput::Bytes((n * 4) as u64));
        for k in kernels() {
            g.bench_with_input(BenchmarkId::new(k.isa, level), &x, |b, x| {
                b.iter(|| {
                    (k.format(dspark_gguf::GgmlType::Q8_0)
                        .and_then(|f| f.quantize)
                        .expect("Q8_0"))(x, &mut out)
                })
            });
        }
    }
    g.finish();
}

fn round_trip_error(c: &mut Criterion) {
    let mut g = c.benchmark_group("q8_0_dequantize_and_error");
    for (level, n) in SIZES {
        let x = input(n);
        let mut q = vec![0u8; n / 32 * 34];
        q8_0::quantize_ref(&x, &mut q);
        let mut y = vec![0.0f32; n];
        g.throughput(Throughput::Bytes((n * 4) as u64));
        for k in kernels() {
            g.bench_with_input(BenchmarkId::new(k.isa, level), &q, |b, q| {
                b.iter(|| {
                    (k.format(dspark_gguf::GgmlType::Q8_0)
                        .expect("Q8_0")
                        .dequantize)(q, &mut y);
                    (k.error_sums)(&x, &y)
                })
            });
        }
        let _ = error_sums_ref(&x, &y);
    }
    g.finish();
}

criterion_group!(benches, quantize, round_trip_error);
criterion_main!(benches);
