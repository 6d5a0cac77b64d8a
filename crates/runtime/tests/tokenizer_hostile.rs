//! Hostile vocabularies and texts: every value a tokenizer reads from a GGUF is refused by
//! the contract naming its key, or tokenizes without a panic; pathological texts on every
//! pre-tokenizer finish and decode back; and a thousand random mutants of a vocabulary
//! are each refused or run.

use std::path::Path;

use dspark_gguf::{Array, GgufFile, Header, Value};
use dspark_runtime::tokenizer::{supported_pre_tokenizers, Tokenizer};
use dspark_testkit::craft::Parts;
use dspark_testkit::rng::SplitMix64;

/// The kimi-k2 fixture vocabulary (gpt2, every byte a token, merges, control tokens).
fn byte_level() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer/kimi-k2.gguf"))
        .unwrap()
}

/// A small SentencePiece vocabulary: `<unk>` `<s>` `</s>`, the 256 byte tokens, `▁`, the
/// letters and a few merges, scored.
fn sentencepiece() -> Vec<u8> {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for t in ["▁", "▁a", "▁the", "th", "he", "the", "ab", "▁ab"] {
        tokens.push(t.into());
        types.push(1);
    }
    for c in 'a'..='z' {
        tokens.push(c.to_string());
        types.push(1);
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let mut h = Header::new();
    for (k, v) in [
        ("general.architecture", Value::String("llama".into())),
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ("tokenizer.ggml.scores", Value::Array(Array::F32(scores))),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ] {
        h.push_kv(k, v).unwrap();
    }
    let mut bytes = Vec::new();
    h.write_file(&mut bytes, &[]).unwrap();
    bytes
}

/// The tokenizer of `bytes`, or the contract's or the builder's refusal as text.
fn build(bytes: &[u8]) -> Result<Tokenizer, String> {
    let file = dspark_contract::vocab_file(bytes).map_err(|e| e.to_string())?;
    let vocab = dspark_contract::tokenizer(&file).map_err(|e| {
        e.findings
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Tokenizer::from_gguf_named(&vocab, "test").map_err(|e| e.to_string())
}

fn tokens_of(bytes: &[u8]) -> Vec<String> {
    let f = GgufFile::parse(bytes).unwrap();
    match f.get("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(v))) => v.clone(),
        _ => unreachable!(),
    }
}

fn with_tokens(bytes: &[u8], edit: impl FnOnce(&mut Vec<String>)) -> Vec<u8> {
    let mut t = tokens_of(bytes);
    edit(&mut t);
    Parts::of(bytes)
        .set("tokenizer.ggml.tokens", Value::Array(Array::String(t)))
        .bytes()
}

#[test]
fn hostile_values_are_refused_naming_the_key() {
    let bl = byte_level();
    let sp = sentencepiece();
    let n_bl = tokens_of(&bl).len();
    let n_sp = tokens_of(&sp).len();
    let set = |b: &[u8], k: &str, v: Value| Parts::of(b).set(k, v).bytes();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("token of 65537 bytes", with_tokens(&bl, |t| t[300] = "x".repeat(65_537)), "key `tokenizer.ggml.tokens`: token 300 has 65537 bytes, more than 65536"),
        ("empty token", with_tokens(&bl, |t| t[5] = String::new()), "key `tokenizer.ggml.tokens`: token 5 is empty"),
        ("repeated token", with_tokens(&bl, |t| t[301] = t[300].clone()), "key `tokenizer.ggml.tokens`: token 301"),
        ("merge naming a missing token", set(&bl, "tokenizer.ggml.merges", Value::Array(Array::String(vec!["a zz".into()]))), "key `tokenizer.ggml.merges`: merge 0 (\"a zz\") names \"zz\", which is not a token"),
        ("merge without a space", set(&bl, "tokenizer.ggml.merges", Value::Array(Array::String(vec!["ab".into()]))), "key `tokenizer.ggml.merges`: merge 0 (\"ab\") is not two tokens separated by one space"),
        ("merge with two spaces", set(&bl, "tokenizer.ggml.merges", Value::Array(Array::String(vec!["a b c".into()]))), "is not two tokens separated by one space"),
        ("merges empty", Parts::of(&bl).set("tokenizer.ggml.pre", Value::String("qwen2".into())).set("tokenizer.ggml.merges", Value::Array(Array::String(vec![]))).bytes(), "key `tokenizer.ggml.merges`: missing or empty"),
        ("merges of numbers", set(&bl, "tokenizer.ggml.merges", Value::Array(Array::I32(vec![1]))), "key `tokenizer.ggml.merges`: is ARRAY[INT32], expected ARRAY[STRING]"),
        ("tokens of numbers", set(&bl, "tokenizer.ggml.tokens", Value::Array(Array::U32(vec![1; n_bl]))), "key `tokenizer.ggml.tokens`: is ARRAY[UINT32], expected ARRAY[STRING]"),
        ("token type 7", set(&bl, "tokenizer.ggml.token_type", Value::Array(Array::I32(vec![7; n_bl]))), "key `tokenizer.ggml.token_type`: token 0 has type 7, expected 0..=6"),
        ("token types short", set(&bl, "tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 3]))), "key `tokenizer.ggml.token_type`: has 3 entries"),
        ("byte token not <0xXX>", set(&bl, "tokenizer.ggml.token_type", Value::Array(Array::I32(vec![6; n_bl]))), "key `tokenizer.ggml.token_type`: token 0 (\"Ā\") is a byte token (type 6) but not spelled <0xXX>"),
        ("bos outside", set(&bl, "tokenizer.ggml.bos_token_id", Value::U32(u32::MAX)), "key `tokenizer.ggml.bos_token_id`: is 4294967295, outside the vocabulary"),
        ("fim id outside", set(&bl, "tokenizer.ggml.fim_pre_token_id", Value::U32(n_bl as u32)), "key `tokenizer.ggml.fim_pre_token_id`: is"),
        ("eos as text", set(&bl, "tokenizer.ggml.eos_token_id", Value::String("x".into())), "key `tokenizer.ggml.eos_token_id`: is STRING, expected UINT32"),
        ("add_bos as number", set(&bl, "tokenizer.ggml.add_bos_token", Value::U32(1)), "key `tokenizer.ggml.add_bos_token`: is UINT32, expected BOOL"),
        ("pre as number", set(&bl, "tokenizer.ggml.pre", Value::U32(1)), "key `tokenizer.ggml.pre`: is UINT32, expected STRING"),
        ("model missing", Parts::of(&bl).remove("tokenizer.ggml.model").bytes(), "key `tokenizer.ggml.model`: missing"),
        ("tokens missing", Parts::of(&bl).remove("tokenizer.ggml.tokens").bytes(), "key `tokenizer.ggml.tokens`: missing"),
        ("spm scores NaN", set(&sp, "tokenizer.ggml.scores", Value::Array(Array::F32(vec![f32::NAN; n_sp]))), "key `tokenizer.ggml.scores`: token 0 has score NaN"),
        ("spm scores infinite", set(&sp, "tokenizer.ggml.scores", Value::Array(Array::F32(vec![f32::INFINITY; n_sp]))), "key `tokenizer.ggml.scores`: token 0 has score inf"),
        ("spm scores short", set(&sp, "tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0; 2]))), "key `tokenizer.ggml.scores`: has 2 entries"),
        ("spm scores missing", Parts::of(&sp).remove("tokenizer.ggml.scores").bytes(), "key `tokenizer.ggml.scores`: missing: a llama (SentencePiece) vocabulary merges by score"),
        ("spm without byte token", with_tokens(&sp, |t| t[3 + 0x41] = "<0x41".into()), "has no token <0x41>"),
        // llama.cpp looks byte tokens up in upper case: `<0xab>` does not serve 0xAB.
        ("spm lower-case byte token", with_tokens(&sp, |t| t[3 + 0xAB] = "<0xab>".into()), "has no token <0xAB>"),
    ];
    for (what, bytes, want) in cases {
        match build(&bytes) {
            Err(e) => assert!(e.contains(want), "{what}: expected `{want}` in {e}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }
}

#[test]
fn unsupported_models_and_pre_tokenizers_are_named() {
    let bl = byte_level();
    let set = |k: &str, v: &str| Parts::of(&bl).set(k, Value::String(v.into())).bytes();
    for (bytes, want) in [
        (set("tokenizer.ggml.model", "t5"), "tokenizer.ggml.model `t5` is not supported (supported: gpt2 (byte-level BPE), llama (SentencePiece))"),
        (set("tokenizer.ggml.pre", "tekken"), "tokenizer.ggml.pre `tekken` is a llama.cpp pre-tokenizer dspark does not run (supported: default, llama3,"),
        (set("tokenizer.ggml.pre", "qwen3"), "tokenizer.ggml.pre `qwen3` is not a pre-tokenizer llama.cpp knows (supported:"),
    ] {
        let e = build(&bytes).err().expect("refused");
        assert!(e.contains(want), "expected `{want}` in {e}");
    }
    // Without a pre-tokenizer key, llama.cpp's `default`.
    let t = build(&Parts::of(&bl).remove("tokenizer.ggml.pre").bytes()).unwrap();
    assert_eq!(
        t.decode(&t.encode("a+b=1234").unwrap()).unwrap(),
        "a+b=1234"
    );
}

/// Texts that stress a splitter, a merge queue or the partition.
fn nasty_texts() -> Vec<String> {
    let mut v = vec![
        "a".repeat(200_000),
        " ".repeat(100_000),
        "\n".repeat(50_000) + "x",
        "1".repeat(100_000),
        "'s".repeat(50_000),
        "中".repeat(50_000),
        "e\u{301}".repeat(30_000),
        "<|im_end|".repeat(20_000),
        "<|im_end|>".repeat(20_000),
        "[EOS]".repeat(20_000),
        "😀\u{200d}".repeat(20_000),
        "\u{10FFFF}\u{E000}\u{FFFD}\u{0}\u{7F}\u{85}\u{2028}".repeat(5_000),
        "!".repeat(100_000),
        " ?".repeat(50_000),
        "\r\n \t".repeat(25_000),
    ];
    let mut rng = SplitMix64(7);
    for _ in 0..20 {
        v.push(
            (0..2_000)
                .filter_map(|_| char::from_u32((rng.next_u64() % 0x11_0000) as u32))
                .collect(),
        );
    }
    v
}

#[test]
fn pathological_texts_finish_on_every_pre_tokenizer_and_decode_back() {
    let bl = byte_level();
    let texts = nasty_texts();
    // One name per row of the pre-tokenizer table (every name builds).
    let rows = [
        "default",
        "llama3",
        "dbrx",
        "chatglm-bpe",
        "glm4",
        "deepseek-llm",
        "deepseek-coder",
        "falcon",
        "starcoder",
        "gpt-2",
        "qwen2",
        "qwen35",
        "bloom",
        "viking",
        "chameleon",
        "kimi-k2",
        "laguna",
    ];
    for pre in supported_pre_tokenizers() {
        build(
            &Parts::of(&bl)
                .set("tokenizer.ggml.pre", Value::String(pre.into()))
                .bytes(),
        )
        .unwrap_or_else(|e| panic!("{pre}: {e}"));
    }
    for pre in rows {
        assert!(supported_pre_tokenizers().contains(&pre), "{pre}");
        let t = build(
            &Parts::of(&bl)
                .set("tokenizer.ggml.pre", Value::String(pre.into()))
                .bytes(),
        )
        .unwrap_or_else(|e| panic!("{pre}: {e}"));
        for text in &texts {
            let ids = t.encode_with(text, true, true).unwrap();
            assert!(ids.len() <= text.len() + 2, "{pre}");
            // BOS first; every byte has a token, so the rest decodes back.
            assert_eq!(
                t.decode(&ids[1..]).unwrap(),
                *text,
                "{pre}: {:?}…",
                &text.chars().take(8).collect::<String>()
            );
        }
    }
    let sp = build(&sentencepiece()).unwrap();
    for text in &texts {
        let ids = sp.encode_with(text, false, false).unwrap();
        let back = sp.decode(&ids).unwrap();
        assert_eq!(back.strip_prefix(' '), Some(text.as_str()));
    }
}

#[test]
fn many_special_tokens_overlapping_in_text() {
    // 2,000 control tokens, each a prefix of the next ("<" + "a" × i + ">" and "<" + "a" ×
    // i), and text made of them.
    let bl = byte_level();
    let mut tokens = tokens_of(&bl);
    let n0 = tokens.len();
    for i in 1..=1_000 {
        tokens.push(format!("<{}>", "a".repeat(i)));
        tokens.push(format!("<{}", "a".repeat(i)));
    }
    let mut types = vec![1i32; n0];
    types.resize(tokens.len(), 3);
    let bytes = Parts::of(&bl)
        .set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .bytes();
    let t = build(&bytes).unwrap();
    let text: String = (1..=300)
        .map(|i| format!("<{}>x<{}", "a".repeat(i), "a".repeat(i / 2 + 1)))
        .collect();
    let ids = t.encode(&text).unwrap();
    assert_eq!(t.decode(&ids).unwrap(), text);
    // Longest first: "<aaa>" is one token, never "<aa" + "a>".
    let ids = t.encode("<aaa>").unwrap();
    assert_eq!(ids.len(), 1);
}

#[test]
fn random_mutants_are_refused_or_tokenize() {
    let bases = [byte_level(), sentencepiece()];
    let mut rng = SplitMix64(2026);
    let texts = [
        "Hello, world! 123",
        "中文 <|im_end|> [EOS] <s></s>",
        "\u{0}\u{FFFD} \t\n",
        "",
    ];
    let (mut refused, mut ran) = (0, 0);
    for i in 0..1_000 {
        let base = &bases[i % 2];
        let mut tokens = tokens_of(base);
        let n = tokens.len();
        let parts = Parts::of(base);
        let bytes = match rng.next_u64() % 6 {
            // Garble a token.
            0 => {
                let j = (rng.next_u64() as usize) % n;
                let junk: String = (0..rng.next_u64() % 8)
                    .filter_map(|_| char::from_u32((rng.next_u64() % 0x3000) as u32))
                    .collect();
                tokens[j] = junk;
                parts
                    .set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
                    .bytes()
            }
            // Swap two tokens.
            1 => {
                let (a, b) = ((rng.next_u64() as usize) % n, (rng.next_u64() as usize) % n);
                tokens.swap(a, b);
                parts
                    .set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
                    .bytes()
            }
            // Random types.
            2 => {
                let tt = (0..n).map(|_| (rng.next_u64() % 8) as i32).collect();
                parts
                    .set("tokenizer.ggml.token_type", Value::Array(Array::I32(tt)))
                    .bytes()
            }
            // A random special id.
            3 => parts
                .set(
                    "tokenizer.ggml.eos_token_id",
                    Value::U32((rng.next_u64() % (2 * n as u64)) as u32),
                )
                .set("tokenizer.ggml.add_eos_token", Value::Bool(true))
                .bytes(),
            // Random merges of tokens.
            4 => {
                let m = (0..50)
                    .map(|_| {
                        let a = &tokens[(rng.next_u64() as usize) % n];
                        let b = &tokens[(rng.next_u64() as usize) % n];
                        format!("{a} {b}")
                    })
                    .collect();
                parts
                    .set("tokenizer.ggml.merges", Value::Array(Array::String(m)))
                    .bytes()
            }
            // Random scores.
            _ => {
                let s = (0..n)
                    .map(|_| f32::from_bits(rng.next_u64() as u32))
                    .collect();
                parts
                    .set("tokenizer.ggml.scores", Value::Array(Array::F32(s)))
                    .bytes()
            }
        };
        match build(&bytes) {
            Err(_) => refused += 1,
            Ok(t) => {
                ran += 1;
                for text in texts {
                    for (add, parse) in [(false, false), (true, true)] {
                        if let Ok(ids) = t.encode_with(text, add, parse) {
                            t.decode(&ids).unwrap();
                        }
                    }
                }
            }
        }
    }
    assert!(refused > 100 && ran > 100, "refused {refused}, ran {ran}");
}
