#!/usr/bin/env python3
"""Write a tiny random Kimi-K3 GGUF (llama.cpp ``kimi-k3`` layout) for the reference and the runtime.

Written from docs/KIMI-K3.md (the kimi-k3 layout: keys, tensors, loader constraints); it shares
no code with the Rust crates. Defaults = the small 4-layer geometry given there: hidden 64, 4 layers, H = 2 heads,
KDA head dim D = 32 (d_in = 64), conv kernel K = 4, layer 3 MLA (head_count_kv = [0, 0, 0, 1]), plain attn_q,
kv_lora 32, rope 8, qk_nope 16, v_head 16, MLA sigmoid gate, 1 leading dense layer (ffn 128), 4 experts
top-2, 1 shared expert, expert ffn 32, latent 32 with a routed norm, sigmoid gating, weights norm on,
scale 1.0, attn_res block size 2, SiTU beta 4 / linear beta 25, gate lower bound -5, eps 1e-5, vocab 512,
context 4096.

Tensor types follow the converter (conversion/base.py L1083-1121): 1-D tensors, ``*_norm.weight``,
``ffn_gate_inp``, ``ssm_conv1d_*`` and every tensor whose name does not end in ``.weight`` (``ssm_a``,
``ssm_dt.bias``, ``exp_probs_b.bias``) are F32; every other matrix is ``--wtype``. For q8_0, a matrix whose
row (ne0) is not a multiple of 32 falls back to F16, as the converter does on ``gguf.QuantError`` (e.g.
``attn_k_b`` with qk_nope 16).

Random weights (numpy shapes (rows, cols) = reversed ne): token_embd N(0, 1); matrices N(0, 1/sqrt(fan_in))
(times a gain of 2 for MLA q / kv_a so attention is not flat, 3 for the lm head so logits have margins);
norms 1 + N(0, 0.1); res scores N(0, 1.5/sqrt(E)) (scores O(1): the mixes are soft, not one-hot);
conv taps N(0, 1/sqrt(K)); ssm_a = -exp(A_log), A_log ~ U(-1, 1); ssm_dt.bias N(0, 0.1);
exp_probs_b N(0, 0.1).

Tokenizer (llama.cpp loads it): tokenizer.ggml.model "gpt2", pre "qwen2"; ids 0-255 = the 256 bytes in
GPT-2's byte-to-unicode alphabet (id = byte value), then merges " x" (26, "Ġa"...) and "xy" letter pairs
as room allows, filler "<tN>" tokens, and 3 control tokens at the end: <|endoftext|> (bos, pad),
<|im_start|>, <|im_end|> (eos); token_type 1 normal / 3 control; add_bos false. --tokenizer-json writes
the same vocabulary as a Hugging Face tokenizer.json (BPE, qwen2 split regex + byte-level).

  PY tests/reference/make_tiny_kimi_k3.py /tmp/k3.gguf --wtype q8_0 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType
from gguf.quants import quantize

ARCH = "kimi-k3"

WTYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "bf16": GGMLQuantizationType.BF16,
    "q8_0": GGMLQuantizationType.Q8_0,
}
FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # llama_ftype ALL_F32 / MOSTLY_F16 / _Q8_0 / _BF16
GATING = {"softmax": 1, "sigmoid": 2, "softmax-weight": 3, "sqrt-softplus": 4}  # llama-hparams.h L16-22


@dataclass
class Config:
    layers: int = 4
    hidden: int = 64
    heads: int = 2
    kda_head_dim: int = 32
    conv_kernel: int = 4
    mla_layers: tuple = (3,)
    q_lora_rank: int = 0
    kv_lora_rank: int = 32
    rope_dim: int = 8
    qk_nope: int = 16
    v_head_dim: int = 16
    mla_gate: bool = True
    dense_layers: int = 1
    ffn: int = 128
    experts: int = 4
    experts_used: int = 2
    shared_experts: int = 1
    expert_ffn: int = 32
    latent: int = 32
    routed_norm: bool = True
    weights_norm: bool = True
    weights_scale: float = 1.0
    gating: str = "sigmoid"
    expert_groups: int = 0
    expert_groups_used: int = 0
    block_size: int = 2
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    gate_lower_bound: float | None = -5.0
    eps: float = 1e-5
    vocab: int = 512
    context: int = 4096

    def replace(self, **kw) -> "Config":
        return dataclasses.replace(self, **kw)

    def validate(self) -> None:
        """The loader constraints of docs/KIMI-K3.md (llama-model.cpp L1359-1374) that a file must meet."""
        c = self
        assert 1 <= c.layers <= 512, "block_count must be in [1, 512]"
        assert all(0 <= i < c.layers for i in c.mla_layers), "mla layer id out of range"
        assert c.conv_kernel >= 2, "ssm.conv_kernel must be >= 2"
        assert c.situ_beta != 0, "situ_beta must be != 0"
        assert 0 < c.rope_dim and c.qk_nope > 0, "rope and nope dims must be > 0"
        assert c.vocab >= 256 + 3, "vocab must hold 256 byte tokens + 3 control tokens"
        assert c.gating in GATING, f"gating must be one of {list(GATING)}"
        assert c.latent >= 0 and c.q_lora_rank >= 0 and c.block_size >= 0, "negative sizes"
        if c.dense_layers < c.layers:
            assert 0 < c.experts <= 1024 and 0 < c.experts_used <= c.experts, "need 0 < experts_used <= experts <= 1024"
            if c.expert_groups > 1:
                assert c.expert_groups < c.experts and c.experts % c.expert_groups == 0, \
                    "expert_groups must divide experts and be < experts"
                assert 0 < c.expert_groups_used < c.expert_groups, "need 0 < expert_groups_used < expert_groups"
                per = c.experts // c.expert_groups
                assert per >= 2, "group scoring takes the top 2 of each group (ggml_argsort_top_k asserts)"
                assert c.experts_used <= c.expert_groups_used * per, "top-k would pick masked (-inf) experts"

    @property
    def d_inner(self) -> int:
        return self.heads * self.kda_head_dim

    @property
    def latent_width(self) -> int:
        return self.latent if self.latent > 0 else self.hidden

    @property
    def shexp_width(self) -> int:
        return self.expert_ffn * max(1, self.shared_experts)


# ---- weights ------------------------------------------------------------------------------------

def make_weights(cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 arrays keyed by GGUF tensor name; numpy shape = reversed ggml ne."""
    cfg.validate()
    rng = np.random.default_rng(seed)
    E, H, D, K = cfg.hidden, cfg.heads, cfg.kda_head_dim, cfg.conv_kernel
    din = cfg.d_inner

    def mat(*shape, gain=1.0):  # last numpy axis = fan_in (ne0)
        return (rng.normal(0.0, gain / np.sqrt(shape[-1]), size=shape)).astype(np.float32)

    def norm(n):
        return (1.0 + rng.normal(0.0, 0.1, size=n)).astype(np.float32)

    def res(n):
        return rng.normal(0.0, 1.5 / np.sqrt(n), size=n).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": rng.normal(0.0, 1.0, size=(cfg.vocab, E)).astype(np.float32)}
    A = cfg.block_size
    for i in range(cfg.layers):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = norm(E)
        w[b + "ffn_norm.weight"] = norm(E)
        if A > 0:
            w[b + "attn_res_score.weight"] = res(E)
            w[b + "ffn_res_score.weight"] = res(E)
        if i not in cfg.mla_layers:  # KDA
            for x in "qkv":
                w[b + f"attn_{x}.weight"] = mat(din, E)
            for x in "qkv":
                w[b + f"ssm_conv1d_{x}.weight"] = rng.normal(0.0, 1.0 / np.sqrt(K), size=(din, 1, K)).astype(np.float32)
            w[b + "ssm_f_a.weight"] = mat(D, E)
            w[b + "ssm_f_b.weight"] = mat(din, D)
            w[b + "ssm_beta.weight"] = mat(H, E)
            w[b + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 1.0, size=H))).astype(np.float32)
            w[b + "ssm_dt.bias"] = rng.normal(0.0, 0.1, size=din).astype(np.float32)
            w[b + "ssm_g.weight"] = mat(din, E)
            w[b + "ssm_norm.weight"] = norm(D)
            w[b + "attn_output.weight"] = mat(E, din)
        else:  # MLA
            dqk = cfg.qk_nope + cfg.rope_dim
            if cfg.q_lora_rank > 0:
                w[b + "attn_q_a.weight"] = mat(cfg.q_lora_rank, E)
                w[b + "attn_q_a_norm.weight"] = norm(cfg.q_lora_rank)
                w[b + "attn_q_b.weight"] = mat(H * dqk, cfg.q_lora_rank, gain=2.0)
            else:
                w[b + "attn_q.weight"] = mat(H * dqk, E, gain=2.0)
            w[b + "attn_kv_a_mqa.weight"] = mat(cfg.kv_lora_rank + cfg.rope_dim, E, gain=2.0)
            w[b + "attn_kv_a_norm.weight"] = norm(cfg.kv_lora_rank)
            w[b + "attn_k_b.weight"] = mat(H, cfg.kv_lora_rank, cfg.qk_nope)   # ne {d_n, r_kv, H}
            w[b + "attn_v_b.weight"] = mat(H, cfg.v_head_dim, cfg.kv_lora_rank)  # ne {r_kv, d_v, H}
            if cfg.mla_gate:
                w[b + "attn_gate.weight"] = mat(H * cfg.v_head_dim, E)
            w[b + "attn_output.weight"] = mat(E, H * cfg.v_head_dim)
        if i < cfg.dense_layers:
            w[b + "ffn_gate.weight"] = mat(cfg.ffn, E)
            w[b + "ffn_up.weight"] = mat(cfg.ffn, E)
            w[b + "ffn_down.weight"] = mat(E, cfg.ffn)
        else:
            El, Fe, Ne = cfg.latent_width, cfg.expert_ffn, cfg.experts
            w[b + "ffn_gate_inp.weight"] = mat(Ne, E)
            w[b + "exp_probs_b.bias"] = rng.normal(0.0, 0.1, size=Ne).astype(np.float32)
            w[b + "ffn_gate_exps.weight"] = mat(Ne, Fe, El)
            w[b + "ffn_up_exps.weight"] = mat(Ne, Fe, El)
            w[b + "ffn_down_exps.weight"] = mat(Ne, El, Fe)
            if cfg.latent > 0:
                w[b + "ffn_routed_down.weight"] = mat(El, E)
                w[b + "ffn_routed_up.weight"] = mat(E, El)
                if cfg.routed_norm:
                    w[b + "ffn_routed_norm.weight"] = norm(El)
            if cfg.shared_experts > 0:
                Fs = cfg.shexp_width
                w[b + "ffn_gate_shexp.weight"] = mat(Fs, E)
                w[b + "ffn_up_shexp.weight"] = mat(Fs, E)
                w[b + "ffn_down_shexp.weight"] = mat(E, Fs)
    w["output_norm.weight"] = norm(E)
    w["output.weight"] = mat(cfg.vocab, E, gain=3.0)
    if A > 0:
        w["output_res_score.weight"] = res(E)
    return w


