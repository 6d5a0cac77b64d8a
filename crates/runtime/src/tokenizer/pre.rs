//! Pre-tokenizers of byte-level BPE vocabularies: how text is cut into the pieces BPE
//! merges within, one table row per `tokenizer.ggml.pre` family, as llama.cpp
//! `src/llama-vocab.cpp` defines them and `src/unicode.cpp` runs them.
//!
//! A pre-tokenizer is a list of steps; each step cuts every piece the previous steps made
//! (the first sees the whole text) into consecutive pieces covering it. llama.cpp runs
//! some split patterns through hand-written splitters with their own edge cases (GPT-2's,
//! Llama 3's, Qwen2's, Qwen3.5's, Kimi K2's, a newline split), which [`Step`] names and
//! this module reimplements case for case; the others are regexes, run as llama.cpp runs
//! them: a pattern naming a Unicode category (`\p{L}`, …) sees each code point as one byte
//! standing for its category ([`super::unicode::collapsed`]); any other pattern sees code
//! points, with non-ASCII white space read as a vertical tab. `\s` is ASCII white space in
//! both, as in C++'s `std::regex`. Patterns are translated to the `regex` crate (linear
//! time on any input); patterns it cannot run as llama.cpp does (lookaround, back
//! references, `.`, word boundaries, patterns that match empty text) are refused when the
//! pre-tokenizer is built, which is why some llama.cpp pre-tokenizers are not in the table.

use std::ops::Range;

use super::unicode::{self, Flags};

/// One step of a pre-tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// GPT-2's split, `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
    /// as llama.cpp's splitter runs it.
    Gpt2,
    /// Llama 3's, `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Qwen2's: Llama 3's with single digits (`\p{N}`).
    Qwen2,
    /// Qwen3.5's: Qwen2's with marks (`\p{M}`) in letter runs and out of punctuation runs.
    Qwen35,
    /// Kimi K2's: Han runs apart, cased letter runs with optional contractions, digits in
    /// threes, punctuation, white space.
    KimiK2,
    /// `[^\n]+|[\n]+`: runs of newlines and runs of anything else.
    Newlines,
    /// A regex, as llama.cpp spells it.
    Regex(&'static str),
}

/// A `tokenizer.ggml.pre` family.
#[derive(Debug)]
pub(crate) struct Rule {
    /// The names llama.cpp maps to it.
    pub names: &'static [&'static str],
    /// Its steps, in order.
    pub steps: &'static [Step],
    /// A piece that is a token as a whole is that token, unmerged.
    pub ignore_merges: bool,
    /// The BOS token is added by default (the GGUF's `add_bos_token` decides over it).
    pub add_bos: bool,
    /// There is no BOS token unless the GGUF names one.
    pub no_default_bos: bool,
}

const fn rule(names: &'static [&'static str], steps: &'static [Step]) -> Rule {
    Rule {
        names,
        steps,
        ignore_merges: false,
        add_bos: false,
        no_default_bos: false,
    }
}

/// A Unicode-punctuation-or-symbol run, GPT-2's split, digit runs, then digit triples:
/// llama.cpp's `default`.
const DEFAULT: &[Step] = &[
    Step::Regex(r"[\p{P}\$\+<=>\^~\|]+"),
    Step::Gpt2,
    Step::Regex(r"\p{N}+"),
    Step::Regex("[0-9][0-9][0-9]"),
];

/// DeepSeek LLM's split (its letter class lists Latin, Greek, Cyrillic, Armenian,
/// Georgian, Cherokee, … cased letters code point by code point).
const DEEPSEEK_LLM: &[Step] = &[
    Step::Regex("[\r\n]"),
    Step::Regex("\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+"),
    Step::Regex("\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+"),
    Step::Regex(r"\s+$"),
    Step::Regex("[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+"),
    Step::Regex(r"\p{N}+"),
];

/// DeepSeek Coder's split.
const DEEPSEEK_CODER: &[Step] = &[
    Step::Regex("[\r\n]"),
    Step::Regex(r"\s?\p{L}+"),
    Step::Regex(r"\s?\p{P}+"),
    Step::Regex("[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+"),
    Step::Regex(r"\p{N}"),
];

/// Falcon's split.
const FALCON: &[Step] = &[
    Step::Regex(r"[\p{P}\$\+<=>\^~\|`]+"),
    Step::Gpt2,
    Step::Regex("[0-9][0-9][0-9]"),
];

/// Single digits, then GPT-2's split (StarCoder and the models that took its tokenizer).
const DIGITS_THEN_GPT2: &[Step] = &[Step::Regex(r"\p{N}"), Step::Gpt2];

