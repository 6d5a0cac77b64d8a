#!/usr/bin/env python3
"""tokenizer_corpus.py — texts to compare `dspark tokenize` with llama.cpp's
`llama-tokenize` on (bench/tokenize_vs_llama.sh): hand-picked edge cases (white-space
runs, CR/LF, contractions, digit runs, scripts, combining marks, emoji sequences, code,
special tokens inside text, control and format characters) and seeded random mixtures of
them. Writes one UTF-8 file per text, `DIR/NNNN.txt`.

Usage:  bench/tokenizer_corpus.py DIR [N_RANDOM=240] [SEED=1]
"""

import pathlib
import random
import sys

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>",
    "<|begin_of_text|>", "<|eot_id|>", "[INST]", "<|fim_prefix|>", "<|im_", "|>",
]

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", " \n", "\n ", "\n\n\n", "\t\t x", "x \t\n y",
    "Hello world", " Hello world", "Hello  world", "Hello   world   ", "   leading",
    "trailing   ", "a\u00a0b", "a\u3000b", "a\u2028b", "a\u200bb", "a\u0085b",
    "I'm you're we've they'll she'd it's", "I'M YOU'RE WE'VE THEY'LL", "'s 'S ''s '",
    "don't", "rock 'n' roll", "l'été", "1", "12", "123", "1234", "12345", "1234567890",
    "3.14159", "1,000,000", "v1.2.3-rc4", "0x1F600", "١٢٣٤٥ ٦٧", "²³ ½ Ⅻ ⑦",
    "Äpfel café naïve résumé", "cafe\u0301 nai\u0308ve", "Ελληνικά γλώσσα", "Русский текст, ёжик",
    "עברית שלום", "العربية مرحبا", "हिन्दी नमस्ते", "ไทย สวัสดี", "한국어 안녕하세요",
    "日本語のテキストです。カタカナ", "中文文本，标点符号。", "漢字かなカナ mixed 混合 text",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕊𝕥𝕪𝕝𝕖", "😀", "😀😃😄", "👨\u200d👩\u200d👧\u200d👦 family", "👍🏽 👍🏿",
    "🇫🇷🇯🇵", "❤️ ✅ ☕", "🚀 launch 🛰️", "\u0001\u0002\u007f", "tab\tsep\tvalues",
    "def f(x):\n    return x ** 2  # square\n", "fn main() {\n\tprintln!(\"hi {}\", 1 + 2);\n}",
    '{"key": [1, 2.5, null, true], "s": "\\u00e9"}', "<div class=\"a\">&amp; &lt;</div>",
    "SELECT * FROM t WHERE a >= 10 AND b <> 'x';", "https://example.com/a?b=c&d=e#f",
    "user@example.com", "C:\\Users\\name\\file.txt", "$100 + €20 = £? ¥ ₿",
    "x^2 + y_1 ≤ ∑ αβγ ∞", "!!!!!!", "??? ... ---", "((((()))))", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ab" * 40, " " * 33 + "x", "\n" * 5 + "x", "<|im_start|>user\nHi<|im_end|>\n",
    "<s>[INST] hello [/INST]</s>", "text<|endoftext|>more", "<|im_start|><|im_end|>",
    "<<|im_start|>>", "<|im_ start|>", "a</s>b<s>c<unk>d", "<|begin_of_text|><|eot_id|>",
    "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>", "  <|im_start|>  spaced  <|im_end|>  ",
    "ẞ ß ǅ ǈ ǋ", "İstanbul ıi", "KELVIN \u212a ÅNGSTRÖM \u212b", "\ufeffBOM", "ﬁ ﬂ ﬀ",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３", "‘quotes’ “double” «guillemets» „low“",
]

FRAGMENTS = [
    "hello", "World", "the", "quick", "brown", "FOX", "don't", "it's", "I'LL", "42", "3.0",
    "123456", "٣", "café", "naïve", "中文", "日本", "한국", "Привет", "γειά", "שלום",
    "مرحبا", "नमस्ते", "😀", "👍🏽", "🇯🇵", "∑", "≤", "€", "—", "…", "(", ")", "{", "}",
    "[", "]", "<", ">", "/", "\\", "'", '"', "#", "@", "_", "-", "+", "=", "*", "&", "%",
    "$", "!", "?", ".", ",", ";", ":", "|", "~", "`", "^", "e\u0301", "\u200d", "\u00ad",
] + SPECIALS

SPACES = ["", "", "", " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000"]


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    n_random = int(sys.argv[2]) if len(sys.argv) > 2 else 240
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    out.mkdir(parents=True, exist_ok=True)
    texts = list(HAND)
    for _ in range(n_random):
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(FRAGMENTS))
            parts.append(rng.choice(SPACES))
        texts.append("".join(parts))
    for i, t in enumerate(texts):
        (out / f"{i:04d}.txt").write_bytes(t.encode("utf-8"))
    print(f"{out}: {len(texts)} texts")


if __name__ == "__main__":
    main()
