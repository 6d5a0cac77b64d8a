"""Step 3b - three implementations of the exported target agree on held-out text: PyTorch (model.py with the
GGUF's dequantized weights), llama.cpp (bench/llama_dump.cpp built against /tmp/llamacpp) and dspark.

On the first --prompts held-out prompts (examples/k3-pair/heldout.jsonl, tokenized with the code pair's
tokenizer.json) it compares
  * logits of every prompt position, scale-relative  max|Δ| / max(1, max|ref|)  per row (worst and median
    row), and argmax agreement:
      - PyTorch float64 vs the float64 numpy reference (tests/reference/kimi_k3_ref.py) on the file: the
        same exact math, so ~1e-12;
      - PyTorch float32 vs PyTorch float64 (the training precision);
      - llama.cpp vs PyTorch float64: llama.cpp rounds every Q8_0 / MXFP4 product's activations to 8 bits
        (Q8_0 blocks) and keeps the MLA cache / flash attention in F16 by default, so ~1e-2 is expected;
        `-fa off -ctk f32` and the numpy reference with --q8-activations (ggml's activation rounding) narrow it;
  * greedy continuations (--n tokens): PyTorch float32, llama.cpp (defaults; and -fa off -ctk f32 -ctv f32),
    dspark generate (`--attention f16`, its default, and `f32`): the first position where each pair parts and
    the target's top-2 logit margin there (llama.cpp's gen_top), and whether each step's top logit of dspark
    equals llama.cpp's — dspark prints no logits, so dspark is compared through its tokens only.
Writes WORK/eval/agree.json and a log (WORK/eval/agree.log, copied into examples/k3-pair/).

  K3_WORK=/tmp/train/k3work nice -n 19 python train/k3/agree.py [--prompts 6] [--n 32]
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from k3common import DSPARK, EVAL_DIR, REPO, TARGET_GGUF, WORK, load_tokenizer, log, setup_torch, write_json

torch = setup_torch()
import numpy as np  # noqa: E402

from dequant_target import load_exported  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "reference"))
import kimi_k3_ref  # noqa: E402

LLAMA_DUMP = WORK / "llama_dump"
LOG = EVAL_DIR / "agree.log"


def rel_rows(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    d = np.max(np.abs(a - ref), axis=-1) / np.maximum(1.0, np.max(np.abs(ref), axis=-1))
    differ = np.nonzero(a.argmax(-1) != ref.argmax(-1))[0]
    top2 = -np.sort(-ref, axis=-1)[:, :2]
    return {"worst": float(d.max()), "median": float(np.median(d)),
            "argmax_equal": int(len(d) - len(differ)), "rows": int(len(d)),
            # where the argmax parts: the reference's top-2 logit margin there (a near-tie or not)
            "ref_top2_margin_where_argmax_differs": [float(top2[i, 0] - top2[i, 1]) for i in differ]}


def llama_dump(tokens, extra, greedy=0):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "o.json"
        cmd = [str(LLAMA_DUMP), str(TARGET_GGUF), "--tokens", ",".join(map(str, tokens)), "--threads", "2",
               "--out", str(out)] + extra
        if greedy:
            cmd += ["--greedy", str(greedy), "--gen-top", "2"]
        subprocess.run(cmd, check=True, capture_output=True)
        return json.loads(out.read_text())


def dspark_greedy(tokens, n, attention):
    r = subprocess.run([str(DSPARK), "generate", "--target", str(TARGET_GGUF), "--prompt-tokens",
                        ",".join(map(str, tokens)), "-n", str(n), "--ignore-eos", "--threads", "2",
                        "--attention", attention, "--json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["tokens"]


@torch.inference_mode()
def torch_greedy(model, tokens, n):
    st = model.new_state(1)
    lg = model(torch.tensor([tokens]), state=st)[0]
    out = []
    nxt = int(lg[0, -1].argmax())
    for _ in range(n):
        out.append(nxt)
        lg = model(torch.tensor([[nxt]]), state=st, chunked=False)[0]
        nxt = int(lg[0, -1].argmax())
    return out


def q8_activation_model():
    """The numpy reference's model with ggml's activation rounding on MXFP4 products too: ggml's CPU MXFP4
    dot takes Q8_0 activations (vec_dot_type), but kimi_k3_ref's --q8-activations rounds only for Q8_0
    weights. Every tensor is dequantized into the cache first; then `qtype` reports Q8_0 for MXFP4 tensors,
    which only changes which products round their activations."""
    from gguf import GGMLQuantizationType as QT
    m = kimi_k3_ref.KimiK3Gguf(str(TARGET_GGUF))
    for name in m.tensors:
        m.tensor(name)
    orig = m.qtype
    m.qtype = lambda name: QT.Q8_0 if orig(name) == QT.MXFP4 else orig(name)
    return m


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def dspark_logits(tokens, attention):
    """dspark's logits of every prompt position (`generate --logits`: the tokens evaluated as
    one batch in prompt order, as llama_dump evaluates them)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "l.jsonl"
        subprocess.run([str(DSPARK), "generate", "--target", str(TARGET_GGUF), "--prompt-tokens",
                        ",".join(map(str, tokens)), "-n", "1", "--ignore-eos", "--threads", "2",
                        "--attention", attention, "--logits", str(out)], check=True, capture_output=True)
        rows = [json.loads(line)["logits"] for line in open(out)]
    return np.asarray(rows[:len(tokens)], dtype=np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--n", type=int, default=32)
    args = ap.parse_args()
    EVAL_DIR.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    tok = load_tokenizer()
    prompts = [json.loads(line)["prompt"] for line in open(WORK / "prompts_heldout.jsonl")][:args.prompts]
    m64 = load_exported(torch.float64)
    m32 = load_exported(torch.float32)
    ref_model = kimi_k3_ref.KimiK3Gguf(str(TARGET_GGUF))
    q8_model = q8_activation_model()
    agg = {k: [] for k in ("torch64_vs_numpy_ref", "torch32_vs_torch64", "llama_default_vs_torch64",
                           "llama_fa_off_f32_vs_torch64", "llama_fa_off_f32_vs_numpy_q8act", "llama_default_vs_numpy_q8act",
                           "dspark_f16_logits_vs_llama_default", "dspark_f32_logits_vs_llama_fa_off_f32",
                           "dspark_f16_logits_vs_torch64")}
    greedy = []
    for pi, text in enumerate(prompts):
        ids = tok.encode(text).ids
        with torch.no_grad():
            l64 = m64(torch.tensor([ids]))[0][0].numpy()
            l32 = m32(torch.tensor([ids]))[0][0].numpy()
        lref, _ = kimi_k3_ref.forward_model(ref_model, ids)
        lq8, _ = kimi_k3_ref.forward_model(q8_model, ids, q8_activations=True)
        ld = np.asarray(llama_dump(ids, [])["logits"])
        lf = np.asarray(llama_dump(ids, ["--fa", "off", "--ctk", "f32"])["logits"])
        d16, d32 = dspark_logits(ids, "f16"), dspark_logits(ids, "f32")
        row = {"prompt": pi, "tokens": len(ids),
               "torch64_vs_numpy_ref": rel_rows(l64, lref), "torch32_vs_torch64": rel_rows(l32, l64),
               "llama_default_vs_torch64": rel_rows(ld, l64), "llama_fa_off_f32_vs_torch64": rel_rows(lf, l64),
               "llama_fa_off_f32_vs_numpy_q8act": rel_rows(lf, lq8), "llama_default_vs_numpy_q8act": rel_rows(ld, lq8),
               "dspark_f16_logits_vs_llama_default": rel_rows(d16, ld),
               "dspark_f32_logits_vs_llama_fa_off_f32": rel_rows(d32, lf),
               "dspark_f16_logits_vs_torch64": rel_rows(d16, l64)}
        for k in agg:
            agg[k].append(row[k])
        # greedy continuations
        g_t = torch_greedy(m32, ids, args.n)
        jd = llama_dump(ids, ["--no-logits"], greedy=args.n)
        jf = llama_dump(ids, ["--no-logits", "--fa", "off", "--ctk", "f32"], greedy=args.n)
        g_ld, g_lf = jd["generated"][:args.n], jf["generated"][:args.n]
        g_d16 = dspark_greedy(ids, args.n, "f16")
        g_d32 = dspark_greedy(ids, args.n, "f32")

        def part(a, b, top=None):
            i = first_diff(a, b)
            r = {"identical": i is None, "first_diff": i}
            if i is not None and top is not None and i < len(top):
                t = top[i]
                r["llama_top2_margin_there"] = float(t[0][1] - t[1][1]) if len(t) > 1 else None
            return r
        g = {"prompt": pi, "dspark_f16_vs_llama_default": part(g_d16, g_ld, jd.get("gen_top")),
             "dspark_f32_vs_llama_fa_off_f32": part(g_d32, g_lf, jf.get("gen_top")),
             "torch32_vs_llama_default": part(g_t, g_ld, jd.get("gen_top")),
             "torch32_vs_dspark_f32": part(g_t, g_d32), "text": tok.decode(g_ld)}
        greedy.append(g)
        log(f"prompt {pi} ({len(ids)} tokens): logits worst-row rel diff: torch64~numpy {row['torch64_vs_numpy_ref']['worst']:.1e}, "
            f"torch32~torch64 {row['torch32_vs_torch64']['worst']:.1e}, llama(default)~torch64 "
            f"{row['llama_default_vs_torch64']['worst']:.1e} (median {row['llama_default_vs_torch64']['median']:.1e}), "
            f"llama(-fa off, f32)~torch64 {row['llama_fa_off_f32_vs_torch64']['worst']:.1e}, "
            f"llama(-fa off, f32)~numpy(ggml act rounding) {row['llama_fa_off_f32_vs_numpy_q8act']['worst']:.1e}, "
            f"dspark(f16)~llama(default) {row['dspark_f16_logits_vs_llama_default']['worst']:.1e}, "
            f"dspark(f32)~llama(f32) {row['dspark_f32_logits_vs_llama_fa_off_f32']['worst']:.1e}; argmax equal "
            f"llama/torch {row['llama_default_vs_torch64']['argmax_equal']}/{len(ids)}; greedy {args.n}: "
            f"dspark(f16)=llama {g['dspark_f16_vs_llama_default']}, dspark(f32)=llama(f32) "
            f"{g['dspark_f32_vs_llama_fa_off_f32']}, torch=llama {g['torch32_vs_llama_default']}", LOG)
    summary = {}
    for k, rows in agg.items():
        summary[k] = {"worst": max(r["worst"] for r in rows), "median_of_rows_median": float(np.median([r["median"] for r in rows])),
                      "argmax_equal": sum(r["argmax_equal"] for r in rows), "rows": sum(r["rows"] for r in rows),
                      "max_ref_top2_margin_where_argmax_differs": max([m for r in rows for m in r["ref_top2_margin_where_argmax_differs"]], default=None)}
    for k in ("dspark_f16_vs_llama_default", "dspark_f32_vs_llama_fa_off_f32", "torch32_vs_llama_default", "torch32_vs_dspark_f32"):
        summary[k] = f"{sum(g[k]['identical'] for g in greedy)}/{len(greedy)} identical"
    write_json(EVAL_DIR / "agree.json", {"gguf": str(TARGET_GGUF), "prompts": len(prompts), "greedy_tokens": args.n,
                                         "summary": summary, "per_prompt_logits": [dict(zip(agg, vals)) for vals in zip(*agg.values())],
                                         "greedy": greedy})
    for k, v in summary.items():
        log(f"SUMMARY {k}: {v}", LOG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
