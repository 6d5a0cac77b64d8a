"""Greedy tokens of dspark and llama.cpp on the same Kimi K3 GGUFs and prompts.

Writes kimi-k3 files with the numpy reference's independent generator
(tests/reference/make_tiny_kimi_k3.py) across the layout's options and weight types,
requantizes each with `llama-quantize --allow-requantize F OUT TYPE` for every
`--requant` type (MXFP4_MOE: the routed experts — every tensor with ne[2] > 1, which
for kimi-k3 includes MLA's attn_k_b / attn_v_b — become MXFP4, the rest Q8_0; Q4_K_M,
Q8_0: as llama-quantize decides, with its fallbacks for rows that are not whole blocks),
decodes N greedy tokens after P random prompts with `dspark generate` and with
`llama_dump --greedy` (bench/llama_dump.sh builds it), and prints per file how many
tokens agree before the first difference, and (when the runtime's `greedy_top` example is
built) how many prompts had every step's top logit bit-exact.

A difference is examined where it happens: llama_dump re-evaluates the prompt and the
common prefix in the same schedule (prompt in one batch, then one token per decode) and
the step's logits tell whether the two tokens were llama.cpp's top two and how far apart
their logits were ("gap"). When they were not close, the float64 numpy reference
(tests/reference/kimi_k3_ref.py, Q8_0 activations for Q8_0 weights) evaluates the same
tokens: if the two tokens are its top two and close, the runs parted at a near-tie that
llama.cpp resolved differently after a routing decision went the other way (its smallest
top-k margin, "route margin", is printed). A difference explained by neither is a bug; the
script prints the commands that reproduce it (the generator, llama-quantize, dspark,
llama_dump).

    PY bench/k3_llama_greedy.py [--n 48] [--prompts 8] [--attention f16|f32]
        [--requant MXFP4_MOE,Q4_K_M,Q8_0] [--configs a,b] [--keep DIR] [-- LLAMA_DUMP_FLAGS]

With llama.cpp's defaults (flash attention) compare `--attention f16`; with
`-- --fa off --ctk f32` compare `--attention f32`. PY needs numpy and gguf
(tests/python/requirements.txt). Exit status 1 when a difference is not a near-tie.
"""
import argparse
import collections
import json
import os
import random
import shlex
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(REPO, "tests", "reference", "make_tiny_kimi_k3.py")
# The runtime's greedy steps with their top logits (cargo build --release -p dspark-runtime
# --example greedy_top); when built, each prompt's top logits are compared bit for bit.
GREEDY_TOP = os.path.join(REPO, "target", "release", "examples", "greedy_top")
REF = os.path.join(REPO, "tests", "reference", "kimi_k3_ref.py")
CONFIGS = {
    "default": [],
    "lora-latent-shared": ["--q-lora-rank", "32", "--block-size", "3", "--weights-scale", "2.5", "--layers", "6", "--mla-layers", "1,3,5"],
    "nolatent-noshared": ["--latent", "0", "--shared-experts", "0", "--block-size", "0", "--no-gate-lower-bound"],
    "softmax-groups": ["--gating", "softmax", "--experts", "8", "--experts-used", "3", "--expert-groups", "4", "--expert-groups-used", "2", "--no-weights-norm"],
    "q8": ["--wtype", "q8_0", "--hidden", "128", "--kda-head-dim", "32", "--qk-nope", "32", "--kv-lora-rank", "64", "--latent", "64", "--expert-ffn", "64"],
    "f16": ["--wtype", "f16", "--block-size", "5", "--layers", "8", "--mla-layers", "3,7", "--dense-layers", "2"],
    "bf16": ["--wtype", "bf16", "--conv-kernel", "2"],
    # Rows of 256 almost everywhere, so Q4_K_M stores K-quants (Q4_K, Q6_K) rather than its
    # 32-block fallbacks, and MXFP4 experts have 8 blocks per row.
    "wide256": ["--hidden", "256", "--heads", "2", "--kda-head-dim", "128", "--qk-nope", "256", "--kv-lora-rank", "256",
                "--v-head-dim", "32", "--ffn", "512", "--latent", "256", "--expert-ffn", "256", "--experts", "8", "--experts-used", "2"],
}
# Both tokens among llama.cpp's top two, their logits at most this far apart: a near-tie,
# where summation order inside the products decides (docs/KIMI-K3.md).
NEAR_TIE = 0.05


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def tensor_types(path):
    """Count of tensors per storage type, e.g. {'MXFP4': 6, 'Q8_0': 40, 'F32': 59}."""
    from gguf import GGUFReader
    c = collections.Counter(t.tensor_type.name for t in GGUFReader(path).tensors)
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def step_logits(a, path, prompt, prefix, tmp):
    """llama.cpp's logits of the step after prompt + prefix, in the greedy run's schedule."""
    toks = prompt + prefix
    chunks = [len(prompt)] + [1] * len(prefix)
    out = os.path.join(tmp, "step.json")
    run([a.llama_dump, path, "--tokens", ",".join(map(str, toks)), "--chunks", ",".join(map(str, chunks)),
         "--out", out, "--threads", a.threads] + a.llama_flags)
    with open(out) as f:
        return json.load(f)["logits"][-1]


def top2_gap(logits, a, b):
    """Whether tokens a and b are the top two of `logits`, and logit[b] − logit[a]."""
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    return set(order[:2]) == {a, b}, logits[b] - logits[a]


