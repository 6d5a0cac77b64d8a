"""Drives a running `dspark serve` with the real `openai` client (and plain HTTP for what the
client does not send), and prints one JSON object of what it saw; the Rust test
(crates/cli/tests/serve) starts the server, runs this, and checks the object against
`dspark generate`.

Usage: serve_client.py BASE_URL API_KEY CASES.json

With `"busy": K` in CASES.json, only the busy check runs (see busy()).

CASES.json: {"chat": [[messages...], ...], "text": ["prompt", ...], "max_tokens": N,
             "concurrent": K, "long": [messages...]}

Output keys:
  chat[i]          {"whole": text, "stream": text, "finish": reason, "usage": {...},
                    "timings": {...}, "stream_finish": reason, "chunks": n}
  text[i]          {"whole": text, "stream": text}
  concurrent       the texts of K streamed chats of chat[0..K] run at once
  errors           {name: [status, body]} for every error case
  disconnect       {"processing_after": n} requests_processing a moment after a client left
  metrics          the /metrics text at the end
"""
import asyncio
import json
import sys
import time
import urllib.error
import urllib.request

import openai

BASE, KEY, CASES = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
N = CASES.get("max_tokens", 16)
client = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=600)


def http(method, path, body=None, key=KEY, raw=None, headers=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


def chat_case(messages):
    r = client.chat.completions.create(model="m", messages=messages, max_tokens=N, temperature=0)
    out = {
        "whole": r.choices[0].message.content,
        "finish": r.choices[0].finish_reason,
        "usage": r.usage.model_dump(),
        "timings": (r.model_extra or {}).get("timings"),
    }
    pieces, finish, chunks = [], None, 0
    stream = client.chat.completions.create(
        model="m", messages=messages, max_tokens=N, temperature=0, stream=True,
        stream_options={"include_usage": True})
    usage = None
    for c in stream:
        chunks += 1
        if c.usage is not None:
            usage = c.usage.model_dump()
        for ch in c.choices:
            if ch.delta.content:
                pieces.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    out.update(stream="".join(pieces), stream_finish=finish, chunks=chunks, stream_usage=usage)
    return out


def text_case(prompt):
    r = client.completions.create(model="m", prompt=prompt, max_tokens=N, temperature=0)
    pieces = []
    for c in client.completions.create(model="m", prompt=prompt, max_tokens=N, temperature=0, stream=True):
        pieces.extend(ch.text for ch in c.choices)
    return {"whole": r.choices[0].text, "stream": "".join(pieces), "finish": r.choices[0].finish_reason}


async def concurrent(k):
    ac = openai.AsyncOpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=600)

    async def one(messages):
        pieces = []
        stream = await ac.chat.completions.create(
            model="m", messages=messages, max_tokens=N, temperature=0, stream=True)
        async for c in stream:
            for ch in c.choices:
                if ch.delta.content:
                    pieces.append(ch.delta.content)
        return "".join(pieces)

    chats = [CASES["chat"][i % len(CASES["chat"])] for i in range(k)]
    return await asyncio.gather(*(one(m) for m in chats))


def metric(name):
    _, text, _ = http("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def disconnect():
    """A streamed request whose client goes away: its slot must be free within a step."""
    stream = client.chat.completions.create(
        model="m", messages=CASES["long"], max_tokens=4000, temperature=0, stream=True)
    for i, _ in enumerate(stream):
        if i >= 3:
            break
    busy = metric("llamacpp:requests_processing")
    stream.close()
    deadline = time.time() + 5
    after = None
    while time.time() < deadline:
        after = metric("llamacpp:requests_processing")
        if after == 0:
            break
        time.sleep(0.05)
    return {"processing_during": busy, "processing_after": after}


def declared_too_large():
    """A body declared far over the limit: refused from its Content-Length, before a byte of
    it is sent (and within a second)."""
    import socket
    host, port = BASE.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)))
    t = time.time()
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                 + b"\r\nContent-Length: 1000000000000\r\n\r\n")
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    took = time.time() - t
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else 0
    return status if took < 1 else -1, body.decode(errors="replace")


