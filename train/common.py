"""Shared paths, seeds and small helpers for the dspark training pipeline.

Everything heavy lives under WORK (default /tmp/train/work); only the final
example pair is copied into the repository (examples/code-pair/).
"""
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN_DIR = REPO / "train"
EXAMPLE_DIR = REPO / "examples" / "code-pair"
WORK = Path(os.environ.get("TRAIN_WORK", "/tmp/train/work"))
WIDENED = Path(os.environ.get("TRAIN_WIDENED", "/tmp/train/widened"))
LLAMACPP = Path(os.environ.get("LLAMACPP", "/tmp/llamacpp"))
LLAMA_BIN = LLAMACPP / "build" / "bin"

CORPUS = WORK / "corpus"            # train.txt, heldout.txt, manifest.json
TOKENIZER = WORK / "tokenizer.json"
TARGET_DIR = WORK / "target"         # HF Qwen3ForCausalLM folder
CONT_DIR = WORK / "continuations"    # cached greedy continuations (token ids)
DRAFT_DIR = WORK / "draft"           # HF folder SpecForge's DSparkDraftModel writes
EVAL_DIR = WORK / "eval"

EOT = "<|endoftext|>"
MASK = "<|mask|>"
SEED = 1234


def setup_torch(threads: int = 2):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    random.seed(SEED)
    try:
        import numpy as np
        np.random.seed(SEED)
    except ImportError:
        pass
    return torch


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def log(msg: str, file=None):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if file is not None:
        with open(file, "a") as f:
            f.write(line + "\n")


def read_json(p):
    with open(p) as f:
        return json.load(f)


def write_json(p, obj):
    p = Path(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, p)


def load_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(TOKENIZER))


def special_ids(tok):
    return tok.token_to_id(EOT), tok.token_to_id(MASK)


def cosine_lr(step: int, lr: float, warmup: int, steps: int) -> float:
    """Linear warm-up over `warmup` steps, then a cosine from `lr` down to 5 % of it."""
    import math
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))
