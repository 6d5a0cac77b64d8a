//! Which instruction sets this CPU has, as a proof value kernel tables are built from.

/// Instruction sets a kernel may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2, FMA and F16C.
    Avx2,
    /// The AVX2 set plus AVX-512 F, VL, BW and VNNI.
    Avx512Vnni,
}

/// Proof that this CPU has an instruction set: only [`Detected::scalar`] and the detecting
/// constructors make one, so a kernel table built from it never holds a kernel the CPU
/// cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detected(Isa);

impl Detected {
    /// The scalar references, which run anywhere.
    pub const fn scalar() -> Detected {
        Detected(Isa::Scalar)
    }

    /// AVX2 + FMA + F16C, when this CPU has them.
    pub fn avx2() -> Option<Detected> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Some(Detected(Isa::Avx2));
            }
        }
        None
    }

    /// AVX-512 F + VL + BW + VNNI on top of the AVX2 set, when this CPU has them.
    pub fn avx512_vnni() -> Option<Detected> {
        #[cfg(target_arch = "x86_64")]
        {
            if Detected::avx2().is_some()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
            {
                return Some(Detected(Isa::Avx512Vnni));
            }
        }
        None
    }

    /// The instruction set.
    pub fn isa(self) -> Isa {
        self.0
    }

    /// Whether the AVX2 set is available (also true under AVX-512 VNNI).
    pub fn has_avx2(self) -> bool {
        self.0 >= Isa::Avx2
    }
}
