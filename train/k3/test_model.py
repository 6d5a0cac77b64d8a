"""Checks of model.py, printed with the measured errors (exit 1 on a failure):

1. kda_chunked == kda_recurrent (float64, random q/k/v/g/β, T not a multiple of the chunk, a carried
   start state; outputs and final state), and the gradients of both agree (float64).
2. The whole model against the float64 numpy reference tests/reference/kimi_k3_ref.py on random GGUFs
   written by tests/reference/make_tiny_kimi_k3.py at this pipeline's geometry (and a small one): the
   file's weights are loaded into KimiK3 (`load_gguf_tensors`), logits and every layer's tap compared,
   float64 and float32, chunked (training) and recurrent / chunk-by-chunk with carried state (decoding).

  nice -n 19 /tmp/train/venv/bin/python train/k3/test_model.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "reference"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kimi_k3_ref  # noqa: E402
import make_tiny_kimi_k3 as mk  # noqa: E402
from model import K3Config, KimiK3, kda_chunked, kda_recurrent, load_gguf_tensors  # noqa: E402

torch.set_num_threads(2)
FAILS = []


def check(what, err, tol):
    ok = err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {err:.2e} (tolerance {tol:.0e})")
    if not ok:
        FAILS.append(what)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


def test_kda():
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 3, 53, 16
    dt = torch.float64
    q = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g, dtype=dt), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g, dtype=dt), dim=-1)
    v = torch.randn(B, H, T, D, generator=g, dtype=dt)
    gg = -5.0 * torch.sigmoid(torch.randn(B, H, T, D, generator=g, dtype=dt) * 3)   # the whole (−5, 0)
    beta = torch.sigmoid(torch.randn(B, H, T, generator=g, dtype=dt))
    S0 = torch.randn(B, H, D, D, generator=g, dtype=dt) * 0.3
    o1, S1 = kda_recurrent(q, k, v, gg, beta, S0)
    o2, S2 = kda_chunked(q, k, v, gg, beta, S0)
    check("kda_chunked vs kda_recurrent, outputs (float64)", rel(o2, o1), 1e-10)
    check("kda_chunked vs kda_recurrent, final state (float64)", rel(S2, S1), 1e-10)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, gg, beta)]
    (kda_recurrent(*leaves, S0)[0] * o1).sum().backward()
    g1 = [x.grad.clone() for x in leaves]
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, gg, beta)]
    (kda_chunked(*leaves, S0)[0] * o1).sum().backward()
    check("kda_chunked vs kda_recurrent, gradients (float64)", max(rel(a.grad, b) for a, b in zip(leaves, g1)), 1e-9)
    o3, _ = kda_chunked(q.float(), k.float(), v.float(), gg.float(), beta.float(), S0.float())
    check("kda_chunked float32 vs recurrent float64", rel(o3, o1), 1e-5)


def model_from_gguf(path, cfg):
    r = kimi_k3_ref.KimiK3Gguf(path)
    tensors = {n: r.tensor(n) for n in r.tensors}  # float64 holding the file's float32 values
    m = KimiK3(cfg).double()
    load_gguf_tensors(m, tensors)
    return m.eval()


def test_against_reference(name, mkcfg: "mk.Config", cfg: K3Config, n_tok=37, seed=1):
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "m.gguf")
        mk.build(path, mkcfg, seed=seed, wtype="f32")
        m = model_from_gguf(path, cfg)
        rng = np.random.default_rng(seed)
        toks = rng.integers(0, cfg.vocab, size=n_tok).tolist()
        capture = list(range(-1, cfg.layers))
        ref_logits, ref_taps = kimi_k3_ref.forward(path, toks, capture)
        for dt in (torch.float64, torch.float32):
            m = m.to(dt)
            with torch.no_grad():
                lg, taps, _ = m(torch.tensor([toks]), capture)
            tag = "float64" if dt == torch.float64 else "float32"
            tol = 1e-9 if dt == torch.float64 else 5e-5
            check(f"{name}: logits vs numpy reference ({tag}, chunked)", rel(lg[0], ref_logits), tol)
            E = cfg.hidden
            worst = max(rel(taps[0][:, j * E:(j + 1) * E], ref_taps[:, j * E:(j + 1) * E]) for j in range(len(capture)))
            check(f"{name}: every tap vs numpy reference ({tag}, chunked)", worst, tol)
            # decoding: chunks of 1, 5, 1, rest with carried state, recurrent KDA
            st = m.new_state(1)
            for k in st:
                for kk in k:
                    k[kk] = k[kk].to(dt)
            outs, tps, pos = [], [], 0
            for n in (1, 5, 1, n_tok - 7):
                with torch.no_grad():
                    lg2, tp2, _ = m(torch.tensor([toks[pos:pos + n]]), capture, state=st, chunked=(n > 5))
                outs.append(lg2[0])
                tps.append(tp2[0])
                pos += n
            check(f"{name}: logits, chunk-by-chunk with state vs reference ({tag})",
                  rel(torch.cat(outs), ref_logits), tol)
            check(f"{name}: taps, chunk-by-chunk with state vs reference ({tag})",
                  rel(torch.cat(tps), ref_taps), tol)


F32_EPS = float(np.float32(1e-5))  # the reference uses the file's float32 epsilon


def main():
    torch.manual_seed(0)
    test_kda()
    small = K3Config(vocab=512, hidden=64, layers=4, mla_layers=(3,), heads=2, kda_head_dim=32, kv_lora_rank=32,
                     rope_dim=8, qk_nope=16, v_head_dim=16, ffn=128, experts=4, experts_used=2, shared_experts=1,
                     expert_ffn=32, latent=32, block_size=2, eps=F32_EPS)
    test_against_reference("tiny 4-layer", mk.Config(), small)
    c = K3Config(eps=F32_EPS)
    mkc = mk.Config(layers=c.layers, hidden=c.hidden, heads=c.heads, kda_head_dim=c.kda_head_dim,
                    conv_kernel=c.conv_kernel, mla_layers=c.mla_layers, q_lora_rank=0, kv_lora_rank=c.kv_lora_rank,
                    rope_dim=c.rope_dim, qk_nope=c.qk_nope, v_head_dim=c.v_head_dim, mla_gate=True,
                    dense_layers=c.dense_layers, ffn=c.ffn, experts=c.experts, experts_used=c.experts_used,
                    shared_experts=c.shared_experts, expert_ffn=c.expert_ffn, latent=c.latent, routed_norm=True,
                    weights_norm=c.weights_norm, weights_scale=c.weights_scale, gating="sigmoid",
                    block_size=c.block_size, situ_beta=c.situ_beta, situ_linear_beta=c.situ_linear_beta,
                    gate_lower_bound=c.gate_lower_bound, eps=1e-5, vocab=c.vocab)
    test_against_reference("pipeline geometry (12 layers, 256 wide)", mkc, c, n_tok=29)
    print("ALL PASS" if not FAILS else f"{len(FAILS)} FAILED: {FAILS}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
