//! Constrained decoding: a request's grammar (a JSON Schema, a regular
//! expression or a Lark grammar) compiled by `llguidance` against the
//! model's vocabulary, and the per-sequence matcher that masks the logits
//! before each sample and follows the sampled tokens.
//!
//! The vocabulary is handed to `llguidance` as a token trie built once per
//! engine from [`Tokenizer::token_bytes`]: control tokens (no bytes) are
//! entered under `toktrie`'s special-token marker, so no grammar over text
//! can produce them, and the end-of-sequence token is the one a finished
//! grammar allows.

use crate::{Error, Result};
use hasten_model::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;

/// What a request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// A JSON Schema (`response_format` `json_schema`; `json_object` is
    /// `{"type": "object"}`).
    JsonSchema(serde_json::Value),
    /// A regular expression over the whole output.
    Regex(String),
    /// A Lark grammar (`llguidance`'s dialect).
    Lark(String),
}

impl Grammar {
    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(bounded_whitespace(s)),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        }
    }
}

/// The schema with whitespace between JSON tokens bounded as llama.cpp's
/// JSON grammars bound it (one space, or a newline and at most 20 spaces
/// or tabs), unless the schema sets `x-guidance` itself: unbounded
/// whitespace lets a small model pad its answer with newlines until
/// `max_tokens`.
pub fn bounded_whitespace(schema: &serde_json::Value) -> serde_json::Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance").or_insert_with(
            || serde_json::json!({"whitespace_pattern": r"[\x20]|[\x0A][\x20\x09]{0,20}"}),
        );
    }
    s
}

/// The model's vocabulary as `llguidance` sees it.
struct Vocab {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Text the grammar fixes in advance (forced prefixes): plain text,
        // no special-token parsing, no BOS.
        self.tok
            .encode_continuation(&String::from_utf8_lossy(s))
            .unwrap_or_default()
    }
}

/// Compiles grammars against one model's vocabulary (built once per engine).
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// The factory for `tok`'s vocabulary, padded to the model's
    /// `vocab_size` (rows of the output matrix past the tokenizer's
    /// vocabulary are never allowed).
    pub fn new(tok: Arc<Tokenizer>, vocab_size: usize) -> Result<Self> {
        let n = vocab_size.max(tok.vocab_size());
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let bytes = tok.token_bytes(id);
            words.push(if bytes.is_empty() {
                // A control token (or padding): reachable only as a special token.
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(format!("<[{id}]>").as_bytes());
                w
            } else {
                bytes.to_vec()
            });
        }
        let eos = (0..n as u32).find(|&t| tok.is_eos(t)).unwrap_or(0);
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Vocab { trie, tok });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::Config(format!("grammar support: {e}")))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// A fresh matcher for `g`, or why the grammar cannot be enforced
    /// (an unsupported schema feature, a malformed regex or grammar).
    pub fn compile(&self, g: &Grammar) -> Result<Constraint> {
        let parser = self
            .factory
            .create_parser(g.top_level())
            .map_err(|e| Error::Grammar(e.to_string()))?;
        let m = Matcher::new(Ok(parser));
        match m.get_error() {
            Some(e) => Err(Error::Grammar(e)),
            None => Ok(Constraint { m }),
        }
    }
}

/// One sequence's position in its grammar.
#[derive(Clone)]
pub struct Constraint {
    m: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Constraint")
    }
}

impl Constraint {
    /// Sets every logit the grammar does not allow next to minus infinity;
    /// an error if the grammar has failed.
    pub fn mask(&mut self, logits: &mut [f32]) -> std::result::Result<(), String> {
        let allowed = self.m.compute_mask_or_eos().map_err(|e| e.to_string())?;
        for (t, l) in logits.iter_mut().enumerate() {
            if !allowed.is_allowed(t as TokenId) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Follows the sampled token.
    pub fn consume(&mut self, t: u32) -> std::result::Result<(), String> {
        self.m.consume_token(t).map_err(|e| e.to_string())
    }

    /// The grammar is complete and allows nothing more.
    pub fn is_stopped(&self) -> bool {
        self.m.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The allowed next tokens, as text, of a fresh matcher for `g`.
    fn first_tokens(g: Grammar) -> Vec<String> {
        let vocab =
            hasten_model::testing::testdata_dir().join("tokenizer/ggml-vocab-llama-spm.gguf");
        let f = hasten_model::gguf::GgufFile::open(&vocab).unwrap();
        let tok = Arc::new(Tokenizer::from_gguf(&f.header, &f.name).unwrap());
        let mut c = Grammars::new(tok.clone(), 32000)
            .unwrap()
            .compile(&g)
            .unwrap();
        let mut logits = vec![0f32; 32000];
        c.mask(&mut logits).unwrap();
        (0..32000u32)
            .filter(|&i| logits[i as usize] == 0.0)
            .map(|i| String::from_utf8_lossy(tok.token_bytes(i)).into_owned())
            .collect()
    }

    /// Masks follow the token bytes, SentencePiece's leading spaces
    /// included: a digit class allows the ten bare digits (as pieces and
    /// as byte tokens), never a spaced one; JSON opens with a brace.
    #[test]
    fn masks_allow_exactly_the_tokens_whose_bytes_fit() {
        let digits = first_tokens(Grammar::Regex("[0-9]{3}".into()));
        assert_eq!(digits.len(), 20, "{digits:?}");
        assert!(digits
            .iter()
            .all(|t| t.len() == 1 && t.as_bytes()[0].is_ascii_digit()));
        let json = first_tokens(Grammar::JsonSchema(serde_json::json!({"type": "object"})));
        assert!(
            !json.is_empty() && json.iter().all(|t| t.starts_with('{')),
            "{json:?}"
        );
    }
}