/// BLOOM's family: a space and a run of anything but white space and sentence punctuation.
const BLOOM: &[Step] = &[Step::Regex(
    " ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+",
)];

/// Viking: BLOOM's split, then single digits.
const VIKING: &[Step] = &[
    Step::Regex(" ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+"),
    Step::Regex(r"\p{N}"),
];

/// Chameleon: its sentinel and image tokens, tabs/newlines and space pairs, digits,
/// punctuation, then GPT-2's split.
const CHAMELEON: &[Step] = &[
    Step::Regex("<sentinel:[0-9]+>"),
    Step::Regex("(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"),
    Step::Regex(r"([\t\n]|    |  )"),
    Step::Regex(r"\p{N}"),
    Step::Regex(r"[\p{P}!-/:-@\[-`{-~]"),
    Step::Gpt2,
];

/// Every pre-tokenizer dspark runs, by the names llama.cpp gives it.
pub(crate) const RULES: &[Rule] = &[
    rule(&["default"], DEFAULT),
    Rule {
        ignore_merges: true,
        add_bos: true,
        ..rule(
            &[
                "llama3",
                "llama-v3",
                "llama-bpe",
                "falcon3",
                "falcon-h1",
                "pixtral",
                "midm-2.0",
                "lfm2",
                "jina-v5-nano",
            ],
            &[Step::Llama3],
        )
    },
    rule(&["dbrx", "smaug-bpe"], &[Step::Llama3]),
    Rule {
        no_default_bos: true,
        ..rule(&["chatglm-bpe"], &[Step::Llama3])
    },
    Rule {
        no_default_bos: true,
        ignore_merges: true,
        ..rule(&["glm4", "glm5"], &[Step::Llama3])
    },
    rule(&["deepseek-llm"], DEEPSEEK_LLM),
    rule(&["deepseek-coder"], DEEPSEEK_CODER),
    rule(&["falcon"], FALCON),
    rule(
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        DIGITS_THEN_GPT2,
    ),
    rule(
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        &[Step::Gpt2],
    ),
    rule(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        &[Step::Qwen2],
    ),
    rule(&["qwen35"], &[Step::Qwen35]),
    rule(&["poro-chat", "bloom", "gpt3-finnish"], BLOOM),
    rule(&["viking"], VIKING),
    Rule {
        add_bos: true,
        ..rule(&["chameleon"], CHAMELEON)
    },
    rule(&["kimi-k2"], &[Step::KimiK2]),
    rule(&["laguna"], &[Step::Newlines, Step::Qwen2]),
];

/// llama.cpp pre-tokenizers dspark does not run: their patterns need lookaround
/// (`\s+(?!\S)` outside a hand-written splitter), match empty text, or belong to
/// vocabularies spelled in UTF-8 rather than the byte alphabet.
pub(crate) const NOT_RUN: &[&str] = &[
    "jais-2",
    "deepseek-v3",
    "hunyuan-dense",
    "joyai-llm",
    "hy_v4",
    "spark2_5",
    "youtu",
    "tekken",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "minimax-m2",
    "granite-embed-multi-97m",
    "tiny_aya",
    "cohere2moe",
    "superbpe",
    "bailingmoe",
    "bailingmoe2",
    "llada-moe",
    "seed-coder",
    "ufakzeka",
    "afmoe",
    "exaone-moe",
    "minicpm5",
    "gemma4",
    "granite-embed-multi-311m",
    "sarvam-moe",
    "whitespace",
];

/// The rule for `tokenizer.ggml.pre` = `name`.
pub(crate) fn find_rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.names.contains(&name))
}

/// Every name in [`RULES`], for messages.
pub(crate) fn supported_names() -> String {
    RULES
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A built pre-tokenizer.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    steps: Vec<Compiled>,
}

#[derive(Debug)]
enum Compiled {
    Custom(Step),
    /// A pattern over category bytes.
    Collapsed(regex::bytes::Regex),
    /// A pattern over code points (non-ASCII white space read as `\x0B`).
    CodePoints(regex::Regex),
}

