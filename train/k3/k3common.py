"""Paths and helpers of the K3 pipeline (train/k3/); the shared ones come from train/common.py.

Everything heavy lives under K3_WORK (default /tmp/train/k3work); only the final pair is copied into
the repository (examples/k3-pair/). The tokenizer is the code pair's (examples/code-pair/tokenizer.json).
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent))  # train/common.py, train/prompts.py (after train/k3/ itself)
os.environ.setdefault("TRAIN_WORK", os.environ.get("K3_WORK", "/tmp/train/k3work"))

from common import (EOT, LLAMA_BIN, MASK, REPO, SEED, cosine_lr, log, read_json, sha256_bytes,  # noqa: E402,F401
                    setup_torch, write_json)

WORK = Path(os.environ["TRAIN_WORK"])
CORPUS = WORK / "corpus"
TOKENIZER = REPO / "examples" / "code-pair" / "tokenizer.json"
TARGET_DIR = WORK / "target"          # ckpt.pt (resumable), model.pt (final), train_summary.json
TARGET_GGUF = WORK / "target.gguf"
CONT_DIR = WORK / "continuations"
DRAFT_DIR = WORK / "draft"
EVAL_DIR = WORK / "eval"
EXAMPLE_DIR = REPO / "examples" / "k3-pair"
DSPARK = Path(os.environ.get("DSPARK", "/tmp/dspark-k3/dspark"))
CAPTURE = (3, 7, 11)                  # the drafter's taps: all three MLA layers (README: why)


def load_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(TOKENIZER))


def special_ids(tok):
    return tok.token_to_id(EOT), tok.token_to_id(MASK)


def save_atomic(obj, path):
    import torch
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_target(path=None, dtype=None):
    """The trained K3 (final weights, or the latest checkpoint if training has not finished)."""
    import torch
    from model import K3Config, KimiK3
    path = Path(path or (TARGET_DIR / "model.pt" if (TARGET_DIR / "model.pt").exists() else TARGET_DIR / "ckpt.pt"))
    ck = torch.load(path, map_location="cpu", weights_only=False)
    m = KimiK3(K3Config.from_dict(ck["config"]))
    m.load_state_dict(ck["model"])
    if dtype is not None:
        m = m.to(dtype)
    return m.eval()
