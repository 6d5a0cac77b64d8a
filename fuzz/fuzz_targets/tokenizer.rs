//! Any bytes as a text and a GGUF vocabulary: the first byte is the text's length, then
//! the text (lossily UTF-8), then the file: parse (vocabulary-only files too), the
//! contract's check of the tokenizer keys, the tokenizer rebuilt as llama.cpp runs it,
//! the text encoded with and without special tokens and decoded. A checked vocabulary
//! must tokenize or refuse with a typed error; nothing may panic.
#![no_main]

use dspark_runtime::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n).min(rest.len());
    let text = String::from_utf8_lossy(&rest[..n]);
    let Ok(file) = dspark_contract::vocab_file(&rest[n..]) else { return };
    let Ok(vocab) = dspark_contract::tokenizer(&file) else { return };
    let Ok(tok) = Tokenizer::from_gguf_named(&vocab, "fuzz") else { return };
    for (add, parse) in [(false, false), (true, true)] {
        if let Ok(ids) = tok.encode_with(&text, add, parse) {
            assert!(ids.iter().all(|&i| (i as usize) < tok.vocab_size()));
            tok.decode(&ids).expect("ids it made decode");
        }
    }
});