impl PreTokenizer {
    /// Builds `steps`; a pattern that cannot run as llama.cpp runs it is an error naming it.
    pub fn new(steps: &[Step]) -> Result<PreTokenizer, String> {
        let steps = steps
            .iter()
            .map(|&s| match s {
                Step::Regex(p) => compile(p).map_err(|e| format!("pattern {p:?}: {e}")),
                other => Ok(Compiled::Custom(other)),
            })
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Cuts `text` into pieces: byte ranges of `text`, in order, covering it.
    pub fn split(&self, text: &str) -> Vec<Range<usize>> {
        let cps: Vec<u32> = text.chars().map(u32::from).collect();
        let mut lens = vec![cps.len()];
        let mut next = Vec::new();
        for step in &self.steps {
            next.clear();
            let mut start = 0;
            for &len in &lens {
                let piece = &cps[start..start + len];
                start += len;
                if piece.is_empty() {
                    continue;
                }
                let before = next.len();
                step.split(piece, &mut next);
                debug_assert_eq!(next[before..].iter().sum::<usize>(), len);
            }
            std::mem::swap(&mut lens, &mut next);
        }
        // Code-point lengths back to byte ranges.
        let mut out = Vec::with_capacity(lens.len());
        let mut chars = text.char_indices().map(|(i, _)| i).chain([text.len()]);
        let mut at = chars.next().unwrap_or(0);
        for len in lens {
            let start = at;
            for _ in 0..len {
                at = chars.next().unwrap_or(text.len());
            }
            out.push(start..at);
        }
        out
    }
}

impl Compiled {
    /// Pushes the lengths of the pieces `piece` (non-empty) is cut into.
    fn split(&self, piece: &[u32], out: &mut Vec<usize>) {
        match self {
            Compiled::Custom(Step::Gpt2) => gpt2(piece, out),
            Compiled::Custom(Step::Llama3) => llama3_like(piece, Digits::Triples, false, out),
            Compiled::Custom(Step::Qwen2) => llama3_like(piece, Digits::Single, false, out),
            Compiled::Custom(Step::Qwen35) => llama3_like(piece, Digits::Single, true, out),
            Compiled::Custom(Step::KimiK2) => kimi_k2(piece, out),
            Compiled::Custom(Step::Newlines) => newlines(piece, out),
            Compiled::Custom(Step::Regex(_)) => unreachable!("regex steps are compiled"),
            Compiled::Collapsed(re) => {
                let bytes: Vec<u8> = piece.iter().map(|&c| unicode::collapsed(c)).collect();
                cut_at_matches(piece.len(), re.find_iter(&bytes).map(|m| m.range()), out);
            }
            Compiled::CodePoints(re) => {
                let text: String = piece
                    .iter()
                    .map(|&c| {
                        let c = if c > 0x7F && unicode::is_whitespace(c) {
                            0x0B
                        } else {
                            c
                        };
                        char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
                    })
                    .collect();
                // Byte offset → code point index.
                let mut index = vec![0usize; text.len() + 1];
                for (n, (b, _)) in text.char_indices().enumerate() {
                    index[b] = n;
                }
                index[text.len()] = piece.len();
                let matches = re
                    .find_iter(&text)
                    .map(|m| index[m.start()]..index[m.end()]);
                cut_at_matches(piece.len(), matches, out);
            }
        }
    }
}

/// Pieces of a `len`-code-point piece cut by `matches` (ascending, non-overlapping): each
/// gap before a match, each match, the rest.
fn cut_at_matches(len: usize, matches: impl Iterator<Item = Range<usize>>, out: &mut Vec<usize>) {
    let mut at = 0;
    for m in matches {
        if m.start > at {
            out.push(m.start - at);
        }
        if !m.is_empty() {
            out.push(m.len());
        }
        at = m.end;
    }
    if at < len {
        out.push(len - at);
    }
}

/// A piece's code points with llama.cpp's out-of-piece answers: no code point, no flags.
struct Cursor<'a> {
    cps: &'a [u32],
    /// End of the last piece pushed.
    done: usize,
}

