//! Plain float formats: decoding source bytes to f32 and encoding f32 to F16 / BF16.
//!
//! Sources are little-endian byte slices with no alignment promise (safetensors data
//! offsets need not be aligned), so decoding reads pairs of bytes, which the compiler
//! vectorizes. BF16 → f32 is exact (`bits << 16`). Encoding follows gguf-py: F16 by IEEE
//! round-to-nearest-even (numpy `astype(float16)`), BF16 by ggml's
//! `ggml_compute_fp32_to_bf16` (NaN quieted with `| 0x40`, otherwise nearest-even).

use half::f16;

/// A source element type this crate can decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
}

impl SourceDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            SourceDtype::F32 => 4,
            SourceDtype::F16 | SourceDtype::BF16 => 2,
        }
    }

    /// The safetensors spelling (`"F32"`, `"F16"`, `"BF16"`).
    pub fn name(self) -> &'static str {
        match self {
            SourceDtype::F32 => "F32",
            SourceDtype::F16 => "F16",
            SourceDtype::BF16 => "BF16",
        }
    }
}

/// Decodes `src` (little-endian elements of `dtype`) into `out`.
///
/// # Panics
/// If `src.len() != out.len() * dtype.size()`.
pub fn decode(dtype: SourceDtype, src: &[u8], out: &mut [f32]) {
    assert_eq!(src.len(), out.len() * dtype.size(), "decode length");
    match dtype {
        SourceDtype::F32 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        SourceDtype::BF16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
        }
        SourceDtype::F16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
    }
}

/// f32 → bf16 bits, as ggml and gguf-py round.
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + (0x7fff + ((b >> 16) & 1))) >> 16) as u16
}

/// Encodes `x` as little-endian F16 into `out` (2 bytes per value).
pub fn encode_f16(x: &[f32], out: &mut [u8]) {
    assert_eq!(out.len(), x.len() * 2, "encode length");
    for (o, &v) in out.chunks_exact_mut(2).zip(x) {
        o.copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
    }
}

/// Encodes `x` as little-endian BF16 into `out` (2 bytes per value).
pub fn encode_bf16(x: &[f32], out: &mut [u8]) {
    assert_eq!(out.len(), x.len() * 2, "encode length");
    for (o, &v) in out.chunks_exact_mut(2).zip(x) {
        o.copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes());
    }
}

/// Encodes `x` as little-endian F32 into `out`.
pub fn encode_f32(x: &[f32], out: &mut [u8]) {
    assert_eq!(out.len(), x.len() * 4, "encode length");
    for (o, &v) in out.chunks_exact_mut(4).zip(x) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}

/// Decodes F16 / BF16 / F32 output bytes back to f32 (for error measurement).
pub fn decode_output(dtype: SourceDtype, bytes: &[u8], out: &mut [f32]) {
    decode(dtype, bytes, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_matches_round_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::INFINITY), 0x7f80);
        for bits in (0..u32::MAX).step_by(9973) {
            let x = f32::from_bits(bits);
            if !x.is_nan() {
                assert_eq!(
                    f32_to_bf16_bits(x),
                    half::bf16::from_f32(x).to_bits(),
                    "{bits:#x}"
                );
            }
        }
    }

    #[test]
    fn decode_round_trips() {
        let x = [1.5f32, -0.0, 65504.0, 1e-7];
        let mut b = vec![0u8; 8];
        encode_f16(&x, &mut b);
        let mut y = [0.0f32; 4];
        decode(SourceDtype::F16, &b, &mut y);
        assert_eq!(y[..3], x[..3]);
        encode_bf16(&x, &mut b);
        decode(SourceDtype::BF16, &b, &mut y);
        assert_eq!(y[..2], x[..2]);
    }
}