def tensor_qtype(name: str, a: np.ndarray, wtype: str) -> GGMLQuantizationType:
    """The type the converter would store this tensor as (conversion/base.py L1083-1168)."""
    if (a.ndim <= 1 or name.endswith("_norm.weight") or "ffn_gate_inp" in name or "ssm_conv1d" in name
            or not name.endswith(".weight")):
        return GGMLQuantizationType.F32
    qt = WTYPES[wtype]
    if qt == GGMLQuantizationType.Q8_0 and a.shape[-1] % 32:
        return GGMLQuantizationType.F16  # gguf.QuantError -> "falling back to F16"
    return qt


def encode(a: np.ndarray, qt: GGMLQuantizationType) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    if qt == GGMLQuantizationType.F32:
        return a
    if qt == GGMLQuantizationType.F16:
        return a.astype(np.float16)
    return quantize(a, qt)


# ---- tokenizer ------------------------------------------------------------------------------------

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def make_vocab(vocab: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) for a vocabulary of exactly `vocab` entries."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges: list[str] = []
    room = vocab - 256 - len(CONTROL)
    letters = "abcdefghijklmnopqrstuvwxyz"
    sp = b2u[ord(" ")]
    cands = [(sp, c) for c in letters] + [(x, y) for x in letters for y in letters]
    for a, b in cands[:max(0, room)]:
        tokens.append(a + b)
        merges.append(f"{a} {b}")
    n_fill = vocab - len(CONTROL) - len(tokens)
    tokens += [f"<t{i}>" for i in range(n_fill)]
    types = [1] * len(tokens) + [3] * len(CONTROL)
    tokens += CONTROL
    assert len(tokens) == vocab
    return tokens, types, merges


QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def tokenizer_json(vocab: int) -> dict:
    tokens, types, merges = make_vocab(vocab)
    n = len(tokens)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in range(n - len(CONTROL), n)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens[:n - len(CONTROL)])},
                  "merges": merges},
    }


# ---- writer -------------------------------------------------------------------------------------

def write_gguf(path: str, cfg: Config, weights: dict[str, np.ndarray], wtype: str = "f32") -> dict[str, GGMLQuantizationType]:
    """Write the file; returns the type each tensor was stored as."""
    cfg.validate()
    a = ARCH
    wr = GGUFWriter(path, arch=a)
    wr.add_string("general.name", "dspark-tiny-kimi-k3-random")
    wr.add_uint32("general.file_type", FILE_TYPES[wtype])
    wr.add_uint32(f"{a}.vocab_size", cfg.vocab)
    wr.add_uint32(f"{a}.context_length", cfg.context)
    wr.add_uint32(f"{a}.embedding_length", cfg.hidden)
    wr.add_uint32(f"{a}.block_count", cfg.layers)
    wr.add_uint32(f"{a}.feed_forward_length", cfg.ffn)
    wr.add_uint32(f"{a}.attention.head_count", cfg.heads)
    wr.add_array(f"{a}.attention.head_count_kv", [1 if i in cfg.mla_layers else 0 for i in range(cfg.layers)])
    wr.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    # KDA
    wr.add_uint32(f"{a}.ssm.conv_kernel", cfg.conv_kernel)
    wr.add_uint32(f"{a}.kda.head_dim", cfg.kda_head_dim)
    if cfg.gate_lower_bound is not None:
        wr.add_float32(f"{a}.kda.gate_lower_bound", cfg.gate_lower_bound)
    # MLA
    if cfg.q_lora_rank > 0:
        wr.add_uint32(f"{a}.attention.q_lora_rank", cfg.q_lora_rank)
    wr.add_uint32(f"{a}.attention.kv_lora_rank", cfg.kv_lora_rank)
    wr.add_uint32(f"{a}.rope.dimension_count", cfg.rope_dim)
    wr.add_uint32(f"{a}.attention.key_length", cfg.kv_lora_rank + cfg.rope_dim)
    wr.add_uint32(f"{a}.attention.value_length", cfg.kv_lora_rank)
    wr.add_uint32(f"{a}.attention.key_length_mla", cfg.qk_nope + cfg.rope_dim)
    wr.add_uint32(f"{a}.attention.value_length_mla", cfg.v_head_dim)
    # MoE
    wr.add_uint32(f"{a}.expert_count", cfg.experts)
    wr.add_uint32(f"{a}.expert_used_count", cfg.experts_used)
    if cfg.expert_groups > 0:
        wr.add_uint32(f"{a}.expert_group_count", cfg.expert_groups)
        wr.add_uint32(f"{a}.expert_group_used_count", cfg.expert_groups_used)
    wr.add_uint32(f"{a}.expert_feed_forward_length", cfg.expert_ffn)
    wr.add_uint32(f"{a}.expert_shared_count", cfg.shared_experts)
    wr.add_uint32(f"{a}.leading_dense_block_count", cfg.dense_layers)
    wr.add_float32(f"{a}.expert_weights_scale", cfg.weights_scale)
    wr.add_bool(f"{a}.expert_weights_norm", cfg.weights_norm)
    wr.add_uint32(f"{a}.expert_gating_func", GATING[cfg.gating])
    wr.add_uint32(f"{a}.expert_latent_length", cfg.latent)
    # SiTU, attention residuals
    wr.add_float32(f"{a}.activation.situ_beta", cfg.situ_beta)
    wr.add_float32(f"{a}.activation.situ_linear_beta", cfg.situ_linear_beta)
    wr.add_uint32(f"{a}.attn_res.block_size", cfg.block_size)
    # tokenizer
    tokens, types, merges = make_vocab(cfg.vocab)
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("qwen2")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(cfg.vocab - 3)
    wr.add_pad_token_id(cfg.vocab - 3)
    wr.add_eos_token_id(cfg.vocab - 1)
    wr.add_add_bos_token(False)

    types_out = {}
    for name, arr in weights.items():
        qt = tensor_qtype(name, arr, wtype)
        types_out[name] = qt
        data = encode(arr, qt)
        if qt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            wr.add_tensor(name, data)
        else:
            wr.add_tensor(name, data, raw_dtype=qt)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return types_out


