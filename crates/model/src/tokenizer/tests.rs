//! The tokenizer reproduces llama.cpp's test vectors exactly.

use super::*;
use crate::gguf::GgufFile;
use std::path::PathBuf;

pub(crate) fn testdata() -> PathBuf {
    crate::testing::testdata_dir()
}

fn check_vectors(name: &str) {
    let dir = testdata().join("tokenizer");
    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e} (set HASTEN_TESTDATA)"));
    let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    check_vectors_with(name, &tok);
    // The same vocabulary exported as tokenizer.json and loaded back through
    // the Hugging Face path gives the same ids.
    let hf = Tokenizer::from_hf_json(&tok.to_hf_json().unwrap(), None, &[], false).unwrap();
    assert_eq!(hf.kind(), tok.kind());
    check_vectors_with(name, &hf);
}

fn check_vectors_with(name: &str, tok: &Tokenizer) {
    let dir = testdata().join("tokenizer");
    let inp = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.out"))).unwrap();
    // As llama.cpp's test-tokenizer-0: a separator ends each text, the last included.
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let expected: Vec<&str> = out.lines().collect();
    assert_eq!(
        texts.len(),
        expected.len(),
        "{name}: .inp and .out disagree on the number of cases"
    );
    let mut failures = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let want: Vec<u32> = want
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        let got = tok.encode(text, false, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        // Decoding the ids gives the text back (SentencePiece adds one leading space).
        let dec = tok.decode(&got);
        let dec = if tok.kind() == Kind::SentencePiece {
            dec.strip_prefix(' ').unwrap_or(&dec).to_owned()
        } else {
            dec
        };
        if dec != *text {
            failures.push(format!("decode({text:?}) = {dec:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        texts.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_spm_vectors() {
    check_vectors("llama-spm");
}

#[test]
fn llama_bpe_vectors() {
    check_vectors("llama-bpe");
}

#[test]
fn gpt2_vectors() {
    check_vectors("gpt-2");
}

#[test]
fn qwen2_vectors() {
    check_vectors("qwen2");
}

#[test]
fn control_tokens_are_parsed_only_when_asked() {
    let f = GgufFile::open(&testdata().join("tokenizer/ggml-vocab-qwen2.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let parsed = tok.encode("<|im_start|>user", false, true).unwrap();
    assert_eq!(parsed[0], im_start);
    let plain = tok.encode("<|im_start|>user", false, false).unwrap();
    assert!(!plain.contains(&im_start));
    assert!(tok.token_bytes(im_start).is_empty());
}

#[test]
fn streaming_detokenization_handles_byte_fallback_and_space_marker() {
    use crate::detok::Detokenizer;
    let f = GgufFile::open(&testdata().join("tokenizer/ggml-vocab-llama-spm.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    let text = "Hi 😀 日本 ñ\ttab";
    let ids = tok.encode(text, false, false).unwrap();
    // The emoji has no piece of its own: it arrives as four byte tokens.
    assert!(
        ids.iter()
            .filter(|&&i| tok.piece(i).starts_with("<0x"))
            .count()
            >= 4
    );
    let mut d = Detokenizer::new();
    let mut streamed = String::new();
    for &id in &ids {
        let piece = d.push(tok.token_bytes(id));
        assert!(
            !piece.contains('\u{FFFD}'),
            "a token boundary split a character"
        );
        streamed.push_str(&piece);
    }
    streamed.push_str(&d.flush());
    assert_eq!(streamed, format!(" {text}"));
}
