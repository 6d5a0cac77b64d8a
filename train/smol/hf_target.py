"""The target as a Hugging Face LlamaForCausalLM, rebuilt from examples/smol-pair/target.gguf,
and checked against llama.cpp's logits on the same file.

* Every tensor dequantized to fp32 with gguf-py (`gguf.quants.dequantize`: Q4_1 matrices, the
  Q8_0 token embedding, F32 norms), so the model computes with the GGUF's own weights, not
  the original BF16 ones.
* Names mapped back from llama.cpp's; attn_q / attn_k un-permuted (llama.cpp's converter
  interleaves each head's rotary halves for its `llama` rope: (heads, 2, d/2) -> (heads, d/2, 2)).
* Config from the GGUF's llama.* keys; tied embeddings (the file has no output.weight).
* Check: full logits of N chat prompts plus their greedy continuations by `llama_dump`
  (libllama, flash attention and F16 cache as llama.cpp's defaults) vs transformers in fp32:
  max |difference| relative to each row's logit range, top-1 agreement, KL(llama || hf).
  The two cannot be bit-equal: llama.cpp quantizes activations to Q8_1 for its Q4_1 products
  and keeps the cache in F16. Tolerance asserted: top-1 agreement >= 99 % of positions whose
  llama.cpp top-2 margin exceeds 0.5, mean KL < 0.01 nats.

Usage: hf_target.py [--check N]  -> WORK/hf/, WORK/hf_check.json
"""
import argparse
import json
import subprocess
import sys

import numpy as np

from paths import HF_DIR, LLAMA_DUMP, TARGET_GGUF, WORK, dspark_generate, log, setup_torch, write_json

torch = setup_torch()
import gguf  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
CHECK_PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how a refrigerator works in simple terms.",
    "Give me three tips for learning a new language.",
    "What are the health benefits of drinking water?",
    "How do I make a cup of tea?",
]


def unpermute(w, n_head):
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def field(r, key):
    f = r.fields[key]
    return f.contents()


def build():
    r = gguf.GGUFReader(str(TARGET_GGUF))
    assert field(r, "general.architecture") == "llama"
    n_layer = int(field(r, "llama.block_count"))
    n_head = int(field(r, "llama.attention.head_count"))
    n_kv = int(field(r, "llama.attention.head_count_kv"))
    hidden = int(field(r, "llama.embedding_length"))
    cfg = LlamaConfig(
        vocab_size=int(field(r, "llama.vocab_size")), hidden_size=hidden,
        intermediate_size=int(field(r, "llama.feed_forward_length")), num_hidden_layers=n_layer,
        num_attention_heads=n_head, num_key_value_heads=n_kv, head_dim=hidden // n_head,
        max_position_embeddings=int(field(r, "llama.context_length")),
        rms_norm_eps=float(field(r, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(field(r, "llama.rope.freq_base")), tie_word_embeddings=True,
        bos_token_id=int(field(r, "tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field(r, "tokenizer.ggml.eos_token_id")),
        pad_token_id=int(field(r, "tokenizer.ggml.padding_token_id")),
        attention_bias=False, mlp_bias=False,
    )
    sd = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)] if len(t.shape) > 1 else [int(t.shape[0])])
        p = t.name.split(".")
        if p[0] == "blk":
            kind = p[2]
            if kind == "attn_q":
                w = unpermute(w, n_head)
            elif kind == "attn_k":
                w = unpermute(w, n_kv)
            sd[f"model.layers.{p[1]}.{NAMES[kind]}.weight"] = w
        elif t.name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = w
        elif t.name == "output_norm.weight":
            sd["model.norm.weight"] = w
        else:
            raise SystemExit(f"{TARGET_GGUF}: tensor {t.name} not expected in SmolLM2")
    model = LlamaForCausalLM(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                                                strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    model.save_pretrained(HF_DIR)
    log(f"{TARGET_GGUF.name} -> {HF_DIR} ({sum(p.numel() for p in model.parameters())/1e6:.1f}M params)")
    return model


def check(model, n):
    rows = []
    for prompt in CHECK_PROMPTS[:n]:
        g = dspark_generate(["--chat", "-p", prompt, "-n", "32", "--chat-date", "2026-12-03"])
        ids = g["prompt_tokens"] + g["tokens"]
        out = WORK / "llama_dump.json"
        subprocess.run([str(LLAMA_DUMP), str(TARGET_GGUF), "--tokens", ",".join(map(str, ids)),
                        "--threads", "2", "--out", str(out)], check=True, capture_output=True)
        ref = np.array(json.loads(out.read_text())["logits"], dtype=np.float64)
        with torch.no_grad():
            hf = model(input_ids=torch.tensor([ids])).logits[0].double().numpy()
        assert ref.shape == hf.shape, (ref.shape, hf.shape)
        for a, b in zip(ref, hf):
            top2 = np.sort(a)[-2:]
            pa = np.exp(a - a.max()); pa /= pa.sum()
            lb = b - b.max(); lb = lb - np.log(np.exp(lb).sum())
            la = np.log(pa + 1e-300)
            rows.append({"diff": float(np.abs(a - b).max()), "range": float(a.max() - a.min()),
                         "same_top1": bool(a.argmax() == b.argmax()), "margin": float(top2[1] - top2[0]),
                         "kl": float((pa * (la - lb)).sum())})
    clear = [r for r in rows if r["margin"] > 0.5]
    res = {
        "positions": len(rows), "prompts": n,
        "max_abs_logit_diff": max(r["diff"] for r in rows),
        "median_abs_logit_diff": float(np.median([r["diff"] for r in rows])),
        "max_rel_diff": max(r["diff"] / r["range"] for r in rows),
        "top1_agreement": sum(r["same_top1"] for r in rows) / len(rows),
        "top1_agreement_margin_gt_0.5": sum(r["same_top1"] for r in clear) / max(len(clear), 1),
        "mean_kl": float(np.mean([r["kl"] for r in rows])),
        "max_kl": max(r["kl"] for r in rows),
    }
    write_json(WORK / "hf_check.json", res)
    log(f"HF vs llama.cpp logits: {json.dumps(res)}")
    assert res["top1_agreement_margin_gt_0.5"] >= 0.99 and res["mean_kl"] < 0.01, res
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", type=int, default=6)
    args = ap.parse_args()
    model = build().eval()
    if args.check:
        check(model, args.check)


if __name__ == "__main__":
    sys.exit(main())