def build(path: str, cfg: Config, seed: int = 0, wtype: str = "f32"):
    """make_weights + write_gguf; returns (weights, types)."""
    w = make_weights(cfg, seed)
    return w, write_gguf(path, cfg, w, wtype)


def _int_list(s: str) -> tuple:
    s = s.strip()
    return tuple(int(v) for v in s.split(",") if v.strip()) if s else ()


def main(argv=None) -> int:
    d = Config()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wtype", choices=sorted(WTYPES), default="f32")
    ap.add_argument("--layers", type=int, default=d.layers)
    ap.add_argument("--hidden", type=int, default=d.hidden)
    ap.add_argument("--heads", type=int, default=d.heads)
    ap.add_argument("--kda-head-dim", type=int, default=d.kda_head_dim)
    ap.add_argument("--conv-kernel", type=int, default=d.conv_kernel)
    ap.add_argument("--mla-layers", type=_int_list, default=d.mla_layers,
                    help="comma list of 0-based MLA layer ids ('' = none); head_count_kv = 1 there, 0 elsewhere")
    ap.add_argument("--q-lora-rank", type=int, default=d.q_lora_rank, help="0 = plain attn_q")
    ap.add_argument("--kv-lora-rank", type=int, default=d.kv_lora_rank)
    ap.add_argument("--rope-dim", type=int, default=d.rope_dim)
    ap.add_argument("--qk-nope", type=int, default=d.qk_nope)
    ap.add_argument("--v-head-dim", type=int, default=d.v_head_dim)
    ap.add_argument("--no-mla-gate", action="store_true")
    ap.add_argument("--dense-layers", type=int, default=d.dense_layers, help="leading_dense_block_count")
    ap.add_argument("--ffn", type=int, default=d.ffn)
    ap.add_argument("--experts", type=int, default=d.experts)
    ap.add_argument("--experts-used", type=int, default=d.experts_used)
    ap.add_argument("--shared-experts", type=int, default=d.shared_experts, help="0 = no shexp tensors")
    ap.add_argument("--expert-ffn", type=int, default=d.expert_ffn)
    ap.add_argument("--latent", type=int, default=d.latent, help="0 = experts at full width, no routed down/up")
    ap.add_argument("--routed-norm", action=argparse.BooleanOptionalAction, default=d.routed_norm)
    ap.add_argument("--weights-norm", action=argparse.BooleanOptionalAction, default=d.weights_norm)
    ap.add_argument("--weights-scale", type=float, default=d.weights_scale)
    ap.add_argument("--gating", choices=list(GATING), default=d.gating)
    ap.add_argument("--expert-groups", type=int, default=d.expert_groups)
    ap.add_argument("--expert-groups-used", type=int, default=d.expert_groups_used)
    ap.add_argument("--block-size", type=int, default=d.block_size, help="attn_res.block_size; 0 disables")
    ap.add_argument("--situ-beta", type=float, default=d.situ_beta)
    ap.add_argument("--situ-linear-beta", type=float, default=d.situ_linear_beta)
    ap.add_argument("--gate-lower-bound", type=float, default=d.gate_lower_bound)
    ap.add_argument("--no-gate-lower-bound", action="store_true", help="omit the key (kimi-linear softplus gate)")
    ap.add_argument("--eps", type=float, default=d.eps)
    ap.add_argument("--vocab", type=int, default=d.vocab)
    ap.add_argument("--context", type=int, default=d.context)
    ap.add_argument("--tokenizer-json", help="also write a HF tokenizer.json for the same vocabulary")
    a = ap.parse_args(argv)
    cfg = Config(layers=a.layers, hidden=a.hidden, heads=a.heads, kda_head_dim=a.kda_head_dim,
                 conv_kernel=a.conv_kernel, mla_layers=tuple(a.mla_layers), q_lora_rank=a.q_lora_rank,
                 kv_lora_rank=a.kv_lora_rank, rope_dim=a.rope_dim, qk_nope=a.qk_nope, v_head_dim=a.v_head_dim,
                 mla_gate=not a.no_mla_gate, dense_layers=a.dense_layers, ffn=a.ffn, experts=a.experts,
                 experts_used=a.experts_used, shared_experts=a.shared_experts, expert_ffn=a.expert_ffn,
                 latent=a.latent, routed_norm=a.routed_norm, weights_norm=a.weights_norm,
                 weights_scale=a.weights_scale, gating=a.gating, expert_groups=a.expert_groups,
                 expert_groups_used=a.expert_groups_used, block_size=a.block_size, situ_beta=a.situ_beta,
                 situ_linear_beta=a.situ_linear_beta,
                 gate_lower_bound=None if a.no_gate_lower_bound else a.gate_lower_bound,
                 eps=a.eps, vocab=a.vocab, context=a.context)
    if not cfg.mla_layers or len(set(cfg.mla_layers)) == cfg.layers:
        print("make_tiny_kimi_k3: warning: llama.cpp (0c1e570) loads but aborts at decode on a kimi-k3 model without "
              "both KDA and MLA layers (hybrid memory input GGML_ASSERT(buffer)); the reference runs it", file=sys.stderr)
    try:
        build(a.out, cfg, a.seed, a.wtype)
    except AssertionError as e:
        print(f"make_tiny_kimi_k3: invalid geometry: {e}", file=sys.stderr)
        return 2
    if a.tokenizer_json:
        with open(a.tokenizer_json, "w") as f:
            json.dump(tokenizer_json(cfg.vocab), f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
