//! A target with only a (tied) embedding table and LM head, random Q8_0 deterministic
//! from a seed: enough to draft blocks with a drafter whose real target is too large to
//! synthesize (Kimi K3's), to time the drafter alone. It has no decoder layers:
//! [`Target::forward`] is an error.

use dspark_gguf::GgmlType;
use dspark_quant::gemm::{gemm, Matrix, Packed};
use dspark_runtime::{Forward, Logits, Result, RuntimeError, Target, TargetShape};

use crate::rng::SplitMix64;

/// An embedding and LM head of `vocab × hidden` random Q8_0 values.
pub struct HeadOnlyTarget {
    vocab: usize,
    hidden: usize,
    layers: usize,
    table: Vec<u8>,
    /// The table's packed copy, as a target's LM head gets one when a drafter borrows it
    /// (`TargetModel::pack_lm_head`), where this CPU's kernels read one.
    packed: Option<Packed>,
}

impl HeadOnlyTarget {
    /// `vocab × hidden` (hidden a multiple of 32); rows of random quants with scale 1/64.
    /// It claims `layers` layers (so a drafter checked against that shape accepts it) but
    /// runs none.
    ///
    /// # Panics
    /// If `hidden` is not a positive multiple of 32.
    pub fn new(vocab: usize, hidden: usize, layers: usize, seed: u64) -> HeadOnlyTarget {
        use rayon::prelude::*;
        assert!(
            hidden > 0 && hidden.is_multiple_of(32),
            "hidden must be whole Q8_0 blocks"
        );
        let row = hidden / 32 * 34;
        let mut table = vec![0u8; vocab * row];
        let scale = half::f16::from_f32(1.0 / 64.0).to_bits().to_le_bytes();
        table
            .par_chunks_mut(row)
            .enumerate()
            .for_each(|(r, bytes)| {
                let mut rng = SplitMix64(seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                for block in bytes.chunks_exact_mut(34) {
                    block[..2].copy_from_slice(&scale);
                    for q in block[2..].chunks_exact_mut(8) {
                        q.copy_from_slice(&rng.next_u64().to_le_bytes());
                    }
                }
            });
        let mut t = HeadOnlyTarget {
            vocab,
            hidden,
            layers,
            table,
            packed: None,
        };
        let packing = std::env::var("DSPARK_PACK").as_deref() != Ok("0");
        let plain = t.plain();
        let pack = plain.format().and_then(|f| f.pack).filter(|_| packing);
        // A table that cannot be packed (no memory for the copy) runs from its own layout.
        let packed = pack.and_then(|pack| pack(&plain).ok().flatten());
        t.packed = packed;
        t
    }

    /// The table as a matrix (`vocab` rows of `hidden`), with its packed copy if any.
    pub fn matrix(&self) -> Matrix<'_> {
        match &self.packed {
            Some(p) => self.plain().with_packed(p),
            None => self.plain(),
        }
    }

    fn plain(&self) -> Matrix<'_> {
        Matrix::new(GgmlType::Q8_0, self.vocab, self.hidden, &self.table).expect("sizes set by new")
    }

    /// Bytes of the table.
    pub fn bytes(&self) -> u64 {
        self.table.len() as u64
    }
}

impl Target for HeadOnlyTarget {
    fn shape(&self) -> TargetShape {
        TargetShape {
            hidden: self.hidden,
            layers: self.layers,
            vocab: self.vocab,
        }
    }

    fn capacity(&self) -> usize {
        0
    }

    fn len(&self) -> usize {
        0
    }

    fn step_bytes(&self, _rows: usize, _logits: Logits, _captures: usize) -> u64 {
        0
    }

    fn forward(&mut self, _tokens: &[u32], _capture: &[usize], _logits: Logits) -> Result<Forward> {
        Err(RuntimeError::Request(
            "a head-only target has no decoder layers to run".into(),
        ))
    }

    fn committed(&self) -> usize {
        0
    }

    fn commit(&mut self) {}

    fn rollback(&mut self, to: usize) -> Result<()> {
        if to == 0 {
            Ok(())
        } else {
            Err(RuntimeError::Request(format!(
                "a head-only target holds no position {to}"
            )))
        }
    }

    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let m = self.matrix();
        for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(self.hidden)) {
            if t as usize >= self.vocab {
                return Err(RuntimeError::Request(format!(
                    "token {t} is outside the vocabulary of {}",
                    self.vocab
                )));
            }
            m.row_f32(t as usize, o);
        }
        Ok(())
    }

    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        gemm(&self.matrix(), hidden, logits);
    }
}
