"""A small Kimi K3 in PyTorch, written from llama.cpp's `kimi-k3` layout (docs/KIMI-K3.md,
../shared/spec/llama-cpp/kimi-k3-layout.md) so that every parameter is one GGUF tensor.

Parameters carry the GGUF tensor names (`blk.{i}.<name>` with the layer's attribute name, see
`gguf_tensors`) and the numpy shape of the GGUF tensor (= reversed ggml ne), so export is a rename:
the checkpoint and the file are the same weights. Exceptions, each a reparametrisation that export
undoes: `ssm_a_log` (GGUF `ssm_a` = −exp(A_log)), `ssm_dt_bias` (`ssm_dt.bias`), and the buffer
`exp_probs_b` (`exp_probs_b.bias`, the selection-only routing bias, updated without gradients by
aux-loss-free balancing: `update_routing_bias`).

The forward (tokens t_0..t_{n−1}; NoPE: no positions anywhere):

  P = x_0 = token_embd[t];  C = []  (checkpoint stack);  A = block_size
  layer l:  a_in = ResMix(P; attn_res_score_l)       (tap(l−1) = a_in)
            if l % A == 0: C.append(P)               (the raw input, after a_in was computed)
            y = KDA_l(RMSNorm(a_in)·attn_norm) or MLA_l(...);  P = y if banked else P + y
            f_in = ResMix(P; ffn_res_score_l);  P += DenseSiTU_l or LatentMoE_l (RMSNorm(f_in)·ffn_norm)
  o = ResMix(P; output_res_score) (= tap(last));  logits = output · (RMSNorm(o)·output_norm)

KDA runs in two equal forms: `kda_recurrent` (the per-token recurrence of ggml's gated_delta_net, used
for decoding with carried state) and `kda_chunked` (the same recurrence over chunks of C tokens in the
WY form, for training; `test_model.py` checks them against each other and the whole model against the
float64 numpy reference `tests/reference/kimi_k3_ref.py`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class K3Config:
    vocab: int = 4096
    hidden: int = 256
    layers: int = 12
    mla_layers: tuple = (3, 7, 11)          # K3: i mod 4 = 3 (and the last layer)
    heads: int = 4                          # one head count for KDA and MLA (llama.cpp reads head_count[0])
    kda_head_dim: int = 64
    conv_kernel: int = 4
    gate_lower_bound: float = -5.0
    kv_lora_rank: int = 128
    rope_dim: int = 32                      # the "rope" part of q/k; NoPE, never rotated
    qk_nope: int = 32
    v_head_dim: int = 64
    dense_layers: int = 1
    ffn: int = 768
    experts: int = 16
    experts_used: int = 4
    shared_experts: int = 2                 # shared width = expert_ffn · shared_experts
    expert_ffn: int = 64
    latent: int = 128
    weights_norm: bool = True
    weights_scale: float = 1.0
    block_size: int = 2
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    eps: float = 1e-5
    context: int = 4096
    eot_id: int = 0

    @property
    def d_inner(self) -> int:
        return self.heads * self.kda_head_dim

    @property
    def shexp_width(self) -> int:
        return self.expert_ffn * max(1, self.shared_experts)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["mla_layers"] = list(self.mla_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "K3Config":
        d = dict(d)
        d["mla_layers"] = tuple(d["mla_layers"])
        return cls(**d)


# ---- elementwise ---------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def l2_norm(x, eps):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def situ(g, u, beta, lin_beta):
    a = beta * torch.tanh(g / beta) * torch.sigmoid(g)
    if lin_beta > 0:
        u = lin_beta * torch.tanh(u / lin_beta)
    return a * u


def res_mix(u, stack, w, eps):
    """Softmax-weighted mix of the checkpoint stack and u; empty stack -> u. The stack holds
    (c_j, 1/rms(c_j)) pairs (`checkpoint`), so a score is one dot: s_j = (c_j · w) / rms(c_j)."""
    if not stack:
        return u
    s = [(c @ w) * r for c, r in stack] + [(u @ w) * torch.rsqrt(u.pow(2).mean(-1) + eps)]
    p = torch.softmax(torch.stack(s, dim=-1), dim=-1)
    out = p[..., -1:] * u
    for j, (c, _) in enumerate(stack):
        out = out + p[..., j:j + 1] * c
    return out


def checkpoint(P, eps):
    """A stack entry for `res_mix`: the raw vector and its inverse RMS."""
    return (P, torch.rsqrt(P.pow(2).mean(-1) + eps))


# ---- KDA recurrence ------------------------------------------------------------------------------

def kda_recurrent(q, k, v, g, beta, S):
    """Per-token gated delta rule. q, k, v, g: [B, H, T, D]; beta [B, H, T]; S [B, H, D, D] (S[i][j], i key).
    Per step: S *= exp(g)[:, None] (key dim); δ = β(v − Sᵀk); S += k δᵀ; o = Sᵀq / √D. Returns (o, S)."""
    D = q.shape[-1]
    outs = []
    for t in range(q.shape[2]):
        S = S * torch.exp(g[:, :, t]).unsqueeze(-1)
        kt = k[:, :, t]
        r = torch.einsum("bhij,bhi->bhj", S, kt)
        delta = beta[:, :, t, None] * (v[:, :, t] - r)
        S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append(torch.einsum("bhij,bhi->bhj", S, q[:, :, t]) / math.sqrt(D))
    return torch.stack(outs, dim=2), S


def kda_chunked(q, k, v, g, beta, S, chunk: int = 16):
    """`kda_recurrent` in chunks of `chunk` tokens (the WY form). Within a chunk with cumulative log
    decay G_t = Σ_{s≤t} g_s (per key channel) and the state S0 at its start:
        δ_t = β_t (v_t − S0ᵀ(e^{G_t} k_t) − Σ_{s<t} δ_s ⟨k_s, e^{G_t−G_s} k_t⟩)     (unit lower-triangular solve)
        o_t = [S0ᵀ(e^{G_t} q_t) + Σ_{s≤t} δ_s ⟨k_s, e^{G_t−G_s} q_t⟩] / √D
        S_C = e^{G_C} ⊙ S0 + Σ_s (e^{G_C−G_s} k_s) δ_sᵀ
    e^{G_t−G_s} is formed as e^{G_t−M}·e^{M−G_s} with M the mid-chunk value, so no factor exceeds
    e^{|lb|·chunk/2} (lb = −5, chunk 16: e^40, well inside float32)."""
    B, H, T, D = q.shape
    pad = (-T) % chunk
    if pad:  # zero k, v, g, β: no state change, outputs dropped
        z = lambda x: F.pad(x, (0, 0, 0, pad))  # noqa: E731
        q, k, v, g = z(q), z(k), z(v), z(g)
        beta = F.pad(beta, (0, pad))
    N = (T + pad) // chunk
    sh = (B, H, N, chunk, D)
    q, k, v, g = q.reshape(sh), k.reshape(sh), v.reshape(sh), g.reshape(sh)
    beta = beta.reshape(B, H, N, chunk, 1)
    G = torch.cumsum(g, dim=-2)
    M = G[..., chunk // 2: chunk // 2 + 1, :]
    k_up, k_dn = k * torch.exp(G - M), k * torch.exp(M - G)
    q_up = q * torch.exp(G - M)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(0)
    Akk = torch.where(strict, k_up @ k_dn.transpose(-1, -2), 0.0)      # [.., t, s]
    Aqk = torch.where(incl, q_up @ k_dn.transpose(-1, -2), 0.0)
    Tm = torch.eye(chunk, dtype=q.dtype, device=q.device) + beta * Akk
    eG = torch.exp(G)
    U = torch.linalg.solve_triangular(Tm, beta * v, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(Tm, beta * (eG * k), upper=False, unitriangular=True)
    qS = eG * q
    Gl = G[..., -1:, :]                                                    # [.., 1, D]
    kS = torch.exp(Gl - G) * k
    decay = torch.exp(Gl).squeeze(-2).unsqueeze(-1)                        # [B, H, N, D, 1]
    outs = []
    for n in range(N):
        dl = U[:, :, n] - W[:, :, n] @ S
        outs.append(qS[:, :, n] @ S + Aqk[:, :, n] @ dl)
        S = decay[:, :, n] * S + kS[:, :, n].transpose(-1, -2) @ dl
    o = torch.stack(outs, dim=2).reshape(B, H, N * chunk, D)[:, :, :T] / math.sqrt(D)
    return o, S


# ---- layers --------------------------------------------------------------------------------------

def _lin(n_out, n_in, std=0.02):
    return nn.Parameter(torch.randn(n_out, n_in) * std)


def _ones(n):
    return nn.Parameter(torch.ones(n))


class KDA(nn.Module):
    """Kimi Delta Attention (kimi-k3.cpp build_kda_layer)."""

    def __init__(self, c: K3Config, out_std: float):
        super().__init__()
        E, H, D, K, din = c.hidden, c.heads, c.kda_head_dim, c.conv_kernel, c.d_inner
        self.c = c
        self.attn_q, self.attn_k, self.attn_v = _lin(din, E), _lin(din, E), _lin(din, E)
        for x in "qkv":  # GGUF ne {K, 1, din}: numpy (din, 1, K); a near-identity start (last tap = now)
            w = torch.randn(din, 1, K) * 0.1
            w[:, 0, -1] += 1.0
            setattr(self, f"ssm_conv1d_{x}", nn.Parameter(w))
        self.ssm_f_a, self.ssm_f_b = _lin(D, E), _lin(din, D)
        self.ssm_beta = _lin(H, E)
        self.ssm_a_log = nn.Parameter(torch.zeros(H))       # A = exp(A_log) = 1
        # decay rate per channel: g = lb·σ(u), σ(dt_bias) log-uniform in [1e-3, 1e-1] -> g ∈ [−0.5, −0.005]
        p = torch.exp(torch.empty(din).uniform_(math.log(1e-3), math.log(1e-1)))
        self.ssm_dt_bias = nn.Parameter(torch.log(p) - torch.log1p(-p))
        self.ssm_g = _lin(din, E)
        self.ssm_norm = _ones(D)
        self.attn_output = _lin(E, din, out_std)

    def forward(self, h, state=None, chunked=True):
        """h [B, T, E]; state None or dict(conv [B, 3, K−1, din] pre-conv inputs, S [B, H, D, D]) updated."""
        c = self.c
        B, T, _ = h.shape
        H, D, K, din = c.heads, c.kda_head_dim, c.conv_kernel, c.d_inner
        outs = []
        for j, x in enumerate("qkv"):
            p = h @ getattr(self, f"attn_{x}").T                              # [B, T, din]
            prev = state["conv"][:, j] if state is not None else p.new_zeros(B, K - 1, din)
            cat = torch.cat([prev, p], dim=1)                                 # [B, K−1+T, din]
            y = F.conv1d(cat.transpose(1, 2), getattr(self, f"ssm_conv1d_{x}"), groups=din).transpose(1, 2)
            if state is not None:
                state["conv"][:, j] = cat[:, -(K - 1):].detach()
            outs.append(F.silu(y).reshape(B, T, H, D).transpose(1, 2))       # [B, H, T, D]
        q, k, v = outs
        q, k = l2_norm(q, c.eps), l2_norm(k, c.eps)
        u = (h @ self.ssm_f_a.T) @ self.ssm_f_b.T + self.ssm_dt_bias
        u = u.reshape(B, T, H, D).transpose(1, 2)
        A = torch.exp(self.ssm_a_log)[None, :, None, None]
        g = c.gate_lower_bound * torch.sigmoid(A * u)
        beta = torch.sigmoid(h @ self.ssm_beta.T).transpose(1, 2)            # [B, H, T]
        S0 = state["S"] if state is not None else q.new_zeros(B, H, D, D)
        if chunked and T > 1:
            o, S = kda_chunked(q, k, v, g, beta, S0)
        else:
            o, S = kda_recurrent(q, k, v, g, beta, S0)
        if state is not None:
            state["S"] = S.detach()
        o = rms_norm(o.transpose(1, 2), self.ssm_norm, c.eps)                # [B, T, H, D]
        gate = torch.sigmoid(h @ self.ssm_g.T).reshape(B, T, H, D)
        return (o * gate).reshape(B, T, din) @ self.attn_output.T


class MLA(nn.Module):
    """Absorbed multi-head latent attention, NoPE, MQA cache rows [c ; k_r] (build_mla_layer)."""

    def __init__(self, c: K3Config, out_std: float):
        super().__init__()
        E, H = c.hidden, c.heads
        self.c = c
        self.attn_q = _lin(H * (c.qk_nope + c.rope_dim), E)
        self.attn_kv_a_mqa = _lin(c.kv_lora_rank + c.rope_dim, E)
        self.attn_kv_a_norm = _ones(c.kv_lora_rank)
        self.attn_k_b = nn.Parameter(torch.randn(H, c.kv_lora_rank, c.qk_nope) / math.sqrt(c.kv_lora_rank))
        self.attn_v_b = nn.Parameter(torch.randn(H, c.v_head_dim, c.kv_lora_rank) / math.sqrt(c.kv_lora_rank))
        self.attn_gate = _lin(H * c.v_head_dim, E)
        self.attn_output = _lin(E, H * c.v_head_dim, out_std)

    def forward(self, h, state=None, chunked=True):
        """state None or dict(cache [B, M, r_kv + d_r]) extended in place."""
        c = self.c
        B, T, _ = h.shape
        H, dn, dr, rkv = c.heads, c.qk_nope, c.rope_dim, c.kv_lora_rank
        Q = (h @ self.attn_q.T).reshape(B, T, H, dn + dr)
        qn, qr = Q[..., :dn], Q[..., dn:]
        kvr = h @ self.attn_kv_a_mqa.T
        rows = torch.cat([rms_norm(kvr[..., :rkv], self.attn_kv_a_norm, c.eps), kvr[..., rkv:]], dim=-1)
        m0 = 0
        if state is not None:
            m0 = state["cache"].shape[1]
            state["cache"] = torch.cat([state["cache"], rows.detach()], dim=1)
            rows = state["cache"] if m0 else rows
        q_abs = torch.einsum("bthd,hrd->bhtr", qn, self.attn_k_b)
        Qp = torch.cat([q_abs, qr.transpose(1, 2)], dim=-1)                  # [B, H, T, rkv + dr]
        Kp = rows.unsqueeze(1).expand(B, H, rows.shape[1], rkv + dr)
        Vp = rows[..., :rkv].unsqueeze(1).expand(B, H, rows.shape[1], rkv)
        scale = 1.0 / math.sqrt(dn + dr)
        if m0 == 0:
            ctx = F.scaled_dot_product_attention(Qp, Kp, Vp, is_causal=True, scale=scale)
        else:
            M = rows.shape[1]
            vis = torch.arange(M)[None, :] <= (m0 + torch.arange(T))[:, None]
            ctx = F.scaled_dot_product_attention(Qp, Kp, Vp, attn_mask=vis, scale=scale)
        o = torch.einsum("bhtr,hvr->bthv", ctx, self.attn_v_b).reshape(B, T, H * c.v_head_dim)
        o = o * torch.sigmoid(h @ self.attn_gate.T)
        return o @ self.attn_output.T


class DenseSiTU(nn.Module):
    def __init__(self, c: K3Config, out_std: float):
        super().__init__()
        self.c = c
        self.ffn_gate, self.ffn_up = _lin(c.ffn, c.hidden), _lin(c.ffn, c.hidden)
        self.ffn_down = _lin(c.hidden, c.ffn, out_std)

    def forward(self, h):
        c = self.c
        return situ(h @ self.ffn_gate.T, h @ self.ffn_up.T, c.situ_beta, c.situ_linear_beta) @ self.ffn_down.T


class LatentMoE(nn.Module):
    """Sigmoid-gated top-k latent MoE with a shared expert (build_latent_moe)."""

    def __init__(self, c: K3Config, out_std: float):
        super().__init__()
        E, El, Fe, Ne, Fs = c.hidden, c.latent, c.expert_ffn, c.experts, c.shexp_width
        self.c = c
        self.ffn_gate_inp = _lin(Ne, E)
        self.register_buffer("exp_probs_b", torch.zeros(Ne))
        self.register_buffer("load", torch.zeros(Ne), persistent=False)   # routed-token counts since last update
        self.ffn_gate_exps = nn.Parameter(torch.randn(Ne, Fe, El) * 0.02)
        self.ffn_up_exps = nn.Parameter(torch.randn(Ne, Fe, El) * 0.02)
        self.ffn_down_exps = nn.Parameter(torch.randn(Ne, El, Fe) * out_std)
        self.ffn_routed_down = _lin(El, E)
        self.ffn_routed_norm = _ones(El)
        self.ffn_routed_up = _lin(E, El)
        self.ffn_gate_shexp, self.ffn_up_shexp = _lin(Fs, E), _lin(Fs, E)
        self.ffn_down_shexp = _lin(E, Fs, out_std)

    def route(self, h):
        """(top-k expert ids [N, k], their weights [N, k]) for rows h [N, E]."""
        c = self.c
        p = torch.sigmoid(h @ self.ffn_gate_inp.T)
        sel = p.detach() + self.exp_probs_b
        top = torch.topk(sel, c.experts_used, dim=-1, sorted=True).indices
        w = torch.gather(p, -1, top)
        if c.weights_norm:
            w = w / torch.clamp(w.sum(-1, keepdim=True), min=6.103515625e-5)
        if c.weights_scale not in (0.0, 1.0):
            w = w * c.weights_scale
        return top, w

    def forward(self, h):
        c = self.c
        shp = h.shape
        x = h.reshape(-1, shp[-1])
        top, w = self.route(x)
        if self.training:
            self.load += torch.bincount(top.reshape(-1), minlength=c.experts).float()
        r = x @ self.ffn_routed_down.T
        y = r.new_zeros(r.shape)
        for e in range(c.experts):
            rows, slot = torch.nonzero(top == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = r[rows]
            a = situ(xe @ self.ffn_gate_exps[e].T, xe @ self.ffn_up_exps[e].T, c.situ_beta, c.situ_linear_beta)
            y = y.index_add(0, rows, (a @ self.ffn_down_exps[e].T) * w[rows, slot].unsqueeze(-1))
        y = rms_norm(y, self.ffn_routed_norm, c.eps) @ self.ffn_routed_up.T
        s = situ(x @ self.ffn_gate_shexp.T, x @ self.ffn_up_shexp.T, c.situ_beta, c.situ_linear_beta)
        return (y + s @ self.ffn_down_shexp.T).reshape(shp)

    @torch.no_grad()
    def update_routing_bias(self, rate: float):
        """Aux-loss-free balancing (DeepSeek-V3): raise the bias of under-loaded experts, lower over-loaded."""
        if self.load.sum() > 0:
            self.exp_probs_b += rate * torch.sign(self.load.mean() - self.load)
        self.load.zero_()


class Block(nn.Module):
    def __init__(self, c: K3Config, i: int):
        super().__init__()
        out_std = 0.02 / math.sqrt(2 * c.layers)
        self.is_mla = i in c.mla_layers
        self.attn_norm, self.ffn_norm = _ones(c.hidden), _ones(c.hidden)
        if c.block_size > 0:
            self.attn_res_score = nn.Parameter(torch.zeros(c.hidden))
            self.ffn_res_score = nn.Parameter(torch.zeros(c.hidden))
        self.mixer = MLA(c, out_std) if self.is_mla else KDA(c, out_std)
        self.ffn = DenseSiTU(c, out_std) if i < c.dense_layers else LatentMoE(c, out_std)


class KimiK3(nn.Module):
    def __init__(self, c: K3Config):
        super().__init__()
        self.c = c
        self.token_embd = nn.Parameter(torch.randn(c.vocab, c.hidden) * 0.02)
        self.blk = nn.ModuleList([Block(c, i) for i in range(c.layers)])
        self.output_norm = _ones(c.hidden)
        self.output = _lin(c.vocab, c.hidden)
        if c.block_size > 0:
            self.output_res_score = nn.Parameter(torch.zeros(c.hidden))

    def new_state(self, batch: int):
        c = self.c
        st = []
        for b in self.blk:
            if b.is_mla:
                st.append({"cache": torch.zeros(batch, 0, c.kv_lora_rank + c.rope_dim)})
            else:
                st.append({"conv": torch.zeros(batch, 3, c.conv_kernel - 1, c.d_inner),
                           "S": torch.zeros(batch, c.heads, c.kda_head_dim, c.kda_head_dim)})
        return st

    def forward(self, tokens, capture=(), state=None, chunked=True, logits=True):
        """tokens [B, T] -> (logits [B, T, V] or None, taps [B, T, len(capture)·E], final post-norm hidden).

        capture: layer ids whose tap (the stream layer l+1 consumes; the output mix for the last layer)
        to return, concatenated in order. state: from `new_state`, carried and updated in place."""
        c = self.c
        A = c.block_size
        x0 = self.token_embd[tokens]
        P, stack, taps = x0, [], {-1: x0}
        for i, b in enumerate(self.blk):
            a_in = res_mix(P, stack, b.attn_res_score, c.eps) if A > 0 else P
            if i > 0:
                taps[i - 1] = a_in
            banked = A > 0 and i % A == 0
            if banked:
                stack.append(checkpoint(P, c.eps))
            h = rms_norm(a_in, b.attn_norm, c.eps)
            y = b.mixer(h, None if state is None else state[i], chunked)
            P = y if banked else P + y
            f_in = res_mix(P, stack, b.ffn_res_score, c.eps) if A > 0 else P
            P = P + b.ffn(rms_norm(f_in, b.ffn_norm, c.eps))
        o = res_mix(P, stack, self.output_res_score, c.eps) if A > 0 else P
        taps[c.layers - 1] = o
        hf = rms_norm(o, self.output_norm, c.eps)
        feats = torch.cat([taps[l] for l in capture], dim=-1) if capture else None
        return (hf @ self.output.T if logits else None), feats, hf

    def lm_head(self, hf):
        return hf @ self.output.T

    @torch.no_grad()
    def update_routing_bias(self, rate: float):
        for b in self.blk:
            if isinstance(b.ffn, LatentMoE):
                b.ffn.update_routing_bias(rate)


# ---- GGUF names ----------------------------------------------------------------------------------

_RENAME = {"ssm_dt_bias": "ssm_dt.bias", "exp_probs_b": "exp_probs_b.bias"}


def gguf_tensors(model: KimiK3) -> dict:
    """GGUF tensor name -> float32 numpy array (numpy shape = reversed ggml ne), the file's weights."""
    out = {}

    def put(name, t):
        out[name] = t.detach().float().cpu().numpy()

    put("token_embd.weight", model.token_embd)
    put("output_norm.weight", model.output_norm)
    put("output.weight", model.output)
    if model.c.block_size > 0:
        put("output_res_score.weight", model.output_res_score)
    for i, b in enumerate(model.blk):
        pre = f"blk.{i}."
        items = [("attn_norm", b.attn_norm), ("ffn_norm", b.ffn_norm)]
        if model.c.block_size > 0:
            items += [("attn_res_score", b.attn_res_score), ("ffn_res_score", b.ffn_res_score)]
        items += list(b.mixer.named_parameters()) + list(b.ffn.named_parameters())
        items += [(n, t) for n, t in b.ffn.named_buffers() if n == "exp_probs_b"]
        for n, t in items:
            if n == "ssm_a_log":
                out[pre + "ssm_a"] = (-torch.exp(t)).detach().float().numpy()
            else:
                put(pre + _RENAME.get(n, n + ".weight"), t)
    return out


