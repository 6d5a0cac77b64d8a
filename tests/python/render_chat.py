#!/usr/bin/env python3
"""render_chat.py — chat templates rendered as Hugging Face transformers renders them
(`apply_chat_template`: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loop-controls extension, a `tojson` filter that is json.dumps with
ensure_ascii=False, `raise_exception` and `strftime_now` globals): the reference the chat
tests hold dspark's renderer (crates/runtime/src/chat.rs) to.

Usage:  render_chat.py TEMPLATE.jinja CASES.json

CASES.json: {"bos_token": S, "eos_token": S, "now": "YYYY-MM-DD HH:MM:SS",
"conversations": [{"messages": [...], "add_generation_prompt": bool}, ...]}.
Prints a JSON array: per conversation {"text": rendered} or {"error": message}.
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def main():
    template_path, cases_path = sys.argv[1:3]
    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    now = datetime.datetime.strptime(cases["now"], "%Y-%m-%d %H:%M:%S")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    out = []
    try:
        template = env.from_string(source)
    except Exception as e:  # a template jinja2 cannot compile: every case is an error
        print(json.dumps([{"error": f"compile: {e}"} for _ in cases["conversations"]]))
        return
    for conv in cases["conversations"]:
        try:
            text = template.render(messages=conv["messages"], add_generation_prompt=conv["add_generation_prompt"],
                                   bos_token=cases["bos_token"], eos_token=cases["eos_token"])
            out.append({"text": text})
        except Exception as e:
            out.append({"error": str(e)})
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
