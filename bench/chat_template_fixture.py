#!/usr/bin/env python3
"""chat_template_fixture.py — llama-server's `/apply-template` renderings of chat
templates llama.cpp ships, as the JSON fixture the CLI tests hold `generate --chat` to
(crates/cli/testdata/chat/apply-template.json).

Usage:  bench/chat_template_fixture.py LLAMA_SERVER MODEL.gguf TEMPLATES_DIR OUT.json

For each template below, starts `LLAMA_SERVER -m MODEL --jinja --chat-template-file T`
(MODEL gives the BOS/EOS texts: SmolLM2-135M-Instruct Q4_1, `scripts/fetch-assets.sh`),
posts each conversation to `/apply-template`, and records the rendered prompt with the
date it was made (templates that print today's date see it; the test passes it back with
`--chat-date`).
"""
import datetime
import hashlib
import json
import subprocess
import sys
import time
import urllib.request

TEMPLATES = [
    "Qwen-Qwen3-0.6B.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "Kimi-K3.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "google-gemma-2-2b-it.jinja",
    "openai-gpt-oss-120b.jinja",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three primes."}],
    [{"role": "system", "content": "Answer in French.\nBe \"polite\"."},
     {"role": "user", "content": "Hello — how are you? ☕"},
     {"role": "assistant", "content": "Très bien, merci !"},
     {"role": "user", "content": "And the weather?"}],
    [{"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
     {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}],
]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def main():
    server, model, templates, out_path = sys.argv[1:5]
    port = 18090
    cases = []
    for name in TEMPLATES:
        proc = subprocess.Popen([server, "-m", model, "--port", str(port), "-t", "2", "-c", "512", "--jinja",
                                 "--chat-template-file", f"{templates}/{name}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except Exception:
                    time.sleep(0.2)
            for messages in CONVERSATIONS:
                cases.append({"template": name, "messages": messages,
                              "prompt": post(port, {"messages": messages})["prompt"]})
        finally:
            proc.terminate()
            proc.wait()
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    fixture = {"model_sha256": sha, "date": datetime.date.today().isoformat(), "cases": cases}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
