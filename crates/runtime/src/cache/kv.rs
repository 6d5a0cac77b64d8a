//! A key/value cache: per layer, keys and values of `capacity` positions
//! (`[position][kv head][head_dim]`), sized from the request, never from the model's
//! context length.

use crate::error::{Result, RuntimeError};
use crate::memory::{product, zeroed};

/// Keys and values of up to `capacity` positions for each layer.
#[derive(Clone, Debug)]
pub struct KvCache {
    kv_dim: usize,
    capacity: usize,
    layers: Vec<(Vec<f32>, Vec<f32>)>,
}

impl KvCache {
    /// Bytes a cache of `layers × capacity` positions of `kv_dim` keys and values needs.
    pub fn bytes_for(layers: usize, kv_dim: usize, capacity: usize) -> Option<u64> {
        product(&[2, 4, layers as u64, kv_dim as u64, capacity as u64])
    }

    /// An empty cache for `capacity` positions; `what` names it in a memory error.
    pub fn new(layers: usize, kv_dim: usize, capacity: usize, what: &str) -> Result<KvCache> {
        let bytes =
            KvCache::bytes_for(layers, kv_dim, capacity).ok_or_else(|| RuntimeError::Memory {
                what: what.to_string(),
                bytes: u64::MAX,
                available: crate::memory::available_memory(),
            })?;
        crate::memory::check_fits(bytes, what)?;
        let n = kv_dim * capacity;
        let mut all = Vec::with_capacity(layers);
        for _ in 0..layers {
            all.push((zeroed(n, what)?, zeroed(n, what)?));
        }
        Ok(KvCache {
            kv_dim,
            capacity,
            layers: all,
        })
    }

    /// Positions it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Writes positions `first..first + n` of layer `layer` (`k` and `v` hold n rows).
    ///
    /// # Panics
    /// If the positions exceed the capacity (callers check the request first).
    pub fn write(&mut self, layer: usize, first: usize, k: &[f32], v: &[f32]) {
        let at = first * self.kv_dim;
        let (kc, vc) = &mut self.layers[layer];
        kc[at..at + k.len()].copy_from_slice(k);
        vc[at..at + v.len()].copy_from_slice(v);
    }

    /// Keys of layer `layer`, all positions.
    pub fn keys(&self, layer: usize) -> &[f32] {
        &self.layers[layer].0
    }

    /// Values of layer `layer`, all positions.
    pub fn values(&self, layer: usize) -> &[f32] {
        &self.layers[layer].1
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        KvCache::bytes_for(self.layers.len(), self.kv_dim, self.capacity).unwrap_or(u64::MAX)
    }
}
