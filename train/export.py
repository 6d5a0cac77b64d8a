"""Step 7 - export.

* target -> llama.cpp `qwen3` GGUF, Q8_0, with llama.cpp's own convert_hf_to_gguf.py
  (copied from the unpacked llama-cpp-python sdist to /tmp/train/llamacpp-convert;
  the copy's pre-tokenizer hash table is told that our tokenizer's hash is GPT-2's
  regex, "gpt-2" - the only patch).
* drafter -> the HF folder SpecForge writes (save_pretrained + apply_legacy_rope_scaling),
  weights stored as bfloat16 to keep the example small.
* check: llama.cpp (llama-completion, greedy) vs transformers greedy on held-out
  prompts, token for token (on the text), against the fp32 model and against the
  same model with the GGUF's dequantized Q8_0 weights; divergences are reported
  with the transformers top-2 logit margin at the first differing token.

Usage: export.py [--target DIR] [--draft DIR] [--out DIR] [--name NAME] [--check N]
"""
import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
from hashlib import sha256
from pathlib import Path

from common import DRAFT_DIR, EXAMPLE_DIR, LLAMA_BIN, LLAMACPP, TARGET_DIR, WORK, log, setup_torch, write_json

torch = setup_torch()
from transformers import DynamicCache, Qwen3ForCausalLM  # noqa: E402

CONVERT_SRC = LLAMACPP / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
CONVERT_DIR = Path(os.environ.get("LLAMACPP_CONVERT", "/tmp/train/llamacpp-convert"))


def prepare_hf_tokenizer(model_dir: Path):
    shutil.copy(WORK / "tokenizer.json", model_dir / "tokenizer.json")
    write_json(model_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
    })


def patched_converter(model_dir: Path) -> Path:
    """Copy llama.cpp's converter and register our tokenizer's pre-tokenizer hash as gpt-2."""
    if not (CONVERT_DIR / "convert_hf_to_gguf.py").exists():
        CONVERT_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy(CONVERT_SRC / "convert_hf_to_gguf.py", CONVERT_DIR)
        for d in ("conversion", "gguf-py"):
            shutil.copytree(CONVERT_SRC / d, CONVERT_DIR / d, dirs_exist_ok=True)
    base = CONVERT_DIR / "conversion" / "base.py"
    src = base.read_text()
    m = re.search(r"^\s*chktxt = (.*)$", src, re.M)
    chktxt = ast.literal_eval(m.group(1))
    from transformers import AutoTokenizer
    tk = AutoTokenizer.from_pretrained(model_dir)
    chkhsh = sha256(str(tk.encode(chktxt)).encode()).hexdigest()
    if chkhsh not in src:
        anchor = "        res = None\n"
        assert src.count(anchor) >= 1
        src = src.replace(anchor, anchor + f'        if chkhsh == "{chkhsh}":\n'
                          '            # dspark train/: byte-level BPE with the GPT-2 pre-tokenizer regex\n'
                          '            res = "gpt-2"\n', 1)
        base.write_text(src)
    return CONVERT_DIR / "convert_hf_to_gguf.py"


def convert_target(model_dir: Path, out: Path, name: str):
    prepare_hf_tokenizer(model_dir)
    conv = patched_converter(model_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(conv), str(model_dir), "--outtype", "q8_0", "--outfile", str(out),
           "--model-name", name]
    log("run: " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    log_dir = WORK / "eval" if out.parent.resolve() == EXAMPLE_DIR.resolve() else out.parent
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / (out.stem + ".convert.log")).write_text(r.stdout + r.stderr)
    if r.returncode:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"convert failed ({r.returncode})")
    log(f"wrote {out} ({out.stat().st_size/1e6:.2f} MB)")


