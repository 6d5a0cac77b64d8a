#!/usr/bin/env python3
"""llama.cpp's side of the Qwen3 runtime benchmark (bench/runtime_qwen3.sh).

Drives llama.cpp (the C++ library that the PyPI package llama-cpp-python builds from
source) through its C API on the same GGUF and thread count as `dspark bench`, and times
the same two operations the same way:

* decode: one token at position P (after a P-token prefill), logits of that position;
* verify: N tokens at positions P..P+N-1 in one batch, logits of every position;

each repeated --runs times, the KV cache rolled back to P between runs
(llama_memory_seq_rm), wall time around llama_decode + llama_synchronize. Prints one JSON
object with the median and minimum of each, in milliseconds.
"""

import argparse
import json
import statistics
import time

import llama_cpp as L


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--context", type=int, default=64, help="prefill length P")
    ap.add_argument("--verify", type=int, default=8, help="verify batch N")
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()

    L.llama_backend_init()
    _quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(_quiet, None)
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.gguf.encode(), mp)
    if not model:
        raise SystemExit(f"{a.gguf}: llama.cpp cannot load it")
    cp = L.llama_context_default_params()
    cp.n_ctx = max(256, a.context + a.verify + 16)
    cp.n_batch = cp.n_ubatch = max(a.context, a.verify)
    cp.n_threads = cp.n_threads_batch = a.threads
    ctx = L.llama_init_from_model(model, cp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(cp.n_batch, 0, 1)

    def decode(tokens, pos0, all_logits):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if (all_logits or i == len(tokens) - 1) else 0
        t0 = time.perf_counter()
        rc = L.llama_decode(ctx, batch)
        L.llama_synchronize(ctx)
        dt = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        return dt

    # The same deterministic prompt dspark bench uses: token i = (i * 37 + 11) mod vocab.
    prompt = [(i * 37 + 11) % n_vocab for i in range(a.context + a.verify)]
    decode(prompt[: a.context], 0, False)

    def timed(n, all_logits):
        times = []
        for _ in range(a.runs + 2):  # two warm-up runs
            times.append(decode(prompt[a.context : a.context + n], a.context, all_logits))
            L.llama_memory_seq_rm(mem, 0, a.context, -1)
        ms = [1000 * t for t in times[2:]]
        return {"median_ms": statistics.median(ms), "min_ms": min(ms)}

    out = {
        "engine": f"llama.cpp via llama-cpp-python {L.__version__}",
        "system_info": L.llama_print_system_info().decode().strip(),
        "threads": a.threads,
        "context": a.context,
        "decode": timed(1, True),
        "verify": dict(tokens=a.verify, **timed(a.verify, True)),
    }
    print(json.dumps(out))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
