"""A zero-acceptance drafter: the same folder with seeded random weights.

Not a training step. For benchmarks that need a drafter with a trained one's geometry
and cost but whose drafts essentially never match (acceptance ~ 0, tau ~ 1.0), e.g. the
widened pair's worst case: SRC (a SpecForge DSpark drafter folder: config.json +
*.safetensors, e.g. /tmp/train/widened/draft) is copied to DST with every tensor
replaced by values of the same name, shape and dtype - N(0, 0.02) for matrices, 1.0 for
norm weights, 0 for biases - drawn from one generator seeded with --seed, in the files'
tensor order. config.json and every other file are copied unchanged. Like all of
/tmp/train it is rebuilt, not committed.

Usage: random_drafter.py SRC DST [--seed N]
"""
import argparse
import shutil
import sys
from pathlib import Path

from common import SEED, log, setup_torch

torch = setup_torch()
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

STD = 0.02


def random_like(name, t, gen):
    if name.endswith("norm.weight"):
        return torch.ones_like(t)
    if name.endswith(".bias"):
        return torch.zeros_like(t)
    return (torch.randn(t.shape, generator=gen, dtype=torch.float32) * STD).to(t.dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    src, dst = Path(args.src), Path(args.dst)
    assert (src / "config.json").exists(), f"{src}: no config.json"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    gen = torch.Generator().manual_seed(args.seed)
    n = 0
    for f in sorted(src.iterdir()):
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
            continue
        with safe_open(str(f), "pt") as h:
            meta = h.metadata()
            out = {k: random_like(k, h.get_tensor(k), gen) for k in h.keys()}
        save_file(out, str(dst / f.name), metadata=meta)
        n += sum(t.numel() for t in out.values())
        log(f"{f.name}: {len(out)} tensors randomised")
    log(f"wrote {dst}: {n/1e6:.2f}M params (seed {args.seed}, std {STD}, norms 1, biases 0), config unchanged")


if __name__ == "__main__":
    sys.exit(main())
