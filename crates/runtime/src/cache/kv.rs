//! A key/value cache: per layer, keys and values of `capacity` positions
//! (`[position][kv head][head_dim]`), sized from the request, never from the model's
//! context length. Values are stored as f32, or as F16 ([`KvCache::new_f16`]) where the
//! attention that reads them rounds them to F16 anyway (llama.cpp's F16 cache,
//! [`crate::nn::attention::Attention::F16`]): half the bytes for a decode step to read.

use half::f16;

use crate::error::{Result, RuntimeError};
use crate::memory::{product, zeroed};

/// Keys and values of up to `capacity` positions for each layer.
#[derive(Clone, Debug)]
pub struct KvCache {
    kv_dim: usize,
    capacity: usize,
    layers: Layers,
}

/// Every layer's keys and values, in one storage.
#[derive(Clone, Debug)]
enum Layers {
    F32(Vec<(Vec<f32>, Vec<f32>)>),
    F16(Vec<(Vec<f16>, Vec<f16>)>),
}

/// One layer's keys and values, all positions, as stored.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    /// Stored as f32.
    F32(&'a [f32], &'a [f32]),
    /// Stored as F16.
    F16(&'a [f16], &'a [f16]),
}

impl KvCache {
    /// Bytes a cache of `layers × capacity` positions of `kv_dim` keys and values needs,
    /// stored as f32 (`f16`: as F16).
    pub fn bytes_for(layers: usize, kv_dim: usize, capacity: usize, f16: bool) -> Option<u64> {
        let value = if f16 { 2 } else { 4 };
        product(&[2, value, layers as u64, kv_dim as u64, capacity as u64])
    }

    /// An empty cache of f32 values for `capacity` positions; `what` names it in a memory
    /// error.
    pub fn new(layers: usize, kv_dim: usize, capacity: usize, what: &str) -> Result<KvCache> {
        KvCache::checked(layers, kv_dim, capacity, false, what)?;
        Ok(KvCache {
            kv_dim,
            capacity,
            layers: Layers::F32(zeroed_layers(layers, kv_dim * capacity, what)?),
        })
    }

    /// An empty cache storing F16 values: each value written is rounded to F16 (to
    /// nearest, ties to even), as the F16 attention rounds keys and values and as
    /// llama.cpp's F16 cache holds them.
    pub fn new_f16(layers: usize, kv_dim: usize, capacity: usize, what: &str) -> Result<KvCache> {
        KvCache::checked(layers, kv_dim, capacity, true, what)?;
        Ok(KvCache {
            kv_dim,
            capacity,
            layers: Layers::F16(zeroed_layers(layers, kv_dim * capacity, what)?),
        })
    }

    /// The cache's bytes, refused when they overflow or exceed the memory available.
    fn checked(
        layers: usize,
        kv_dim: usize,
        capacity: usize,
        f16: bool,
        what: &str,
    ) -> Result<u64> {
        let bytes = KvCache::bytes_for(layers, kv_dim, capacity, f16).ok_or_else(|| {
            RuntimeError::Memory {
                what: what.to_string(),
                bytes: u64::MAX,
                available: crate::memory::available_memory(),
            }
        })?;
        crate::memory::check_fits(bytes, what)?;
        Ok(bytes)
    }

    /// Positions it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether it stores F16 values.
    pub fn is_f16(&self) -> bool {
        matches!(self.layers, Layers::F16(_))
    }

    /// Writes positions `first..first + n` of layer `layer` (`k` and `v` hold n rows; an
    /// F16 cache stores each value rounded to F16).
    ///
    /// # Panics
    /// If the positions exceed the capacity (callers check the request first).
    pub fn write(&mut self, layer: usize, first: usize, k: &[f32], v: &[f32]) {
        let at = first * self.kv_dim;
        match &mut self.layers {
            Layers::F32(l) => {
                let (kc, vc) = &mut l[layer];
                kc[at..at + k.len()].copy_from_slice(k);
                vc[at..at + v.len()].copy_from_slice(v);
            }
            Layers::F16(l) => {
                use half::slice::HalfFloatSliceExt;
                let (kc, vc) = &mut l[layer];
                kc[at..at + k.len()].convert_from_f32_slice(k);
                vc[at..at + v.len()].convert_from_f32_slice(v);
            }
        }
    }

    /// Keys and values of layer `layer`, all positions, as stored.
    pub fn rows(&self, layer: usize) -> KvRows<'_> {
        match &self.layers {
            Layers::F32(l) => KvRows::F32(&l[layer].0, &l[layer].1),
            Layers::F16(l) => KvRows::F16(&l[layer].0, &l[layer].1),
        }
    }

    /// Keys of layer `layer`, all positions (an f32 cache).
    ///
    /// # Panics
    /// If the cache stores F16 values.
    pub fn keys(&self, layer: usize) -> &[f32] {
        match self.rows(layer) {
            KvRows::F32(k, _) => k,
            KvRows::F16(..) => panic!("keys() of an F16 cache"),
        }
    }

    /// Values of layer `layer`, all positions (an f32 cache).
    ///
    /// # Panics
    /// If the cache stores F16 values.
    pub fn values(&self, layer: usize) -> &[f32] {
        match self.rows(layer) {
            KvRows::F32(_, v) => v,
            KvRows::F16(..) => panic!("values() of an F16 cache"),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        let layers = match &self.layers {
            Layers::F32(l) => l.len(),
            Layers::F16(l) => l.len(),
        };
        KvCache::bytes_for(layers, self.kv_dim, self.capacity, self.is_f16()).unwrap_or(u64::MAX)
    }
}

/// `layers` zeroed pairs of key and value storage of `n` values each.
fn zeroed_layers<T: Copy + Default>(
    layers: usize,
    n: usize,
    what: &str,
) -> Result<Vec<(Vec<T>, Vec<T>)>> {
    (0..layers)
        .map(|_| Ok((zeroed(n, what)?, zeroed(n, what)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An F16 cache holds F16 values exactly and half the bytes of an f32 one.
    #[test]
    fn an_f16_cache_stores_f16_values_exactly_in_half_the_bytes() {
        let (layers, d, cap) = (2, 8, 5);
        let mut a = KvCache::new(layers, d, cap, "test").unwrap();
        let mut b = KvCache::new_f16(layers, d, cap, "test").unwrap();
        assert_eq!(2 * b.bytes(), a.bytes());
        let k: Vec<f32> = (0..2 * d)
            .map(|i| dspark_quant::vector::round_f16((i as f32 - 7.3) * 1.37e-3))
            .collect();
        let v: Vec<f32> = k.iter().map(|x| -x * 512.0).collect();
        for c in [&mut a, &mut b] {
            c.write(1, 2, &k, &v);
        }
        let (KvRows::F32(ka, va), KvRows::F16(kb, vb)) = (a.rows(1), b.rows(1)) else {
            panic!("the storages asked for");
        };
        let f32s = |x: &[f16]| x.iter().map(|h| h.to_f32()).collect::<Vec<_>>();
        assert_eq!(f32s(kb), ka);
        assert_eq!(f32s(vb), va);
        assert_eq!(&ka[2 * d..4 * d], &k[..]);
    }
}
