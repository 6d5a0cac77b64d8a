"""Step 3 - export the trained K3 to llama.cpp's `kimi-k3` GGUF: routed experts (`ffn_*_exps`) MXFP4 as K3
ships them, every other matrix Q8_0, and F32 where llama.cpp's converter forces it (1-D tensors, norms,
`ffn_gate_inp`, `ssm_conv1d_*`). Tokenizer keys are copied from the code pair's target.gguf (same
tokenizer.json), so llama.cpp and dspark tokenize as the code pair does.

MXFP4 is written by `mxfp4_quantize` below, a transcription of ggml's `quantize_row_mxfp4_ref`
(ggml-quants.c: block = one E8M0 exponent byte e = floor(log2(amax)) − 2 + 127 and 16 bytes of E2M1
indices, value j in the low nibble of byte j and value j + 16 in the high nibble; each value takes the
nearest of d·{0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}, d = 2^(e−127)/2, the first on a tie). The export checks,
on every expert tensor, that the bytes equal gguf-py's `quants.quantize` and libggml's own
`quantize_row_mxfp4_ref` (ctypes, when /tmp/llamacpp's libggml-base.so is there), and that libggml's
`dequantize_row_mxfp4` of the bytes equals gguf-py's dequantization: `export_check.json`.

Writes WORK/target.gguf and WORK/target_dequant.npz (the file's weights, dequantized: what agree.py and the
drafter's features use). Skips if target.gguf exists and is newer than the model (K3_FORCE=1 redoes it).

  K3_WORK=/tmp/train/k3work nice -n 19 python train/k3/export.py
"""
import ctypes
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize

from k3common import LLAMA_BIN, REPO, TARGET_DIR, TARGET_GGUF, WORK, log, setup_torch, write_json

torch = setup_torch()
from k3common import load_target  # noqa: E402
from model import gguf_tensors  # noqa: E402

