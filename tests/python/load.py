"""A bounded load run against an OpenAI-compatible server (`dspark serve` or llama-server):
REQUESTS chat completions at CONCURRENCY, streamed, prompts taken in turn from a messages
file; reports every request's outcome and timing, the aggregate tokens/s, and the server's
resident memory sampled through the run (its pid given). Prints one JSON object.

Usage: load.py BASE_URL --requests N --concurrency C --messages FILE.jsonl
               [--max-tokens N] [--api-key K] [--pid PID] [--temperature T]
"""
import argparse
import asyncio
import json
import statistics
import time

import openai


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--messages", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--pid", type=int)
    a = ap.parse_args()
    convs = [json.loads(l)["messages"] for l in open(a.messages) if l.strip()]
    client = openai.AsyncOpenAI(base_url=a.base + "/v1", api_key=a.api_key, max_retries=0, timeout=900)
    sem = asyncio.Semaphore(a.concurrency)
    results = [None] * a.requests
    rss = []

    async def sample():
        while True:
            if a.pid:
                r = rss_kib(a.pid)
                if r is not None:
                    rss.append(r)
            await asyncio.sleep(0.25)

    async def one(i):
        async with sem:
            t0 = time.perf_counter()
            first = None
            pieces, finish, usage = [], None, None
            try:
                stream = await client.chat.completions.create(
                    model="m", messages=convs[i % len(convs)], max_tokens=a.max_tokens,
                    temperature=a.temperature, stream=True, stream_options={"include_usage": True})
                async for c in stream:
                    if c.usage is not None:
                        usage = c.usage.completion_tokens
                    for ch in c.choices:
                        if ch.delta.content:
                            if first is None:
                                first = time.perf_counter() - t0
                            pieces.append(ch.delta.content)
                        if ch.finish_reason:
                            finish = ch.finish_reason
                results[i] = {"ok": finish is not None, "finish": finish, "tokens": usage,
                              "ttft": first, "latency": time.perf_counter() - t0,
                              "text": "".join(pieces)}
            except Exception as e:  # noqa: BLE001 - every failure is reported
                results[i] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                              "latency": time.perf_counter() - t0}

    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(a.requests)))
    wall = time.perf_counter() - t0
    sampler.cancel()
    ok = [r for r in results if r["ok"]]
    tokens = sum(r["tokens"] or 0 for r in ok)
    lat = sorted(r["latency"] for r in ok)
    ttft = sorted(r["ttft"] for r in ok if r["ttft"] is not None)
    pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))] if v else None  # noqa: E731
    per_request = [r["tokens"] / r["latency"] for r in ok if r["tokens"] and r["latency"] > 0]
    print(json.dumps({
        "requests": a.requests, "concurrency": a.concurrency, "ok": len(ok),
        "failed": [r for r in results if not r["ok"]][:5],
        "tokens": tokens, "wall_s": wall, "aggregate_tokens_per_s": tokens / wall if wall else 0,
        "per_request_tokens_per_s_median": statistics.median(per_request) if per_request else None,
        "latency_p50_s": pct(lat, 0.5), "latency_p99_s": pct(lat, 0.99),
        "ttft_p50_s": pct(ttft, 0.5), "ttft_p99_s": pct(ttft, 0.99),
        "rss_kib": {"first": rss[0] if rss else None, "max": max(rss) if rss else None,
                    "last": rss[-1] if rss else None, "samples": len(rss),
                    "max_first_half": max(rss[:len(rss) // 2]) if len(rss) >= 2 else None,
                    "max_second_half": max(rss[len(rss) // 2:]) if len(rss) >= 2 else None},
        "texts": [r.get("text") for r in results],
    }))


asyncio.run(main())
