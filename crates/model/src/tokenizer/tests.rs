//! The tokenizer reproduces llama.cpp's test vectors exactly.

use super::*;
use crate::gguf::GgufFile;
use std::path::PathBuf;

pub(crate) fn testdata() -> PathBuf {
    crate::testing::testdata_dir()
}

fn check_vectors(name: &str) {
    let path = testdata()
        .join("tokenizer")
        .join(format!("ggml-vocab-{name}.gguf"));
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e} (set HASTEN_TESTDATA)"));
    let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    check_vectors_with(name, &tok, tok.add_space_prefix);
    // The same vocabulary exported as tokenizer.json and loaded back through
    // the Hugging Face path gives the same ids (its normalizer adds the
    // space prefix the GGUF flag asked for).
    let hf = Tokenizer::from_hf_json(&tok.to_hf_json().unwrap(), None, &[], false).unwrap();
    assert_eq!(hf.kind(), tok.kind());
    check_vectors_with(name, &hf, tok.add_space_prefix);
}

fn check_vectors_with(name: &str, tok: &Tokenizer, space_prefix: bool) {
    if let Err(e) = vectors_match(&testdata().join("tokenizer"), name, tok, space_prefix) {
        panic!("{e}");
    }
}

/// llama.cpp's vectors for vocabulary `name` in `dir`, through `tok`.
fn vectors_match(
    dir: &std::path::Path,
    name: &str,
    tok: &Tokenizer,
    space_prefix: bool,
) -> std::result::Result<usize, String> {
    let inp = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.out"))).unwrap();
    // As llama.cpp's test-tokenizer-0: a separator ends each text, the last included.
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let expected: Vec<&str> = out.lines().collect();
    if texts.len() != expected.len() {
        return Err(format!(
            "{name}: .inp and .out disagree on the number of cases"
        ));
    }
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
        // Decoding the ids gives the text back (SentencePiece adds one
        // leading space, unless the vocabulary says not to, as Gemma's).
        let dec = tok.decode(&got);
        let dec = if tok.kind() == Kind::SentencePiece && space_prefix {
            dec.strip_prefix(' ').unwrap_or(&dec).to_owned()
        } else {
            dec
        };
        if dec != *text {
            failures.push(format!("decode({text:?}) = {dec:?}"));
        }
    }
    if failures.is_empty() {
        Ok(texts.len())
    } else {
        Err(format!(
            "{name}: {} of {} cases differ:\n{}",
            failures.len(),
            texts.len(),
            failures.join("\n")
        ))
    }
}

/// Tokenizer kinds of llama.cpp's test vocabularies hasten does not
/// implement (BERT WordPiece, Gemma 4's): they must be refused
/// with an error naming the kind, not mis-tokenized.
const UNSUPPORTED_VOCABS: [&str; 2] = ["bert-bge", "gemma-4"];

/// Every `ggml-vocab-*.gguf` of llama.cpp's `models/` (`HASTEN_VOCABS`,
/// filled by `scripts/fetch-testdata.sh --vocabs DIR`; CI sets it).
#[test]
fn every_llama_cpp_vocabulary_file_reproduces_its_vectors() {
    let Some(dir) = std::env::var_os("HASTEN_VOCABS").map(PathBuf::from) else {
        eprintln!("HASTEN_VOCABS is not set: run scripts/fetch-testdata.sh --vocabs DIR and set it to DIR (CI does)");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("HASTEN_VOCABS={}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| {
            Some(
                f.strip_prefix("ggml-vocab-")?
                    .strip_suffix(".gguf.inp")?
                    .to_owned(),
            )
        })
        .collect();
    names.sort();
    // (aquila, baichuan, gpt-neox and nomic-bert-moe ship no vectors.)
    assert!(names.len() >= 14, "only {names:?} in {}", dir.display());
    // Gemma 3's, converted from its tokenizer.json by fetch-testdata.sh.
    assert!(names.iter().any(|n| n == "gemma-3"), "{names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let f = GgufFile::open(&dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&f.header, &f.name);
        match (tok, UNSUPPORTED_VOCABS.contains(&name.as_str())) {
            (Ok(t), false) => {
                match vectors_match(&dir, name, &t, t.add_space_prefix) {
                    Ok(n) => eprintln!("{name}: {n} cases"),
                    Err(e) => failures.push(e),
                }
                // llama.cpp's Phi-3 special tokens swallow the whitespace
                // after them (`llama-tokenize -m ggml-vocab-phi-3.gguf`).
                if name == "gemma-3" {
                    failures.extend(gemma3_special_tokens(&t));
                }
                if name == "phi-3" {
                    let got = t
                        .encode("<|user|>\nHi there<|end|>\n<|assistant|>\n", true, true)
                        .unwrap();
                    if got != [1, 32010, 6324, 727, 32007, 32001] {
                        failures.push(format!("phi-3 chat prompt: {got:?}"));
                    }
                }
            }
            (Err(e), true) => assert!(e.to_string().contains("not supported"), "{name}: {e}"),
            (Ok(_), true) => failures.push(format!("{name}: expected to be refused")),
            (Err(e), false) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Gemma 3's chat and control tokens with special parsing on, against
/// Hugging Face `tokenizers` (tools/goldens/gemma_vocab.py).
fn gemma3_special_tokens(t: &Tokenizer) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Case {
        text: String,
        ids: Vec<u32>,
    }
    let cases: Vec<Case> = serde_json::from_str(include_str!(
        "../../tests/golden/gemma3_special_tokens.json"
    ))
    .unwrap();
    assert!(t.add_bos && !t.add_space_prefix);
    cases
        .iter()
        .filter_map(|c| {
            let got = t.encode(&c.text, false, true).unwrap();
            (got != c.ids).then(|| format!("gemma-3 {:?}: want {:?} got {got:?}", c.text, c.ids))
        })
        .collect()
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

/// A vocabulary whose model name says Phi-3 gets llama.cpp's RSTRIP on its
/// special tokens (whitespace after them dropped); others keep it.
#[test]
fn phi3_special_tokens_swallow_following_whitespace() {
    use crate::gguf::{GgufWriter, Value};
    let f = GgufFile::open(&testdata().join("tokenizer/ggml-vocab-llama-spm.gguf")).unwrap();
    let with_name = |name: &str| {
        let mut w = GgufWriter::new();
        w.kv("general.name", Value::String(name.into()));
        for (k, v) in &f.header.metadata {
            if k.starts_with("tokenizer.") {
                w.kv(k, v.clone());
            }
        }
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();
        let g = GgufFile::from_bytes("v.gguf", bytes).unwrap();
        Tokenizer::from_gguf(&g.header, &g.name).unwrap()
    };
    let (phi, plain) = (with_name("Phi-3 mini"), with_name("TinyLlama"));
    let text = "Hi</s>\n  there";
    let a = phi.encode(text, false, true).unwrap();
    let b = plain.encode(text, false, true).unwrap();
    assert_eq!(a, phi.encode("Hi</s>there", false, true).unwrap());
    assert_ne!(a, b, "whitespace kept without the Phi-3 name");
    // <s> keeps what follows, as in llama.cpp.
    assert_eq!(
        phi.encode("<s> x", false, true).unwrap(),
        plain.encode("<s> x", false, true).unwrap()
    );
}
