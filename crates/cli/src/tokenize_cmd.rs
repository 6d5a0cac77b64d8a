//! `dspark tokenize`: a GGUF's own vocabulary on a text, printed as llama.cpp's
//! `llama-tokenize` prints it. Any GGUF with `tokenizer.ggml.*` keys will do: a model of
//! any architecture or a vocabulary-only file; only those keys are read and checked.
//!
//! Defaults are llama-tokenize's: BOS (and EOS) added when the vocabulary says so
//! (`--no-bos` not to), special tokens written in the text matched (`--no-parse-special`
//! not to), escapes (`\n`, `\r`, `\t`, `\'`, `\"`, `\\`, `\xHH`) processed in the text
//! from `-p`, `-f` and `--stdin` alike (`--no-escape` not to). Output: one line per token,
//! `%6d -> '%s'` with the token's piece (special tokens as their text, bytes as they are,
//! cut at a NUL byte as llama-tokenize's C string is); with `--ids`, the ids as a list,
//! `[1, 2, 3]`; `--show-count` adds `Total number of tokens: N`.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use dspark_runtime::tokenizer::Tokenizer;

use crate::mmap::map_input;
use crate::Outcome;

/// Largest text tokenized (a text file of 64 MiB is some 16 million tokens).
const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Arguments of `dspark tokenize`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("text").required(true).args(["prompt", "file", "stdin"])))]
pub struct TokenizeArgs {
    /// The GGUF whose vocabulary tokenizes (a model, or a vocabulary-only file).
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// The text.
    #[arg(short = 'p', long = "prompt")]
    pub prompt: Option<String>,
    /// A file holding the text (read as it is, trailing newline included).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Read the text from standard input.
    #[arg(long)]
    pub stdin: bool,
    /// Print only the ids, as a list: `[1, 2, 3]`.
    #[arg(long)]
    pub ids: bool,
    /// Do not add BOS, even when the vocabulary adds it.
    #[arg(long)]
    pub no_bos: bool,
    /// Do not match special tokens written in the text.
    #[arg(long)]
    pub no_parse_special: bool,
    /// Take the text as it is, without processing escapes.
    #[arg(long)]
    pub no_escape: bool,
    /// Print the number of tokens after them.
    #[arg(long)]
    pub show_count: bool,
}

/// Runs `dspark tokenize`.
pub fn run(a: TokenizeArgs) -> Result<Outcome> {
    let name = a.model.display().to_string();
    let bytes = map_input(&a.model)?;
    let file = dspark_contract::vocab_file(&bytes).with_context(|| name.clone())?;
    let vocab = dspark_contract::tokenizer(&file).map_err(|e| {
        let mut msg = format!("{name}: not a valid {}:", e.kind);
        for f in &e.findings {
            msg.push_str(&format!("\n  - {f}"));
        }
        anyhow::anyhow!(msg)
    })?;
    let tok = Tokenizer::from_gguf_named(&vocab, &name)?;

    let (raw, source) = match (&a.prompt, &a.file) {
        (Some(p), _) => (p.clone().into_bytes(), "the prompt".to_string()),
        (None, Some(f)) => (
            dspark_runtime::tokenizer::read_capped(f, MAX_TEXT_BYTES)?,
            f.display().to_string(),
        ),
        (None, None) => {
            let mut b = Vec::new();
            std::io::stdin()
                .lock()
                .take(MAX_TEXT_BYTES + 1)
                .read_to_end(&mut b)
                .context("cannot read the text from stdin")?;
            if b.len() as u64 > MAX_TEXT_BYTES {
                anyhow::bail!("stdin: more than {} MiB of text", MAX_TEXT_BYTES >> 20);
            }
            (b, "stdin".to_string())
        }
    };
    let raw = if a.no_escape { raw } else { unescape(&raw) };
    let text = String::from_utf8(raw).map_err(|e| {
        anyhow::anyhow!(
            "{source}: the text is not UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )
    })?;

    let ids = tok.encode_with(&text, tok.adds_bos() && !a.no_bos, !a.no_parse_special)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    } else {
        for &id in &ids {
            let piece = tok.token_to_piece(id, true)?;
            let shown = piece.split(|&b| b == 0).next().unwrap_or(&[]);
            write!(out, "{id:6} -> '")?;
            out.write_all(shown)?;
            out.write_all(b"'\n")?;
        }
    }
    if a.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    out.flush()?;
    Ok(Outcome::Ok)
}

/// llama.cpp's escape processing: `\n`, `\r`, `\t`, `\'`, `\"`, `\\`, `\xHH`; any other
/// backslash stays as it is.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' || i + 1 == s.len() {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let e = s[i + 1];
        let simple = match e {
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'\'' | b'"' | b'\\' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            i += 2;
            continue;
        }
        // `\xHH`: the two bytes after it as C's `strtol(_, 16)` reads them, taking both.
        if let Some(v) = s.get(i + 2..i + 4).filter(|_| e == b'x').and_then(hex_pair) {
            out.push(v);
            i += 4;
            continue;
        }
        out.extend_from_slice(&[b'\\', e]);
        i += 2;
    }
    out
}

/// Two bytes read whole by C's `strtol(_, 16)`: two hex digits, or one after a white-space
/// byte or a sign (a minus wraps, as llama.cpp's cast to `char` does).
fn hex_pair(h: &[u8]) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    match (h[0], h[1]) {
        (a, b) if a.is_ascii_hexdigit() && b.is_ascii_hexdigit() => {
            Some(digit(a)? * 16 + digit(b)?)
        }
        (b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b'+', b) => digit(b),
        (b'-', b) => digit(b).map(u8::wrapping_neg),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn escapes_as_llama_cpp() {
        let u = |s: &str| unescape(s.as_bytes());
        assert_eq!(u(r#"a\nb\tc\\d\'\"e"#), b"a\nb\tc\\d'\"e");
        assert_eq!(u(r"\x41\x4a!"), b"AJ!");
        assert_eq!(u(r"\x41"), b"A");
        // strtol's leniency: white space or a sign before one digit.
        assert_eq!(u(r"\x 9|\x+a|\x-1"), b"\x09|\x0a|\xff");
        // A bad digit, a short `\x`, an unknown escape, a lone backslash: kept.
        assert_eq!(u(r"\x4"), br"\x4");
        assert_eq!(u(r"\xG1!"), br"\xG1!");
        assert_eq!(u(r"\q"), br"\q");
        assert_eq!(u("a\\"), b"a\\");
    }
}