impl Cursor<'_> {
    fn cp(&self, i: usize) -> Option<u32> {
        self.cps.get(i).copied()
    }
    fn flags(&self, i: usize) -> Option<Flags> {
        self.cps.get(i).map(|&c| unicode::flags(c))
    }
    fn letter(&self, i: usize) -> bool {
        self.flags(i).is_some_and(Flags::is_letter)
    }
    fn number(&self, i: usize) -> bool {
        self.flags(i).is_some_and(Flags::is_number)
    }
    fn mark(&self, i: usize) -> bool {
        self.flags(i).is_some_and(Flags::is_mark)
    }
    fn space(&self, i: usize) -> bool {
        self.flags(i).is_some_and(|f| f.whitespace)
    }
    fn is(&self, i: usize, c: char) -> bool {
        self.cp(i) == Some(u32::from(c))
    }
    fn newline(&self, i: usize) -> bool {
        self.is(i, '\r') || self.is(i, '\n')
    }
    /// Ends a piece at `end`; returns its length (0 pushes nothing).
    fn push(&mut self, end: usize, out: &mut Vec<usize>) -> usize {
        let len = end - self.done;
        if len > 0 {
            out.push(len);
        }
        self.done = end;
        len
    }
    /// The length of an English contraction starting at `pos` (`'s`, `'t`, `'m`, `'d`:
    /// 2; `'re`, `'ve`, `'ll`: 3), comparing letters after `lower`.
    fn contraction(&self, pos: usize, lower: fn(u32) -> u32) -> Option<usize> {
        if !self.is(pos, '\'') || pos + 1 >= self.cps.len() {
            return None;
        }
        let next = self.cp(pos + 1).map(lower)?;
        if [b's', b't', b'm', b'd'].map(u32::from).contains(&next) {
            return Some(2);
        }
        let after = self.cp(pos + 2).map(lower)?;
        let pair = (char::from_u32(next)?, char::from_u32(after)?);
        matches!(pair, ('r', 'e') | ('v', 'e') | ('l', 'l')).then_some(3)
    }
    /// White space from `pos`: its length, and the end of its last `\r` or `\n` (0 if none).
    fn whitespace_run(&self, pos: usize) -> (usize, usize) {
        let (mut n, mut last_newline) = (0, 0);
        while self.space(pos + n) {
            if self.newline(pos + n) {
                last_newline = pos + n + 1;
            }
            n += 1;
        }
        (n, last_newline)
    }
}

/// GPT-2's split.
fn gpt2(cps: &[u32], out: &mut Vec<usize>) {
    let mut c = Cursor { cps, done: 0 };
    let end = cps.len();
    let mut pos = 0;
    while pos < end {
        // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
        if let Some(n) = c.contraction(pos, |x| x) {
            pos += c.push(pos + n, out);
            continue;
        }
        let space = c.is(pos, ' ');
        let first = if space {
            c.flags(pos + 1)
        } else {
            c.flags(pos)
        };
        let run = |pos: &mut usize, c: &Cursor, keep: &dyn Fn(Flags) -> bool| {
            *pos += usize::from(space);
            while c.flags(*pos).is_some_and(keep) {
                *pos += 1;
            }
        };
        match first {
            // ` ?\p{L}+`
            Some(f) if f.is_letter() => run(&mut pos, &c, &Flags::is_letter),
            // ` ?\p{N}+`
            Some(f) if f.is_number() => run(&mut pos, &c, &Flags::is_number),
            // ` ?[^\s\p{L}\p{N}]+`
            Some(f) if !(f.whitespace || f.is_letter() || f.is_number()) => {
                run(&mut pos, &c, &|f| {
                    !(f.whitespace || f.is_letter() || f.is_number())
                })
            }
            _ => {
                let (n, _) = c.whitespace_run(pos);
                if n > 1 && pos + n < end {
                    // `\s+(?!\S)`: all but the last space before a non-space.
                    pos += n - 1;
                } else if n > 0 {
                    pos += n;
                } else {
                    pos += 1;
                }
            }
        }
        c.push(pos, out);
    }
}

/// How a Llama 3-style split takes digits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Digits {
    /// `\p{N}{1,3}`.
    Triples,
    /// `\p{N}`.
    Single,
}

