"""Step 9 - the widened pair: a Qwen3-0.6B-shaped copy of the trained pair whose
added width, heads and layers compute exactly nothing (written to
/tmp/train/widened/, NOT committed).

Shapes: hidden 256 -> 1024, target layers 6 -> 28 (22 identity layers appended
after the original ones, so captured layer ids stay valid), heads 4/2 -> 16/8,
head_dim 64 -> 128, intermediate 768 -> 3072, vocab unchanged; drafter keeps its
layer count and gets the same widening.

Exactness (in exact arithmetic; fp32 differs only by summation order):
* residual stream = [x; 0]: embedding columns zero-padded; every projection that
  writes the residual (o_proj, down_proj, drafter fc) has zero rows in the padded
  dims; added heads / intermediate units / v dims have zero o_proj / down_proj
  columns; added layers have o_proj = down_proj = 0 (identity).
* hidden RMSNorms: mean(x^2) over 1024 zero-padded dims = mean over 256 / 4, so
  eps' = eps / 4 and w' = w * sqrt(256/1024) = w / 2 give identical outputs.
* per-head q/k norms (head_dim 64 -> 128): original dim d goes to position 2d (so
  the NeoX RoPE pair (i, i+32) at frequency theta^(-2i/64) lands on the pair
  (2i, 2i+64) at theta^(-2(2i)/128): the same frequency); odd positions are zero.
  With the one global eps' = eps/4, q_proj and k_proj rows are scaled by 1/sqrt(2)
  (mean over 128 dims = (1/2)(1/2) mean over 64 = mean/4); q_norm weight w_q
  (unchanged) then yields sqrt(2) q_hat, k_norm weight w_k/sqrt(2) yields k_hat,
  and the score sqrt(2) q_hat.k_hat / sqrt(128) = q_hat.k_hat / sqrt(64).
* v: original 64 dims in the first 64 of each 128-dim head; o_proj columns mapped.
* LM head: zero-padded input columns; Markov W1/W2 unchanged; confidence head:
  [hidden(1024); W1 row(64)] with zero columns for the padded hidden dims.
"""
import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

from common import DRAFT_DIR, EXAMPLE_DIR, TARGET_DIR, WIDENED, WORK, log, setup_torch, write_json

torch = setup_torch()
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

H0, H1 = 256, 1024
HD0, HD1 = 64, 128
NH1, NKV1 = 16, 8
FF1 = 3072
L1 = 28
S = math.sqrt(H0 / H1)          # hidden-norm weight scale (= 1/2)
R2 = 1.0 / math.sqrt(2.0)


def qk_rows(n_heads0):
    """new row index of original q/k row h*64+d: h*128 + 2d."""
    return torch.tensor([h * HD1 + 2 * d for h in range(n_heads0) for d in range(HD0)])


def v_rows(n_heads0):
    return torch.tensor([h * HD1 + d for h in range(n_heads0) for d in range(HD0)])


def widen_layer(src, dst, nh0, nkv0, ff0):
    """Copy one decoder layer (HF Qwen3 / SpecForge DFlash layer naming) into the wide one."""
    with torch.no_grad():
        for p in dst.parameters():
            p.zero_()
        a0, a1 = src.self_attn, dst.self_attn
        qr, kr, vr = qk_rows(nh0), qk_rows(nkv0), v_rows(nkv0)
        a1.q_proj.weight[qr, :H0] = a0.q_proj.weight * R2
        a1.k_proj.weight[kr, :H0] = a0.k_proj.weight * R2
        a1.v_proj.weight[vr, :H0] = a0.v_proj.weight
        a1.o_proj.weight[:H0, v_rows(nh0)] = a0.o_proj.weight
        a1.q_norm.weight[0::2] = a0.q_norm.weight
        a1.k_norm.weight[0::2] = a0.k_norm.weight * R2
        m0, m1 = src.mlp, dst.mlp
        m1.gate_proj.weight[:ff0, :H0] = m0.gate_proj.weight
        m1.up_proj.weight[:ff0, :H0] = m0.up_proj.weight
        m1.down_proj.weight[:H0, :ff0] = m0.down_proj.weight
        dst.input_layernorm.weight[:H0] = src.input_layernorm.weight * S
        dst.post_attention_layernorm.weight[:H0] = src.post_attention_layernorm.weight * S


def identity_layer(dst):
    with torch.no_grad():
        for p in dst.parameters():
            p.zero_()
        # norms at a harmless constant; o_proj = down_proj = 0 makes the layer the identity
        dst.input_layernorm.weight.fill_(S)
        dst.post_attention_layernorm.weight.fill_(S)
        dst.self_attn.q_norm.weight.fill_(1.0)
        dst.self_attn.k_norm.weight.fill_(1.0)