@torch.no_grad()
def load_gguf_tensors(model: KimiK3, tensors: dict) -> None:
    """Inverse of `gguf_tensors`: set the model's weights from GGUF-named arrays (e.g. a file's
    dequantized tensors)."""
    dt = model.token_embd.dtype

    def get(name):  # in the model's dtype (float64 keeps log(−ssm_a) exact enough for the reference test)
        return torch.from_numpy(tensors[name]).to(dt)

    model.token_embd.copy_(get("token_embd.weight"))
    model.output_norm.copy_(get("output_norm.weight"))
    model.output.copy_(get("output.weight"))
    if model.c.block_size > 0:
        model.output_res_score.copy_(get("output_res_score.weight"))
    for i, b in enumerate(model.blk):
        pre = f"blk.{i}."
        b.attn_norm.copy_(get(pre + "attn_norm.weight"))
        b.ffn_norm.copy_(get(pre + "ffn_norm.weight"))
        if model.c.block_size > 0:
            b.attn_res_score.copy_(get(pre + "attn_res_score.weight"))
            b.ffn_res_score.copy_(get(pre + "ffn_res_score.weight"))
        for mod in (b.mixer, b.ffn):
            for n, t in list(mod.named_parameters()) + [(n, t) for n, t in mod.named_buffers() if n == "exp_probs_b"]:
                if n == "ssm_a_log":
                    t.copy_(torch.log(-get(pre + "ssm_a")))
                else:
                    t.copy_(get(pre + _RENAME.get(n, n + ".weight")).reshape(t.shape))