/// Llama 3's split, Qwen2's (single digits) and Qwen3.5's (`marks`: letter runs take marks
/// too, punctuation runs do not).
fn llama3_like(cps: &[u32], digits: Digits, marks: bool, out: &mut Vec<usize>) {
    let mut c = Cursor { cps, done: 0 };
    let end = cps.len();
    let mut pos = 0;
    while pos < end {
        let cp = cps[pos];
        let flags = unicode::flags(cp);
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if let Some(n) = c.contraction(pos, unicode::lower_for_contraction) {
            pos += c.push(pos + n, out);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+  (Qwen3.5: [\p{L}\p{M}]+)
        let wordy = |i: usize| c.letter(i) || (marks && c.mark(i));
        if !(c.newline(pos) || flags.is_number()) && (wordy(pos) || wordy(pos + 1)) {
            pos += 1;
            while wordy(pos) {
                pos += 1;
            }
            c.push(pos, out);
            continue;
        }
        if flags.is_number() {
            match digits {
                // \p{N}{1,3}
                Digits::Triples => {
                    let mut first = pos;
                    while c.number(pos) {
                        pos += 1;
                        if pos - first >= 3 {
                            c.push(pos, out);
                            first = pos;
                        }
                    }
                }
                // \p{N}
                Digits::Single => pos += 1,
            }
            c.push(pos, out);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (Qwen3.5: not \p{M} either). The test is on the code
        // point after a space, which may lie past the piece: then the space alone matches.
        let other = |f: Option<Flags>| {
            f.is_none_or(|f| {
                !(f.whitespace || f.is_letter() || f.is_number() || (marks && f.is_mark()))
            })
        };
        let space = cp == u32::from(' ');
        if other(if space { c.flags(pos + 1) } else { Some(flags) }) {
            pos += usize::from(space);
            while c.flags(pos).is_some() && other(c.flags(pos)) {
                pos += 1;
            }
            while c.newline(pos) {
                pos += 1;
            }
            c.push(pos, out);
            continue;
        }
        let (n, last_newline) = c.whitespace_run(pos);
        if last_newline > 0 {
            // \s*[\r\n]+
            pos = last_newline;
        } else if n > 1 && pos + n < end {
            // \s+(?!\S)
            pos += n - 1;
        } else if n > 0 {
            // \s+
            pos += n;
        } else {
            pos += 1;
        }
        c.push(pos, out);
    }
}

/// Kimi K2's split: `[\p{Han}]+`, then letter runs without Han (an optional leading
/// non-letter, non-digit, non-newline; upper/title/modifier/other letters and marks, then
/// lower; as llama.cpp runs it, any non-Han letters) with an optional contraction,
/// `\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
fn kimi_k2(cps: &[u32], out: &mut Vec<usize>) {
    let mut c = Cursor { cps, done: 0 };
    let end = cps.len();
    let han = |i: usize, c: &Cursor| c.cp(i).is_some_and(unicode::is_han);
    let plain_letter = |i: usize, c: &Cursor| c.letter(i) && !han(i, c);
    let mut pos = 0;
    while pos < end {
        let cp = cps[pos];
        let flags = unicode::flags(cp);
        if unicode::is_han(cp) {
            while han(pos, &c) {
                pos += 1;
            }
            c.push(pos, out);
            continue;
        }
        let leading = !(c.newline(pos) || flags.is_letter() || flags.is_number());
        if (flags.is_letter() && !unicode::is_han(cp)) || (leading && plain_letter(pos + 1, &c)) {
            let start = pos;
            if leading {
                pos += 1;
            }
            let mut letters = false;
            while plain_letter(pos, &c) {
                letters = true;
                pos += 1;
            }
            if letters || (!leading && plain_letter(pos, &c)) {
                if !letters {
                    pos += 1;
                }
                while plain_letter(pos, &c) {
                    pos += 1;
                }
                if let Some(n) = c.contraction(pos, unicode::lower_for_contraction) {
                    pos += n;
                }
                c.push(pos, out);
                continue;
            }
            pos = start;
        }
        if flags.is_number() {
            let mut first = pos;
            while c.number(pos) {
                pos += 1;
                if pos - first >= 3 {
                    c.push(pos, out);
                    first = pos;
                }
            }
            c.push(pos, out);
            continue;
        }
        let space = cp == u32::from(' ');
        let other = |f: Flags| !(f.whitespace || f.is_letter() || f.is_number());
        if (if space { c.flags(pos + 1) } else { Some(flags) }).is_some_and(other) {
            pos += usize::from(space);
            while c.flags(pos).is_some_and(other) {
                pos += 1;
            }
            while c.newline(pos) {
                pos += 1;
            }
            c.push(pos, out);
            continue;
        }
        let (n, last_newline) = c.whitespace_run(pos);
        if last_newline > 0 {
            pos = last_newline;
        } else if n > 1 && pos + n < end {
            pos += n - 1;
        } else if n > 0 {
            pos += n;
        } else {
            pos += 1;
        }
        c.push(pos, out);
    }
}

/// `[^\n]+|[\n]+`.
fn newlines(cps: &[u32], out: &mut Vec<usize>) {
    let mut pos = 0;
    while pos < cps.len() {
        let nl = cps[pos] == u32::from('\n');
        let start = pos;
        while pos < cps.len() && (cps[pos] == u32::from('\n')) == nl {
            pos += 1;
        }
        out.push(pos - start);
    }
}

/// The category classes llama.cpp lets a pattern name, and the stand-in byte of each.
const CATEGORIES: [(&str, u8); 10] = [
    ("N", unicode::COLLAPSED_NUMBER),
    ("L", unicode::COLLAPSED_LETTER),
    ("P", unicode::COLLAPSED_PUNCTUATION),
    ("M", unicode::COLLAPSED_MARK),
    ("S", unicode::COLLAPSED_SYMBOL),
    ("Lu", unicode::COLLAPSED_LETTER),
    ("Ll", unicode::COLLAPSED_LETTER),
    ("Lt", unicode::COLLAPSED_LETTER),
    ("Lm", unicode::COLLAPSED_LETTER),
    ("Lo", unicode::COLLAPSED_LETTER),
];

/// The ASCII members of each class (a letter class: `A-Za-z`; punctuation:
/// `!-#%-*,-/:;?@[-]_{}`; symbols: `$+<=>^`|~`; numbers: `0-9`; marks: none).
fn ascii_members(byte: u8) -> &'static [(u32, u32)] {
    match byte {
        unicode::COLLAPSED_NUMBER => &[(0x30, 0x39)],
        unicode::COLLAPSED_LETTER => &[(0x41, 0x5A), (0x61, 0x7A)],
        unicode::COLLAPSED_PUNCTUATION => &[
            (0x21, 0x23),
            (0x25, 0x2A),
            (0x2C, 0x2F),
            (0x3A, 0x3B),
            (0x3F, 0x40),
            (0x5B, 0x5D),
            (0x5F, 0x5F),
            (0x7B, 0x7B),
            (0x7D, 0x7D),
        ],
        unicode::COLLAPSED_SYMBOL => &[
            (0x24, 0x24),
            (0x2B, 0x2B),
            (0x3C, 0x3E),
            (0x5E, 0x5E),
            (0x60, 0x60),
            (0x7C, 0x7C),
            (0x7E, 0x7E),
        ],
        _ => &[],
    }
}

/// `\s`: C's `isspace` (llama.cpp's regexes run on `std::regex` in the C locale).
const SPACE: &[(u32, u32)] = &[(0x09, 0x0D), (0x20, 0x20)];
const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];

