#!/usr/bin/env python3
"""Writes kimi-k2.gguf beside this script: a small vocabulary-only GGUF (model `gpt2`,
pre-tokenizer `kimi-k2`) for Kimi K2's split, whose rules llama.cpp runs in a
hand-written splitter and no llama.cpp test file covers. Its tokens are the 256 bytes of
GPT-2's alphabet, words built by merges (Han runs, cased letter runs with contractions,
digits, punctuation with newlines, white-space runs), words that straddle the split's
boundaries (so a wrong cut shows as a different token), and control tokens.

kimi-k2.jsonl holds the ids llama.cpp's llama-tokenize gave for texts on it
(bench/tokenizer_fixture.py kimi-k2.gguf TEXTS.json kimi-k2.jsonl).
"""

import pathlib
import struct


def byte_alphabet() -> list[str]:
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


ALPHA = byte_alphabet()


def spell(text: str) -> list[str]:
    return [ALPHA[b] for b in text.encode("utf-8")]


WORDS = [
    "中", "文", "中文", "日本", "漢字", "你好", "世界", "中文a", "a中", "文字",
    "Hello", " Hello", "hello", " hello", "HELLO", "HeLLo", "world", " world", "é", "café", " café",
    "don", "don't", "DON'T", "'t", "'T", "'s", "'S", "'re", "'RE", "'ll", "'ve", "'d", "'m", "it's",
    "あ", "あい", "カタ", "カタカナ", "한국", "한국어", "Привет", " Привет",
    "1", "12", "123", "1234", "2024", " 1", "a1", "1a", "١٢٣",
    "!", "!!", "!!!", " !", "!\n", "?!", "...", "(", "((", "()", " (", "—",
    "\n", "\n\n", "\r\n", " \n", "  ", "   ", "    ", "\t", " \t", "  x", " x", "x", "x ",
    "😀", "😀😀", " 😀",
]


def main() -> None:
    tokens = list(ALPHA)
    index = {t: i for i, t in enumerate(tokens)}
    merges = []
    def join(left: str, right: str) -> str:
        if left + right not in index:
            index[left + right] = len(tokens)
            tokens.append(left + right)
            merges.append(f"{left} {right}")
        return left + right

    for w in WORDS:
        # Each character from its bytes, then the word from its characters.
        units = []
        for ch in w:
            b = spell(ch)
            cur = b[0]
            for x in b[1:]:
                cur = join(cur, x)
            units.append(cur)
        cur = units[0]
        for u in units[1:]:
            cur = join(cur, u)
    types = [1] * len(tokens)
    for special in ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>"]:
        index[special] = len(tokens)
        tokens.append(special)
        types.append(3)

    kv = [
        ("general.architecture", 8, "qwen2"),
        ("general.name", 8, "kimi-k2 synthetic"),
        ("qwen2.block_count", 4, 1),
        ("qwen2.context_length", 4, 64),
        ("qwen2.embedding_length", 4, 64),
        ("qwen2.feed_forward_length", 4, 128),
        ("qwen2.attention.head_count", 4, 4),
        ("qwen2.attention.head_count_kv", 4, 4),
        ("qwen2.attention.layer_norm_rms_epsilon", 6, 1e-6),
        ("tokenizer.ggml.model", 8, "gpt2"),
        ("tokenizer.ggml.pre", 8, "kimi-k2"),
        ("tokenizer.ggml.tokens", (9, 8), tokens),
        ("tokenizer.ggml.token_type", (9, 5), types),
        ("tokenizer.ggml.merges", (9, 8), merges),
        ("tokenizer.ggml.bos_token_id", 4, index["[BOS]"]),
        ("tokenizer.ggml.eos_token_id", 4, index["[EOS]"]),
        ("tokenizer.ggml.add_bos_token", 7, True),
    ]

    def s(x: str) -> bytes:
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def scalar(t: int, v) -> bytes:
        return {4: lambda: struct.pack("<I", v), 5: lambda: struct.pack("<i", v), 6: lambda: struct.pack("<f", v),
                7: lambda: struct.pack("<?", v), 8: lambda: s(v)}[t]()

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
    for k, t, v in kv:
        out += s(k)
        if isinstance(t, tuple):
            out += struct.pack("<IIQ", 9, t[1], len(v))
            for x in v:
                out += scalar(t[1], x)
        else:
            out += struct.pack("<I", t) + scalar(t, v)
    out += b"\0" * (-len(out) % 32)
    path = pathlib.Path(__file__).with_name("kimi-k2.gguf")
    path.write_bytes(bytes(out))
    print(f"{path}: {len(tokens)} tokens, {len(merges)} merges, {len(out)} bytes")


if __name__ == "__main__":
    main()
