"""Paths and small helpers shared by train/smol/ (the SmolLM2-135M-Instruct pair).

Heavy intermediates live under WORK (default /tmp/train/smol, `$SMOL_WORK`); only what
examples/smol-pair/ commits is written into the repository.
"""
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "smol-pair"
TARGET_GGUF = EXAMPLE / "target.gguf"
WORK = Path(os.environ.get("SMOL_WORK", "/tmp/train/smol"))
HF_DIR = WORK / "hf"                  # LlamaForCausalLM rebuilt from the GGUF (fp32)
USERS = WORK / "users.jsonl"          # self-synthesised user turns (Magpie-style)
CONVS = WORK / "convs.jsonl"          # user turn + the target's response, token ids
HELDOUT_CONVS = WORK / "heldout_convs.jsonl"  # held-out turns + greedy responses (validation)
FEATS = WORK / "features"             # captured target features per conversation
DRAFT_WORK = WORK / "draft"           # training checkpoints (resumable)
DSPARK = Path(os.environ.get("DSPARK", REPO / "target" / "release" / "dspark"))
LLAMACPP = Path(os.environ.get("LLAMACPP", "/tmp/llamacpp"))
LLAMA_BIN = LLAMACPP / "build" / "bin"
LLAMA_DUMP = Path(os.environ.get("LLAMA_DUMP", "/tmp/llama_dump"))
SEED = 20261203
# Outputs of these target layers (0-based HF decoder layers) feed the drafter; all
# < n_layer - 1 = 29, so llama.cpp taps them as inputs of layers 2, 8, 15, 22, 28.
CAPTURE = [1, 7, 14, 21, 27]
BLOCK = 8


def log(msg, file=None):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if file is not None:
        with open(file, "a") as f:
            f.write(line + "\n")


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json(p, obj):
    p = Path(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, p)


def read_jsonl(p):
    with open(p) as f:
        return [json.loads(line) for line in f if line.strip()]


def dspark_generate(args, threads=1):
    """Runs `dspark generate --json ARGS` on the target; returns the parsed object."""
    cmd = [str(DSPARK), "generate", "-m", str(TARGET_GGUF), "--json", "-t", str(threads), *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def setup_torch(threads=2):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    return torch