def errors():
    msgs = [{"role": "user", "content": "hi"}]
    cases = {
        "bad_json": http("POST", "/v1/chat/completions", raw=b"{bad"),
        "no_messages": http("POST", "/v1/chat/completions", {"max_tokens": 3}),
        "messages_not_array": http("POST", "/v1/chat/completions", {"messages": "hi"}),
        "n_2": http("POST", "/v1/chat/completions", {"messages": msgs, "n": 2}),
        "bad_temperature": http("POST", "/v1/chat/completions", {"messages": msgs, "temperature": "hot"}),
        "too_long": http("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 10**9}),
        "bad_token": http("POST", "/v1/completions", {"prompt": [1, 2, 10**8], "max_tokens": 2}),
        "no_such_path": http("GET", "/v2/nothing"),
        "no_key": http("GET", "/v1/models", key=None),
        "wrong_key": http("GET", "/v1/models", key=KEY + "x"),
        "health_no_key": http("GET", "/health", key=None),
        "page_no_key": http("GET", "/", key=None),
        "page_query_key": http("GET", "/?key=" + KEY, key=None),
        "too_large": http("POST", "/v1/chat/completions", raw=b'{"x": "' + b"a" * (9 << 20) + b'"}'),
        "declared_too_large": declared_too_large(),
        "conflicting_max": http("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "n_predict": 5}),
        "tools_type": http("POST", "/v1/chat/completions", {"messages": msgs, "tools": "x"}),
        "long_text": http("POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": " " * (3 << 20)}]}),
    }
    try:
        client.chat.completions.create(model="m", messages=msgs, max_tokens=2, n=3)
        cases["client_n_3"] = [200, ""]
    except openai.APIStatusError as e:
        # The client hands over the body's `error` object.
        body = e.body if isinstance(e.body, dict) and "error" in e.body else {"error": e.body}
        cases["client_n_3"] = [e.status_code, json.dumps(body)]
    return {k: [v[0], v[1]] for k, v in cases.items()}


def busy(k):
    """k long requests at once on a server of one slot and a queue of one: one runs, one
    waits, the rest are refused with 503 and Retry-After; then the server is idle again.
    The requests start 50 ms apart (in order) and each asks for 256 tokens, so all k arrive
    while the first still runs however fast the machine decodes (64 tokens 200 ms apart did
    not, on a quiet 2-core host: every request was served)."""
    import threading
    results = [None] * k
    body = {"messages": CASES["long"], "max_tokens": 256, "temperature": 0}

    def one(i):
        status, text, headers = http("POST", "/v1/chat/completions", body)
        results[i] = [status, text, headers.get("Retry-After")]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    return {"results": results, "deferred_after": metric("llamacpp:requests_deferred"),
            "processing_after": metric("llamacpp:requests_processing"),
            "rejected": metric("dspark:requests_rejected_total")}


def robust():
    """With DSPARK_FAULT_INJECTION set on the server: a request that panics in its slot gets a
    500 (streamed: an error event) and the server goes on; sampled requests with a seed give
    the same tokens alone and eight at a time (the plan fixed)."""
    msgs = CASES["chat"][0]
    fault = CASES["fault"]
    whole = http("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "stop": [fault]})
    streamed = http("POST", "/v1/chat/completions",
                    {"messages": msgs, "max_tokens": 8, "stop": [fault], "stream": True})
    after = http("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
    health = http("GET", "/health")

    def sampled(i):
        r = client.chat.completions.create(
            model="m", messages=CASES["chat"][i % len(CASES["chat"])], max_tokens=N,
            temperature=0.9, seed=100 + i)
        return r.choices[0].message.content

    alone = [sampled(i) for i in range(8)]

    async def together():
        ac = openai.AsyncOpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=600)

        async def one(i):
            r = await ac.chat.completions.create(
                model="m", messages=CASES["chat"][i % len(CASES["chat"])], max_tokens=N,
                temperature=0.9, seed=100 + i)
            return r.choices[0].message.content
        return await asyncio.gather(*(one(i) for i in range(8)))

    return {"fault_whole": [whole[0], whole[1]], "fault_stream": [streamed[0], streamed[1]],
            "after": [after[0], after[1]], "health": health[0],
            "failed": metric("dspark:requests_failed_total"),
            "processing": metric("llamacpp:requests_processing"),
            "alone": alone, "together": asyncio.run(together())}


if CASES.get("robust"):
    print(json.dumps(robust()))
    sys.exit(0)

if CASES.get("busy"):
    print(json.dumps(busy(CASES["busy"])))
    sys.exit(0)

out = {
    "chat": [chat_case(m) for m in CASES["chat"]],
    "text": [text_case(p) for p in CASES["text"]],
}
out["concurrent"] = asyncio.run(concurrent(CASES["concurrent"]))
out["disconnect"] = disconnect()
out["errors"] = errors()
out["models"] = json.loads(http("GET", "/v1/models")[1])
out["tokenize"] = json.loads(http("POST", "/tokenize", {"content": "Hello world", "with_pieces": True})[1])
out["detokenize"] = json.loads(http("POST", "/detokenize", {"tokens": [19556, 905]})[1])
out["apply_template"] = json.loads(http("POST", "/apply-template", {"messages": CASES["chat"][0]})[1])
out["metrics"] = http("GET", "/metrics")[1]
print(json.dumps(out))