def reference(path, tokens, tmp):
    """The float64 reference's last logits row and its smallest routing margin per position."""
    out = os.path.join(tmp, "ref.json")
    run([sys.executable, REF, path, "--tokens", ",".join(map(str, tokens)), "--ggml-activations", "--out", out])
    with open(out) as f:
        r = json.load(f)
    return r["logits"][-1], r["route_margin"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--attention", default="f16")
    ap.add_argument("--dspark", default=os.path.join(REPO, "target", "release", "dspark"))
    ap.add_argument("--llama-dump", default="/tmp/llama_dump")
    ap.add_argument("--llama-quantize", default="/tmp/llamacpp/build/bin/llama-quantize")
    ap.add_argument("--requant", default="MXFP4_MOE,Q4_K_M,Q8_0",
                    help="comma list of llama-quantize types each file is also run as ('' = the generator's files only)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma list of generator configurations")
    ap.add_argument("--keep", help="write the files here (a new or empty folder) instead of a temporary one")
    ap.add_argument("--threads", default="2")
    ap.add_argument("llama_flags", nargs="*")
    a = ap.parse_args()
    requant = [t for t in a.requant.split(",") if t]
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"k3_llama_greedy: unknown config {c!r} (known: {', '.join(CONFIGS)})")
    total = same = bugs = 0
    summary = collections.defaultdict(lambda: [0, 0])
    exact = collections.defaultdict(lambda: [0, 0])
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        for name in configs:
            args = CONFIGS[name]
            base = os.path.join(tmp, f"{name}.gguf")
            gen_cmd = [sys.executable, GEN, base, "--seed", "7"] + args
            run(gen_cmd)
            files = [("as generated", base, [gen_cmd])]
            for qt in requant:
                out = os.path.join(tmp, f"{name}-{qt.lower()}.gguf")
                q_cmd = [a.llama_quantize, "--allow-requantize", base, out, qt]
                run(q_cmd)
                files.append((qt, out, [gen_cmd, q_cmd]))
            for label, path, make in files:
                rng = random.Random(name)
                agree, notes, bit_exact = [], [], []
                for p in range(a.prompts):
                    prompt = [rng.randrange(0, 500) for _ in range(3 + 4 * p)]
                    toks = ",".join(map(str, prompt))
                    out = os.path.join(tmp, "l.json")
                    llama_cmd = [a.llama_dump, path, "--tokens", toks, "--greedy", str(a.n), "--out", out,
                                 "--threads", a.threads, "--gen-top", "1", "--no-logits"] + a.llama_flags
                    # --no-logits: only the prompt's last row, as llama-completion (and
                    # dspark generate) ask for it.
                    run(llama_cmd)
                    with open(out) as f:
                        dumped = json.load(f)
                    theirs = dumped["generated"]
                    if os.path.exists(GREEDY_TOP):
                        # Every step's top logit, bit for bit (the runtime's greedy steps).
                        top = json.loads(run([GREEDY_TOP, path, "--tokens", toks, "-n", str(a.n), "-k", "1",
                                              "-t", a.threads, "--attention", a.attention]).stdout)["top"]
                        bits = lambda rows: [(r[0][0], struct.pack("<f", r[0][1])) for r in rows]
                        same_bits = bits(top) == bits(dumped["gen_top"])
                        exact[label][0] += same_bits
                        exact[label][1] += 1
                        bit_exact.append(same_bits)
                    ours_cmd = [a.dspark, "generate", "-m", path, "--prompt-tokens", toks, "-n", str(a.n), "--ignore-eos",
                                "--json", "-t", a.threads, "--attention", a.attention]
                    ours = json.loads(run(ours_cmd).stdout)["tokens"]
                    k = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
                    agree.append(k)
                    total += 1
                    same += k == a.n
                    summary[label][0] += k == a.n
                    summary[label][1] += 1
                    if k < a.n:
                        lg = step_logits(a, path, prompt, theirs[:k], tmp)
                        top2, gap = top2_gap(lg, ours[k], theirs[k])
                        tie = top2 and gap <= NEAR_TIE
                        note = (f"prompt {p} step {k}: dspark {ours[k]}, llama.cpp {theirs[k]}, "
                                f"gap {gap:.3g} of max {max(lg):.3g}")
                        if tie:
                            note += " (near-tie)"
                        else:
                            rl, margins = reference(path, prompt + theirs[:k], tmp)
                            rtop2, rgap = top2_gap(rl, ours[k], theirs[k])
                            tie = rtop2 and abs(rgap) <= NEAR_TIE
                            m = [x for x in margins if x is not None]
                            note += (f"; float64 reference: gap {rgap:.3g}, route margin min {min(m, default=float('nan')):.3g}"
                                     f" last {margins[-1] if margins[-1] is not None else float('nan'):.3g}"
                                     f" ({'near-tie in the reference' if tie else 'NOT a near-tie'})")
                        notes.append(note)
                        if not tie:
                            bugs += 1
                            notes.append("  repro: " + " && ".join(shlex.join(c) for c in make + [llama_cmd, ours_cmd]))
                bits_note = f"; top logits bit-exact: {sum(bit_exact)}/{len(bit_exact)}" if bit_exact else ""
                print(f"{name:20s} {label:13s} tokens agreeing before the first difference: {agree}{bits_note}")
                print(f"{'':34s} tensor types: {tensor_types(path)}")
                for n in notes:
                    print(f"{'':34s} {n}")
                sys.stdout.flush()
    for label, (s, t) in summary.items():
        e, et = exact[label]
        bit = f"; every step's top logit bit-exact: {e}/{et}" if et else ""
        print(f"{label:13s} identical: {s}/{t}{bit}")
    print(f"identical: {same}/{total}; differences that are not near-ties: {bugs}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