ARCH = "kimi-k3"
CODE_PAIR_GGUF = REPO / "examples" / "code-pair" / "target.gguf"
FTYPE_MOSTLY_MXFP4_MOE = 38   # llama.h LLAMA_FTYPE_MOSTLY_MXFP4_MOE
QK_MXFP4 = 32
E2M1_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def e8m0_to_fp32_half(e: np.ndarray) -> np.ndarray:
    """ggml-impl.h GGML_E8M0_TO_FP32_HALF: 2^(e−127) / 2 (subnormal for e < 2)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return bits.view(np.float32)


def mxfp4_quantize(a: np.ndarray) -> np.ndarray:
    """float32 [..., n] (n % 32 == 0) -> uint8 [..., n/32·17], ggml's block_mxfp4 rows."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    rows = a.shape[:-1]
    x = a.reshape(-1, QK_MXFP4)
    amax = np.max(np.abs(x), axis=1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
    d = e8m0_to_fp32_half(e)[:, None, None]
    err = np.abs(d * E2M1_DOUBLED[None, None, :] - x[:, :, None])          # float32, as ggml
    idx = np.argmin(err, axis=2).astype(np.uint8)                             # first minimum, as ggml's strict <
    qs = idx[:, :16] | (idx[:, 16:] << 4)
    out = np.concatenate([e[:, None], qs], axis=1)
    return out.reshape(*rows, -1)


def mxfp4_dequantize(b: np.ndarray, n: int) -> np.ndarray:
    b = b.reshape(-1, 17)
    d = e8m0_to_fp32_half(b[:, 0])[:, None]
    lo, hi = b[:, 1:] & 0x0F, b[:, 1:] >> 4
    return (d * np.concatenate([E2M1_DOUBLED[lo], E2M1_DOUBLED[hi]], axis=1)).reshape(-1, n)


def libggml():
    p = LLAMA_BIN / "libggml-base.so"
    if not p.exists():
        return None
    lib = ctypes.CDLL(str(p))
    lib.quantize_row_mxfp4_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.dequantize_row_mxfp4.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def check_mxfp4(name: str, a: np.ndarray, mine: np.ndarray, lib) -> dict:
    ref = quantize(a.astype(np.float32), QT.MXFP4)
    rep = {"tensor": name, "blocks": int(a.size // QK_MXFP4), "bytes_equal_gguf_py": bool(np.array_equal(ref, mine))}
    deq_py = dequantize(mine, QT.MXFP4).reshape(a.shape)
    rep["own_dequant_equal_gguf_py"] = bool(np.array_equal(mxfp4_dequantize(mine, a.shape[-1]).reshape(a.shape), deq_py))
    if lib is not None:
        src = np.ascontiguousarray(a, dtype=np.float32)
        out = np.zeros_like(mine)
        lib.quantize_row_mxfp4_ref(src.ctypes.data, out.ctypes.data, src.size)
        rep["bytes_equal_libggml"] = bool(np.array_equal(out, mine))
        deq = np.zeros(a.size, dtype=np.float32)
        lib.dequantize_row_mxfp4(np.ascontiguousarray(mine).ctypes.data, deq.ctypes.data, a.size)
        rep["libggml_dequant_equal_gguf_py"] = bool(np.array_equal(deq.reshape(a.shape), deq_py))
    rep["rel_rmse"] = float(np.sqrt(np.mean((deq_py - a) ** 2) / np.mean(a ** 2)))
    return rep


def qtype_for(name: str, a: np.ndarray):
    if a.ndim <= 1 or name.endswith("_norm.weight") or "ffn_gate_inp" in name or "ssm_conv1d" in name \
            or not name.endswith(".weight"):
        return QT.F32
    if "_exps." in name:
        return QT.MXFP4
    assert a.shape[-1] % 32 == 0, f"{name}: rows of {a.shape[-1]} are not Q8_0 blocks"
    return QT.Q8_0


def copy_tokenizer(w: GGUFWriter):
    r = GGUFReader(str(CODE_PAIR_GGUF))
    for f in r.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        v = f.contents()
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            w.add_array(f.name, v) if f.types[1] != GGUFValueType.STRING else w.add_array(f.name, list(v))
            if f.types[1] == GGUFValueType.INT32 and f.name == "tokenizer.ggml.token_type":
                pass
        elif t == GGUFValueType.STRING:
            w.add_string(f.name, v)
        elif t == GGUFValueType.UINT32:
            w.add_uint32(f.name, v)
        elif t == GGUFValueType.BOOL:
            w.add_bool(f.name, v)
        else:
            raise ValueError(f"{f.name}: unexpected type {t}")


def write_gguf(path, c, tensors, n_params):
    w = GGUFWriter(str(path) + ".tmp", arch=ARCH)
    a = ARCH
    w.add_string("general.name", f"dspark k3-pair target (Kimi-K3 layout {c.layers}x{c.hidden}, CPython 3.11 stdlib)")
    w.add_string("general.size_label", f"{n_params / 1e6:.1f}M")
    w.add_uint32("general.file_type", FTYPE_MOSTLY_MXFP4_MOE)
    w.add_uint32("general.quantization_version", 2)
    w.add_uint32(f"{a}.vocab_size", c.vocab)
    w.add_uint32(f"{a}.context_length", c.context)
    w.add_uint32(f"{a}.embedding_length", c.hidden)
    w.add_uint32(f"{a}.block_count", c.layers)
    w.add_uint32(f"{a}.feed_forward_length", c.ffn)
    w.add_uint32(f"{a}.attention.head_count", c.heads)
    w.add_array(f"{a}.attention.head_count_kv", [1 if i in c.mla_layers else 0 for i in range(c.layers)])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", c.eps)
    w.add_uint32(f"{a}.ssm.conv_kernel", c.conv_kernel)
    w.add_uint32(f"{a}.kda.head_dim", c.kda_head_dim)
    w.add_float32(f"{a}.kda.gate_lower_bound", c.gate_lower_bound)
    w.add_uint32(f"{a}.attention.kv_lora_rank", c.kv_lora_rank)
    w.add_uint32(f"{a}.rope.dimension_count", c.rope_dim)
    w.add_uint32(f"{a}.attention.key_length", c.kv_lora_rank + c.rope_dim)
    w.add_uint32(f"{a}.attention.value_length", c.kv_lora_rank)
    w.add_uint32(f"{a}.attention.key_length_mla", c.qk_nope + c.rope_dim)
    w.add_uint32(f"{a}.attention.value_length_mla", c.v_head_dim)
    w.add_uint32(f"{a}.expert_count", c.experts)
    w.add_uint32(f"{a}.expert_used_count", c.experts_used)
    w.add_uint32(f"{a}.expert_feed_forward_length", c.expert_ffn)
    w.add_uint32(f"{a}.expert_shared_count", c.shared_experts)
    w.add_uint32(f"{a}.leading_dense_block_count", c.dense_layers)
    w.add_float32(f"{a}.expert_weights_scale", c.weights_scale)
    w.add_bool(f"{a}.expert_weights_norm", c.weights_norm)
    w.add_uint32(f"{a}.expert_gating_func", 2)  # sigmoid
    w.add_uint32(f"{a}.expert_latent_length", c.latent)
    w.add_float32(f"{a}.activation.situ_beta", c.situ_beta)
    w.add_float32(f"{a}.activation.situ_linear_beta", c.situ_linear_beta)
    w.add_uint32(f"{a}.attn_res.block_size", c.block_size)
    copy_tokenizer(w)
    types, dequant, checks = {}, {}, []
    lib = libggml()
    for name in sorted(tensors, key=lambda n: (not n.startswith("token_embd"), n)):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        qt = qtype_for(name, arr)
        types[name] = qt.name
        if qt == QT.F32:
            w.add_tensor(name, arr)
            dequant[name] = arr
        elif qt == QT.MXFP4:
            data = mxfp4_quantize(arr)
            checks.append(check_mxfp4(name, arr, data, lib))
            w.add_tensor(name, data, raw_dtype=qt)
            dequant[name] = dequantize(data, qt).reshape(arr.shape).astype(np.float32)
        else:
            data = quantize(arr, qt)
            w.add_tensor(name, data, raw_dtype=qt)
            dequant[name] = dequantize(data, qt).reshape(arr.shape).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(path) + ".tmp", path)
    return types, dequant, checks


def main():
    model_path = TARGET_DIR / "model.pt"
    if not model_path.exists():
        model_path = TARGET_DIR / "ckpt.pt"
        log(f"export: no final model yet, exporting the checkpoint {model_path}")
    if TARGET_GGUF.exists() and TARGET_GGUF.stat().st_mtime > model_path.stat().st_mtime \
            and os.environ.get("K3_FORCE") != "1":
        log(f"export: {TARGET_GGUF} is newer than {model_path}; skipped")
        return 0
    model = load_target(model_path)
    tensors = gguf_tensors(model)
    n_params = sum(int(np.prod(a.shape)) for a in tensors.values())
    types, dequant, checks = write_gguf(TARGET_GGUF, model.c, tensors, n_params)
    np.savez(WORK / "target_dequant.npz", **dequant)
    counts = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    ok = all(all(v for k, v in c.items() if isinstance(v, bool)) for c in checks)
    rep = {"gguf": str(TARGET_GGUF), "bytes": TARGET_GGUF.stat().st_size, "params": n_params, "types": counts,
           "source": str(model_path), "mxfp4_checks_all_equal": ok,
           "mxfp4_rel_rmse_max": max(c["rel_rmse"] for c in checks), "mxfp4": checks}
    # what quantization costs: held-out loss of the trained float32 weights vs the file's (dequantized)
    held = WORK / "tokens_heldout.npy"
    if held.exists():
        from dequant_target import load_exported
        from train_target import heldout_loss
        data = np.load(held)
        rep["heldout_loss_64x256"] = {"float32_trained": heldout_loss(model.train(), data, 256, 64),
                                      "gguf_dequantized": heldout_loss(load_exported().train(), data, 256, 64)}
        log(f"export: held-out loss (64 windows of 256) trained float32 {rep['heldout_loss_64x256']['float32_trained']:.4f}"
            f" -> GGUF weights {rep['heldout_loss_64x256']['gguf_dequantized']:.4f} nats/token")
    write_json(WORK / "export_check.json", rep)
    log(f"export: {TARGET_GGUF} {TARGET_GGUF.stat().st_size / 1e6:.2f} MB, {n_params / 1e6:.2f}M params, types {counts}; "
        f"MXFP4 bytes == gguf-py and libggml, dequant == libggml: {ok}; "
        f"MXFP4 relative RMSE ≤ {rep['mxfp4_rel_rmse_max']:.4f}")
    if not ok:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
