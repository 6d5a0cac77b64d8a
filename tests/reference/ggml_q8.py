"""Q8_0 rounding of matmul activations as ggml's x86 CPU backend does it.

Before a product with a Q8_0 weight, ggml's CPU matmul converts each activation row to
Q8_0 (its ``vec_dot_type``). On x86 (AVX/AVX2, ``ggml-cpu/arch/x86/quants.c``
``quantize_row_q8_0``) the recipe differs from the reference quantizer gguf-py implements
(``ggml-quants.c`` ``quantize_row_q8_0_ref``) in two details: the values are scaled by
``id = 127 / amax`` (not ``1 / d``) and rounded to nearest with ties to even (not away from
zero); the stored scale is ``f16(amax / 127)`` either way. The two agree except for values
on a rounding boundary, which are rare but flip a quant (and can flip a token of a random
model). dspark's runtime uses this recipe for activations (``crates/quant``
``q8_0::quantize_activations``); weights are quantized with the reference recipe.
"""
import numpy as np


def round_q8_activations(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` (last axis, whole blocks of 32) rounded through Q8_0, float32 out."""
    x = np.ascontiguousarray(a, dtype=np.float32)
    shape = x.shape
    b = x.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1, keepdims=True).astype(np.float32)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.clip(np.rint((b * inv).astype(np.float32)), -128, 127)
    scale = d.astype(np.float16).astype(np.float32)
    return (q.astype(np.float32) * scale).astype(np.float32).reshape(shape)