/// What an escape or a literal stands for.
enum Atom {
    Char(u32),
    Set(Vec<(u32, u32)>),
    NotSet(Vec<(u32, u32)>),
}

/// Compiles llama.cpp pattern `p` as llama.cpp runs it.
fn compile(p: &str) -> Result<Compiled, String> {
    let collapsed = CATEGORIES
        .iter()
        .any(|(name, _)| p.contains(&format!("\\p{{{name}}}")));
    if collapsed && !p.is_ascii() {
        return Err("names Unicode categories and holds non-ASCII characters".into());
    }
    let rust = translate(p, collapsed)?;
    let empty = |m: bool| {
        if m {
            Err("matches empty text".to_string())
        } else {
            Ok(())
        }
    };
    if collapsed {
        let re = regex::bytes::Regex::new(&format!("(?-u){rust}")).map_err(|e| e.to_string())?;
        empty(re.is_match(b""))?;
        Ok(Compiled::Collapsed(re))
    } else {
        let re = regex::Regex::new(&rust).map_err(|e| e.to_string())?;
        empty(re.is_match(""))?;
        Ok(Compiled::CodePoints(re))
    }
}

/// `p` (ECMAScript syntax, the subset llama.cpp's patterns use) in the `regex` crate's.
fn translate(p: &str, collapsed: bool) -> Result<String, String> {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let lit = |c: u32| -> String {
        match char::from_u32(c) {
            Some(ch) if ch.is_ascii_alphanumeric() => ch.to_string(),
            _ if collapsed => format!("\\x{c:02X}"),
            _ => format!("\\x{{{c:X}}}"),
        }
    };
    let set = |ranges: &[(u32, u32)], neg: bool| -> String {
        let mut s = String::from(if neg { "[^" } else { "[" });
        for &(lo, hi) in ranges {
            s.push_str(&lit(lo));
            if hi != lo {
                s.push('-');
                s.push_str(&lit(hi));
            }
        }
        s.push(']');
        s
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let (atom, next) = escape(&chars, i, collapsed)?;
                i = next;
                match atom {
                    Atom::Char(c) => out.push_str(&lit(c)),
                    Atom::Set(r) => out.push_str(&set(&r, false)),
                    Atom::NotSet(r) => out.push_str(&set(&r, true)),
                }
                continue;
            }
            '[' => {
                let (ranges, neg, next) = class(&chars, i, collapsed)?;
                out.push_str(&set(&ranges, neg));
                i = next;
                continue;
            }
            '(' => {
                if chars.get(i + 1) == Some(&'?') {
                    if chars.get(i + 2) != Some(&':') {
                        return Err("lookaround and inline flags are not run".into());
                    }
                    out.push_str("(?:");
                    i += 3;
                    continue;
                }
                out.push('(');
            }
            ')' | '|' | '*' | '+' | '?' | '^' | '$' => out.push(c),
            '{' => {
                let close = chars[i..]
                    .iter()
                    .position(|&x| x == '}')
                    .ok_or("unclosed `{`")?;
                let body: String = chars[i + 1..i + close].iter().collect();
                if body.is_empty() || !body.chars().all(|x| x.is_ascii_digit() || x == ',') {
                    return Err(format!("`{{{body}}}` is not a repetition"));
                }
                out.push_str(&format!("{{{body}}}"));
                i += close + 1;
                continue;
            }
            '.' | '}' | ']' => return Err(format!("`{c}` is not run")),
            c => out.push_str(&lit(u32::from(c))),
        }
        i += 1;
    }
    Ok(out)
}