GGUF_TO_HF = {
    "token_embd": "model.embed_tokens", "output": "lm_head", "output_norm": "model.norm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def gguf_weights_model(gguf_path: Path, model_dir: Path):
    """The HF model with every weight replaced by the GGUF's (dequantized) tensor."""
    sys.path.insert(0, str(CONVERT_DIR / "gguf-py"))
    import gguf
    import numpy as np
    model = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sd = model.state_dict()
    reader = gguf.GGUFReader(str(gguf_path))
    types = {}
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            hf = f"model.layers.{parts[1]}.{GGUF_TO_HF[parts[2]]}.{parts[3]}"
        else:
            hf = f"{GGUF_TO_HF[parts[0]]}.{parts[1]}"
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = np.asarray(w, dtype=np.float32).reshape(sd[hf].shape)
        sd[hf].copy_(torch.from_numpy(w))
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return model, types


@torch.inference_mode()
def hf_greedy(model, ids, n, eos):
    cache = DynamicCache()
    out = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    toks, margins = [], []
    for _ in range(n):
        lg = out.logits[0, -1]
        top = torch.topk(lg, 2)
        x = int(top.indices[0])
        toks.append(x)
        margins.append(float(top.values[0] - top.values[1]))
        if x == eos:
            break
        out = model(input_ids=torch.tensor([[x]]), past_key_values=cache, use_cache=True)
    return toks, margins


def llama_greedy(gguf_path: Path, prompt: str, n: int, tmp: Path) -> str:
    pf = tmp / "prompt.txt"
    pf.write_text(prompt)
    cmd = [str(LLAMA_BIN / "llama-completion"), "-m", str(gguf_path), "-f", str(pf), "-n", str(n),
           "--temp", "0", "--top-k", "1", "--seed", "0", "-no-cnv", "--no-display-prompt",
           "--no-escape", "-t", "2", "-c", "2048", "--no-warmup"]
    r = subprocess.run(cmd, capture_output=True, env={**os.environ, "LD_LIBRARY_PATH": str(LLAMA_BIN)})
    if r.returncode:
        raise SystemExit(f"llama-completion failed: {r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode("utf-8", errors="replace")


def check_llama(gguf_path: Path, model_dir: Path, prompts, n_tokens=64):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    fp32 = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    q8, types = gguf_weights_model(gguf_path, model_dir)
    tmp = gguf_path.parent / "check_tmp"
    tmp.mkdir(exist_ok=True)
    res = {"gguf": str(gguf_path), "tensor_types": types, "n_tokens": n_tokens, "prompts": []}
    for i, p in enumerate(prompts):
        ids = tok.encode(p).ids
        # llama-completion prints between n-1 and n+1 of the -n tokens it generates (it varies
        # from run to run); ask for 3 more and compare the first n_tokens
        lt = llama_greedy(gguf_path, p, n_tokens + 3, tmp)
        row = {"i": i}
        for name, m in (("fp32", fp32), ("q8_weights", q8)):
            toks, margins = hf_greedy(m, ids, n_tokens, eos)
            # compare on text, token by token: the first token whose decoded prefix stops matching
            agree = 0
            for k in range(1, len(toks) + 1):
                if lt.startswith(tok.decode(toks[:k])):
                    agree = k
                else:
                    break
            same = agree == len(toks)
            row[name] = {"same": same, "agree_tokens": agree, "of": len(toks)}
            if not same and agree < len(toks):
                row[name]["margin_at_divergence"] = margins[agree]
        res["prompts"].append(row)
        log(f"llama.cpp vs transformers prompt {i}: fp32 {row['fp32']} q8 {row['q8_weights']}")
    for name in ("fp32", "q8_weights"):
        res[f"{name}_identical"] = sum(r[name]["same"] for r in res["prompts"])
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def export_draft(draft_dir: Path, out: Path, name_prefix=None):
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel
    d = DSparkDraftModel.from_pretrained(draft_dir, dtype=torch.float32)
    d = d.to(torch.bfloat16)
    if out.exists():
        shutil.rmtree(out)
    d.save_pretrained(out)
    apply_legacy_rope_scaling(str(out))
    if name_prefix:
        cfg = json.loads((out / "config.json").read_text())
        cfg["_name_or_path"] = name_prefix
        (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    log(f"wrote drafter {out}: " + ", ".join(f"{p.name} {p.stat().st_size/1e6:.2f} MB" for p in out.iterdir()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=str(TARGET_DIR))
    ap.add_argument("--draft", default=str(DRAFT_DIR))
    ap.add_argument("--out", default=str(EXAMPLE_DIR))
    ap.add_argument("--name", default="dspark code-pair target (Qwen3 6x256, CPython 3.11 stdlib)")
    ap.add_argument("--draft-name", default="dspark code-pair drafter (DSpark, SpecForge 0.2.0)")
    ap.add_argument("--prompts", default=str(WORK / "prompts_heldout.jsonl"))
    ap.add_argument("--check", type=int, default=12)
    ap.add_argument("--report", default=str(WORK / "eval" / "llama_check.json"))
    ap.add_argument("--no-draft", action="store_true", help="target GGUF and its check only")
    args = ap.parse_args()
    out = Path(args.out)
    gguf_path = out / "target.gguf"
    convert_target(Path(args.target), gguf_path, args.name)
    if not args.no_draft:
        export_draft(Path(args.draft), out / "draft", args.draft_name)
    shutil.copy(WORK / "tokenizer.json", out / "tokenizer.json")
    if args.check:
        prompts = [json.loads(l)["prompt"] for l in open(args.prompts)][: args.check]
        res = check_llama(gguf_path, Path(args.target), prompts)
        write_json(args.report, res)
        log(f"llama.cpp greedy == transformers greedy: fp32 {res['fp32_identical']}/{len(prompts)}, "
            f"Q8_0 weights {res['q8_weights_identical']}/{len(prompts)}")


if __name__ == "__main__":
    sys.exit(main())
