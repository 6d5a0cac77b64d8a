"""The exported target as a PyTorch KimiK3 holding the GGUF's weights, dequantized (Q8_0 / MXFP4 -> float32):
the model whose greedy text the drafter learns and whose taps it is fed (WORK/target_dequant.npz, written by
export.py, is read instead of the file when present)."""
import numpy as np

from k3common import TARGET_DIR, TARGET_GGUF, WORK, read_json


def load_exported(dtype=None):
    import torch
    from model import K3Config, KimiK3, load_gguf_tensors
    ck = torch.load(TARGET_DIR / ("model.pt" if (TARGET_DIR / "model.pt").exists() else "ckpt.pt"),
                    map_location="cpu", weights_only=False)
    cfg = K3Config.from_dict(ck["config"])
    cfg.eps = float(np.float32(cfg.eps))  # the file holds ε as float32
    npz = WORK / "target_dequant.npz"
    if npz.exists():
        z = np.load(npz)
        tensors = {k: z[k] for k in z.files}
    else:
        from gguf import GGUFReader
        from gguf.quants import dequantize
        r = GGUFReader(str(TARGET_GGUF))
        tensors = {t.name: np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
                   .reshape(tuple(reversed([int(v) for v in t.shape]))) for t in r.tensors}
    m = KimiK3(cfg)
    if dtype is not None:
        m = m.to(dtype)
    load_gguf_tensors(m, tensors)
    return m.eval()