/// The escape at `chars[i]` (a backslash), and the index after it.
fn escape(chars: &[char], i: usize, collapsed: bool) -> Result<(Atom, usize), String> {
    let Some(&e) = chars.get(i + 1) else {
        return Err("ends in a backslash".into());
    };
    let atom = match e {
        'p' => {
            let close = chars[i..]
                .iter()
                .position(|&x| x == '}')
                .ok_or("unclosed `\\p{`")?;
            let name: String = chars[i + 3..i + close].iter().collect();
            let byte = CATEGORIES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, b)| b)
                .filter(|_| collapsed && chars.get(i + 2) == Some(&'{'))
                .ok_or(format!("category `\\p{{{name}}}` is not run"))?;
            let mut r = vec![(u32::from(byte), u32::from(byte))];
            r.extend_from_slice(ascii_members(byte));
            return Ok((Atom::Set(r), i + close + 1));
        }
        's' => Atom::Set(SPACE.to_vec()),
        'S' => Atom::NotSet(SPACE.to_vec()),
        'd' => Atom::Set(DIGIT.to_vec()),
        'D' => Atom::NotSet(DIGIT.to_vec()),
        'w' => Atom::Set(WORD.to_vec()),
        'W' => Atom::NotSet(WORD.to_vec()),
        't' => Atom::Char(0x09),
        'n' => Atom::Char(0x0A),
        'v' => Atom::Char(0x0B),
        'f' => Atom::Char(0x0C),
        'r' => Atom::Char(0x0D),
        'x' => {
            let hex: String = chars
                .get(i + 2..i + 4)
                .ok_or("short `\\x`")?
                .iter()
                .collect();
            let v = u32::from_str_radix(&hex, 16).map_err(|_| format!("bad `\\x{hex}`"))?;
            return Ok((Atom::Char(v), i + 4));
        }
        c if c.is_ascii_alphanumeric() => return Err(format!("escape `\\{c}` is not run")),
        c => Atom::Char(u32::from(c)),
    };
    Ok((atom, i + 2))
}

/// A bracket class: its ranges, whether negated, the index after it.
type BracketClass = (Vec<(u32, u32)>, bool, usize);