def widen_target(small: Qwen3ForCausalLM, name: str) -> Qwen3ForCausalLM:
    c0 = small.config
    assert (c0.hidden_size, c0.head_dim) == (H0, HD0)
    c1 = Qwen3Config(
        vocab_size=c0.vocab_size, hidden_size=H1, intermediate_size=FF1, num_hidden_layers=L1,
        num_attention_heads=NH1, num_key_value_heads=NKV1, head_dim=HD1,
        max_position_embeddings=c0.max_position_embeddings, rope_theta=c0.rope_parameters["rope_theta"],
        rms_norm_eps=c0.rms_norm_eps * H0 / H1, tie_word_embeddings=False, attention_bias=False,
        bos_token_id=c0.bos_token_id, eos_token_id=c0.eos_token_id, pad_token_id=c0.pad_token_id,
    )
    c1.architectures = ["Qwen3ForCausalLM"]
    c1.dspark_widened_copy = {"of": name, "note": "WIDENED COPY: added width/heads/layers compute nothing",
                              "original": {"hidden_size": H0, "num_hidden_layers": c0.num_hidden_layers,
                                           "num_attention_heads": c0.num_attention_heads,
                                           "num_key_value_heads": c0.num_key_value_heads,
                                           "head_dim": HD0, "intermediate_size": c0.intermediate_size}}
    wide = Qwen3ForCausalLM(c1).eval()
    with torch.no_grad():
        wide.model.embed_tokens.weight.zero_()
        wide.model.embed_tokens.weight[:, :H0] = small.model.embed_tokens.weight
        wide.lm_head.weight.zero_()
        wide.lm_head.weight[:, :H0] = small.lm_head.weight
        wide.model.norm.weight.zero_()
        wide.model.norm.weight[:H0] = small.model.norm.weight * S
    n0 = c0.num_hidden_layers
    for i in range(L1):
        if i < n0:
            widen_layer(small.model.layers[i], wide.model.layers[i], c0.num_attention_heads,
                        c0.num_key_value_heads, c0.intermediate_size)
        else:
            identity_layer(wide.model.layers[i])
    return wide


