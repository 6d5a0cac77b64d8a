"""Drives `dspark serve`'s chat page in headless Chromium (Debian's package) and prints what
the page shows, as one JSON object; the Rust test (crates/cli/tests/serve) checks it.

Chromium is driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`:
null-terminated JSON on fds 3 and 4), so nothing beyond the standard library is needed. The
page is opened with `?ask=...` messages, which it sends in turn as a person would (typing
is not simulated: the same send path runs); the script waits for the conversation to end,
reads the DOM, and saves a screenshot.

Usage: page_check.py URL SCREENSHOT.png [--chromium PATH] [--timeout S]

Output: {"turns", "messages": [{"role", "text", "drafted", "target", "drafted_text", "done",
         "stats", "error"}], "legend", "drafted_style" (the background of a drafted piece),
         "screenshot": {"bytes", "width", "height"}}
"""
import argparse
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("screenshot")
ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
ap.add_argument("--timeout", type=float, default=120)
a = ap.parse_args()

to_chrome_r, to_chrome_w = os.pipe()
from_chrome_r, from_chrome_w = os.pipe()
# Chromium reads commands on fd 3 and writes replies on fd 4.
proc = subprocess.Popen(
    [a.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
     "--remote-debugging-pipe", "--window-size=1000,900", "about:blank"],
    # Kept open in the child: the pipe ends, and 3 and 4 once the ends are copied there
    # (fds not listed are closed after preexec_fn runs).
    pass_fds=tuple({3, 4, to_chrome_r, from_chrome_w}),
    preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)),
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(to_chrome_r)
os.close(from_chrome_w)
out, inp = os.fdopen(to_chrome_w, "wb"), os.fdopen(from_chrome_r, "rb")
next_id = 0
buf = b""


def call(method, params=None, session=None):
    global next_id, buf
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    out.write(json.dumps(msg).encode() + b"\0")
    out.flush()
    while True:
        while b"\0" not in buf:
            chunk = inp.read1(65536)
            if not chunk:
                sys.exit(f"chromium closed the pipe during {method}")
            buf += chunk
        raw, buf = buf.split(b"\0", 1)
        reply = json.loads(raw)
        if reply.get("id") == next_id:
            if "error" in reply:
                sys.exit(f"{method}: {reply['error']}")
            return reply["result"]


def evaluate(expr, session):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    return r["result"].get("value")


try:
    target = call("Target.createTarget", {"url": a.url})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    deadline = time.time() + a.timeout
    while evaluate("document.body && document.body.dataset.scripted", session) != "done":
        if time.time() > deadline:
            sys.exit("the scripted conversation did not end in time")
        time.sleep(0.2)
    page = evaluate("""JSON.stringify({
        turns: document.body.dataset.turns,
        legend: document.querySelector('.legend span.d') !== null,
        drafted_style: (() => { const d = document.querySelector('#messages .body span.d');
                                return d ? getComputedStyle(d).backgroundColor : null; })(),
        messages: [...document.querySelectorAll('#messages .msg')].map(m => ({
            role: m.classList.contains('user') ? 'user' : 'assistant',
            text: m.querySelector('.body').textContent,
            drafted: m.querySelectorAll('.body span.d').length,
            target: m.querySelectorAll('.body span.t').length,
            drafted_text: [...m.querySelectorAll('.body span.d')].map(s => s.textContent).join(''),
            done: m.dataset.done || null,
            stats: (m.querySelector('.stats') || {}).textContent || null,
            error: (m.querySelector('.error') || {}).textContent || null,
        })),
    })""", session)
    doc = json.loads(page)
    png = base64.b64decode(call("Page.captureScreenshot", {"format": "png"}, session)["data"])
    with open(a.screenshot, "wb") as f:
        f.write(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    doc["screenshot"] = {"bytes": len(png), "width": width, "height": height}
    print(json.dumps(doc))
finally:
    proc.kill()
    proc.wait()