/// The bracket class at `chars[i]` (`[`).
fn class(chars: &[char], i: usize, collapsed: bool) -> Result<BracketClass, String> {
    let mut j = i + 1;
    let neg = chars.get(j) == Some(&'^');
    if neg {
        j += 1;
    }
    let mut ranges = Vec::new();
    let atom = |j: usize| -> Result<(Atom, usize), String> {
        match chars.get(j) {
            None => Err("unclosed `[`".into()),
            Some('\\') => escape(chars, j, collapsed),
            Some(&c) => Ok((Atom::Char(u32::from(c)), j + 1)),
        }
    };
    loop {
        match chars.get(j) {
            None => return Err("unclosed `[`".into()),
            Some(']') => break,
            Some('[') => return Err("`[` inside a class is not run".into()),
            _ => {}
        }
        let (a, next) = atom(j)?;
        j = next;
        match a {
            Atom::Char(lo) => {
                if chars.get(j) == Some(&'-') && chars.get(j + 1).is_some_and(|&c| c != ']') {
                    let (b, next) = atom(j + 1)?;
                    let Atom::Char(hi) = b else {
                        return Err("a range ends in a class escape".into());
                    };
                    if hi < lo {
                        return Err("a range runs backwards".into());
                    }
                    ranges.push((lo, hi));
                    j = next;
                } else {
                    ranges.push((lo, lo));
                }
            }
            Atom::Set(r) => ranges.extend(r),
            Atom::NotSet(_) => return Err("a negated escape inside a class is not run".into()),
        }
    }
    if ranges.is_empty() {
        return Err("empty class".into());
    }
    Ok((ranges, neg, j + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'t>(steps: &[Step], text: &'t str) -> Vec<&'t str> {
        let pre = PreTokenizer::new(steps).unwrap();
        pre.split(text).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn every_rule_builds_and_names_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for r in RULES {
            PreTokenizer::new(r.steps).unwrap_or_else(|e| panic!("{:?}: {e}", r.names));
            for n in r.names {
                assert!(seen.insert(*n), "{n} twice");
                assert!(!NOT_RUN.contains(n), "{n} both run and not");
            }
        }
    }

    #[test]
    fn patterns_that_cannot_run_are_refused() {
        for (p, why) in [
            (r"\s+(?!\S)", "lookaround"),
            (r"\p{L}é", "non-ASCII"),
            (r"\s*", "empty"),
            (r"a.b", "`.`"),
            (r"\bx", "escape"),
            (r"\p{Han}+", "category"),
            (r"[\S]", "negated"),
            (r"\1", "escape"),
        ] {
            let e = PreTokenizer::new(&[Step::Regex(p)]).unwrap_err();
            assert!(e.contains(why), "{p}: {e}");
        }
    }

    #[test]
    fn translation_of_categories_and_classes() {
        assert_eq!(translate(r"\p{N}+", true).unwrap(), r"[\xD10-9]+");
        assert_eq!(
            translate(r"[^\s\p{L}]", true).unwrap(),
            r"[^\x09-\x0D\x20\xD2A-Za-z]"
        );
        assert_eq!(
            translate("[\u{4e00}-\u{9fa5}]+", false).unwrap(),
            r"[\x{4E00}-\x{9FA5}]+"
        );
        assert_eq!(
            translate(r"\s?[!-/]+", false).unwrap(),
            r"[\x{9}-\x{D}\x{20}]?[\x{21}-\x{2F}]+"
        );
    }

    #[test]
    fn gpt2_split() {
        let s = |t| pieces(&[Step::Gpt2], t);
        assert_eq!(s("Hello world"), ["Hello", " world"]);
        assert_eq!(
            s("I'm  here's 12 3.5"),
            ["I", "'m", " ", " here", "'s", " 12", " 3", ".", "5"]
        );
        assert_eq!(s("a  \n b"), ["a", "  \n", " b"]);
        assert_eq!(s("x   "), ["x", "   "]);
        assert_eq!(s("'S"), ["'", "S"]); // case-sensitive contractions
    }

    #[test]
    fn llama3_and_qwen2_splits() {
        let l = |t| pieces(&[Step::Llama3], t);
        let q = |t| pieces(&[Step::Qwen2], t);
        assert_eq!(l("12345 THEY'RE"), ["123", "45", " THEY", "'RE"]);
        assert_eq!(q("12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(l("a\n\n  b"), ["a", "\n\n", " ", " b"]);
        assert_eq!(l("(x)!\n"), ["(x", ")!\n"]);
        assert_eq!(l("a !"), ["a", " !"]);
        assert_eq!(l("a "), ["a", " "]);
    }

    #[test]
    fn qwen35_keeps_marks_in_words() {
        // e + combining acute: one word for Qwen3.5, two pieces for Qwen2.
        assert_eq!(
            pieces(&[Step::Qwen35], "cafe\u{301}!"),
            ["cafe\u{301}", "!"]
        );
        assert_eq!(pieces(&[Step::Qwen2], "cafe\u{301}!"), ["cafe", "\u{301}!"]);
    }

    #[test]
    fn kimi_k2_split() {
        let k = |t| pieces(&[Step::KimiK2], t);
        assert_eq!(k("中文abc日本"), ["中文", "abc", "日本"]);
        assert_eq!(k("DON'T 1234567"), ["DON'T", " ", "123", "456", "7"]);
        assert_eq!(k("xあい"), ["xあい"]); // hiragana is not Han
        assert_eq!(k("(中"), ["(", "中"]);
    }

    #[test]
    fn regex_steps_cut_at_matches_and_between() {
        assert_eq!(
            pieces(DEFAULT, "a+b=1234"),
            ["a", "+", "b", "=", "123", "4"]
        );
        assert_eq!(pieces(DIGITS_THEN_GPT2, "ab12 c"), ["ab", "1", "2", " c"]);
        assert_eq!(pieces(&[Step::Newlines], "a\n\nb"), ["a", "\n\n", "b"]);
        // Non-ASCII white space is `\s` to a collapsed pattern.
        assert_eq!(pieces(DEEPSEEK_CODER, "a\u{3000}b"), ["a", "\u{3000}b"]);
    }
}