def widen_draft(small, wide_target_cfg):
    from specforge.modeling.draft.dspark import DSparkDraftModel
    c0 = small.config
    d = c0.to_dict()
    d.update(hidden_size=H1, intermediate_size=FF1, num_attention_heads=NH1, num_key_value_heads=NKV1,
             head_dim=HD1, rms_norm_eps=c0.rms_norm_eps * H0 / H1, num_target_layers=L1)
    d["dflash_config"] = dict(c0.dflash_config)
    d["dspark_widened_copy"] = {"note": "WIDENED COPY of the code-pair drafter: added width/heads compute nothing",
                                "original_hidden_size": H0, "original_num_target_layers": c0.num_target_layers}
    d.pop("_name_or_path", None)
    c1 = Qwen3Config.from_dict(d)
    c1._attn_implementation = "sdpa"
    wide = DSparkDraftModel(c1).eval()
    nh0, nkv0, ff0 = c0.num_attention_heads, c0.num_key_value_heads, c0.intermediate_size
    k = len(small.target_layer_ids)
    with torch.no_grad():
        for i, (l0, l1) in enumerate(zip(small.layers, wide.layers)):
            widen_layer(l0, l1, nh0, nkv0, ff0)
        wide.fc.weight.zero_()
        for c in range(k):  # fc input = k x hidden in target-layer order
            wide.fc.weight[:H0, c * H1:c * H1 + H0] = small.fc.weight[:, c * H0:(c + 1) * H0]
        wide.hidden_norm.weight.zero_()
        wide.hidden_norm.weight[:H0] = small.hidden_norm.weight * S
        wide.norm.weight.zero_()
        wide.norm.weight[:H0] = small.norm.weight * S
        wide.markov_head.markov_w1.weight.copy_(small.markov_head.markov_w1.weight)
        wide.markov_head.markov_w2.weight.copy_(small.markov_head.markov_w2.weight)
        cw0, cw1 = small.confidence_head.proj.weight, wide.confidence_head.proj.weight
        cw1.zero_()
        cw1[:, :H0] = cw0[:, :H0]
        cw1[:, H1:] = cw0[:, H0:]
        wide.confidence_head.proj.bias.copy_(small.confidence_head.proj.bias)
    return wide


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=str(TARGET_DIR))
    ap.add_argument("--draft", default=str(EXAMPLE_DIR / "draft"))
    ap.add_argument("--out", default=str(WIDENED))
    ap.add_argument("--prompts", default=str(WORK / "prompts_heldout.jsonl"))
    ap.add_argument("--check-prompts", type=int, default=64)
    ap.add_argument("--check-tokens", type=int, default=32)
    ap.add_argument("--tau-prompts", type=int, default=16)
    ap.add_argument("--tau-tokens", type=int, default=96)
    ap.add_argument("--llama-prompts", type=int, default=4)
    ap.add_argument("--skip-gguf", action="store_true")
    args = ap.parse_args()
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel
    from tokenizers import Tokenizer
    import eval as E
    import export as X

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(WORK / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    small_t = Qwen3ForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    small_d = DSparkDraftModel.from_pretrained(args.draft, dtype=torch.float32, attn_implementation="sdpa").eval()
    name = "dspark code-pair WIDENED COPY (Qwen3-0.6B shape, padding computes nothing)"
    wide_t = widen_target(small_t, name)
    wide_d = widen_draft(small_d, wide_t.config)
    tdir, ddir = out / "target-hf", out / "draft"
    wide_t.save_pretrained(tdir)
    shutil.copy(WORK / "tokenizer.json", tdir / "tokenizer.json")
    if ddir.exists():
        shutil.rmtree(ddir)
    wide_d.save_pretrained(ddir)  # fp32: the 1/sqrt(2) scalings are not exact in bf16
    apply_legacy_rope_scaling(str(ddir))
    n_t = sum(p.numel() for p in wide_t.parameters())
    n_d = sum(p.numel() for p in wide_d.parameters())
    log(f"widened: target {n_t/1e6:.1f}M params, drafter {n_d/1e6:.1f}M params -> {out}")
    report = {"target_params": n_t, "draft_params": n_d}

    # 1. exactness of the pieces: logits and captured features on one prompt
    prompts = [json.loads(l)["prompt"] for l in open(args.prompts)]
    ids = tok.encode(prompts[0]).ids
    with torch.inference_mode():
        o0 = small_t(input_ids=torch.tensor([ids]), output_hidden_states=True)
        o1 = wide_t(input_ids=torch.tensor([ids]), output_hidden_states=True)
        dl = (o0.logits - o1.logits).abs().max().item()
        lids = list(small_d.target_layer_ids)
        f0, f1 = E.features(o0, lids), E.features(o1, lids)
        df = max((f0[..., c * H0:(c + 1) * H0] - f1[..., c * H1:c * H1 + H0]).abs().max().item() for c in range(len(lids)))
        pad = max(f1[..., c * H1 + H0:(c + 1) * H1].abs().max().item() for c in range(len(lids)))
        B = small_d.block_size
        blk = torch.full((1, B), small_d.mask_token_id)
        blk[0, 0] = int(o0.logits[0, -1].argmax())
        pos = torch.arange(len(ids) + B).unsqueeze(0)
        h0 = small_d(position_ids=pos, noise_embedding=small_t.model.embed_tokens(blk), target_hidden=f0,
                     attention_mask=None, is_causal=False)
        h1 = wide_d(position_ids=pos, noise_embedding=wide_t.model.embed_tokens(blk), target_hidden=f1,
                    attention_mask=None, is_causal=False)
        dh = (h0 - h1[..., :H0]).abs().max().item()
        dhp = h1[..., H0:].abs().max().item()
    report["max_abs_diff"] = {"target_logits": dl, "captured_features": df, "features_padding": pad,
                              "draft_block_hidden": dh, "draft_hidden_padding": dhp}
    log(f"widened vs small, one prompt: |d logits| {dl:.2e}, |d features| {df:.2e} (padding {pad:.1e}), "
        f"|d draft hidden| {dh:.2e} (padding {dhp:.1e})")

    # 2. greedy output, transformers, small vs widened
    diffs, rows = 0, []
    for i, p in enumerate(prompts[: args.check_prompts]):
        ids = tok.encode(p).ids
        a, ma = X.hf_greedy(small_t, ids, args.check_tokens, eos)
        b, _ = X.hf_greedy(wide_t, ids, args.check_tokens, eos)
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
        if a != b:
            diffs += 1
            rows.append({"prompt": i, "first_diff": k, "small_margin": ma[k] if k is not None else None})
    report["greedy_check"] = {"prompts": min(len(prompts), args.check_prompts), "tokens": args.check_tokens,
                              "differ": diffs, "divergences": rows}
    log(f"widened greedy == small greedy (transformers, {args.check_tokens} tokens): "
        f"{report['greedy_check']['prompts'] - diffs}/{report['greedy_check']['prompts']} identical; {rows}")

    # 3. tau of the widened pair vs the small pair on the same prompts
    sub = prompts[: args.tau_prompts]
    r_small = E.run(small_t, small_d, sub, tok, args.tau_tokens)
    r_wide = E.run(wide_t, wide_d, sub, tok, args.tau_tokens)
    report["tau"] = {"prompts": len(sub), "max_new": args.tau_tokens, "small": r_small, "widened": r_wide}
    log(E.fmt(f"small pair ({len(sub)} prompts)", r_small))
    log(E.fmt(f"widened pair ({len(sub)} prompts)", r_wide))

    # 4. GGUF Q8_0 via llama.cpp's converter + llama.cpp greedy check
    if not args.skip_gguf:
        gguf_path = out / "target.gguf"
        X.convert_target(tdir, gguf_path, name)
        chk = X.check_llama(gguf_path, tdir, prompts[: args.llama_prompts], n_tokens=32)
        report["llama_check"] = chk
        log(f"widened GGUF: llama.cpp greedy == transformers (widened fp32) {chk['fp32_identical']}/"
            f"{args.llama_prompts}, (Q8_0 weights) {chk['q8_weights_identical']}/{args.llama_prompts}")
    write_json(out / "widen_report.json", report)


if __name__ == "__main__":
    sys.exit(main())
