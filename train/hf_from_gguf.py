"""Rebuild WORK/target (the HF target) from the committed examples/code-pair/target.gguf.

Not a training step. /tmp is ephemeral: the fp32 Qwen3ForCausalLM folder train_target.py
wrote (66 min of training) is not committed, but widen.py, export.py's checks and
bench/side_by_side.sh (llama.cpp's converter reads the target folder when it converts the
drafter) need one. This reconstructs it from the GGUF without retraining:

* every tensor dequantized to fp32 with gguf-py (the matrices are Q8_0, so these are the
  Q8_0 weights, not the trained fp32 ones: the model equals export.py's "q8_weights" model,
  whose greedy text matched llama.cpp's on 12/12 prompts);
* names mapped back with export.GGUF_TO_HF (llama.cpp's Qwen3 converter only renames and
  reshapes; unlike llama it does not permute q/k);
* the config from the GGUF's qwen3.* keys, built as train_target.py's target_config;
* the tokenizer files export.py's prepare_hf_tokenizer writes, WORK/tokenizer.json, and
  WORK/prompts_heldout.jsonl (prompts.py writes the same lines to heldout.jsonl);
* the patched converter copy (export.patched_converter, when absent);
* check: transformers greedy vs llama-completion on the GGUF (export.check_llama), token by
  token on the text -> WORK/eval/hf_from_gguf_check.json.

Usage: hf_from_gguf.py [--gguf FILE] [--out DIR] [--check N] [--tokens N]
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

from common import EXAMPLE_DIR, TARGET_DIR, WORK, log, setup_torch, write_json

torch = setup_torch()
import export as X  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402


def hf_name(gguf_name: str) -> str:
    p = gguf_name.split(".")
    if p[0] == "blk":
        return f"model.layers.{p[1]}.{X.GGUF_TO_HF[p[2]]}.{p[3]}"
    return f"{X.GGUF_TO_HF[p[0]]}.{p[1]}"


def model_from_gguf(path: Path) -> Qwen3ForCausalLM:
    import gguf
    import numpy as np
    r = gguf.GGUFReader(str(path))
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.") or k.endswith("_id")}
    assert kv["general.architecture"] == "qwen3", kv["general.architecture"]
    a = lambda k: kv["qwen3." + k]  # noqa: E731
    names = {t.name for t in r.tensors}
    eot = kv["tokenizer.ggml.eos_token_id"]
    cfg = Qwen3Config(
        vocab_size=int(next(t for t in r.tensors if t.name == "token_embd.weight").shape[1]),
        hidden_size=a("embedding_length"), intermediate_size=a("feed_forward_length"),
        num_hidden_layers=a("block_count"), num_attention_heads=a("attention.head_count"),
        num_key_value_heads=a("attention.head_count_kv"), head_dim=a("attention.key_length"),
        max_position_embeddings=a("context_length"), rope_theta=float(a("rope.freq_base")),
        rms_norm_eps=float(str(np.float32(a("attention.layer_norm_rms_epsilon")))),  # f32 1e-6 -> 1e-06
        tie_word_embeddings="output.weight" not in names, attention_bias=False,
        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, use_cache=True,
    )
    assert a("attention.value_length") == cfg.head_dim
    cfg.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(cfg).eval()
    sd = model.state_dict()
    done = set()
    with torch.no_grad():
        for t in r.tensors:
            k = hf_name(t.name)
            w = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)  # a writable copy
            assert w.size == sd[k].numel(), (t.name, w.shape, tuple(sd[k].shape))
            sd[k].copy_(torch.from_numpy(w.reshape(sd[k].shape)))
            done.add(k)
    missing = set(sd) - done - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    assert not missing, f"tensors not in the GGUF: {sorted(missing)}"
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=str(EXAMPLE_DIR / "target.gguf"))
    ap.add_argument("--out", default=str(TARGET_DIR))
    ap.add_argument("--check", type=int, default=12, help="held-out prompts for the llama.cpp check (0: none)")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    gguf_path, out = Path(args.gguf), Path(args.out)
    WORK.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE_DIR / "tokenizer.json", WORK / "tokenizer.json")
    shutil.copy(EXAMPLE_DIR / "heldout.jsonl", WORK / "prompts_heldout.jsonl")
    model = model_from_gguf(gguf_path)
    model.save_pretrained(out)  # fp32 safetensors
    X.prepare_hf_tokenizer(out)
    n = sum(p.numel() for p in model.parameters())
    log(f"wrote {out}: {n/1e6:.2f}M params, fp32, from {gguf_path}")
    log(f"converter: {X.patched_converter(out)}")
    if args.check:
        prompts = [json.loads(l)["prompt"] for l in open(WORK / "prompts_heldout.jsonl")][: args.check]
        res = X.check_llama(gguf_path, out, prompts, n_tokens=args.tokens)
        write_json(WORK / "eval" / "hf_from_gguf_check.json", res)
        agree = [r["fp32"]["agree_tokens"] for r in res["prompts"]]
        log(f"llama.cpp greedy == transformers greedy (reconstructed fp32): {res['fp32_identical']}/{len(prompts)} "
            f"identical over {args.tokens} tokens; tokens agreeing per prompt {agree}")


if __name__ == "__main__":
    sys.exit(main())
