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
        self.top_level_with(true)
    }

    /// `bounded`: JSON whitespace as [`bounded_whitespace`] has it, else
    /// any (checking another server's pretty-printed JSON).
    fn top_level_with(&self, bounded: bool) -> TopLevelGrammar {
        match self {
            Grammar::JsonSchema(s) if !bounded => TopLevelGrammar::from_json_schema(s.clone()),
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

/// Single bytes as a vocabulary (ids 0..=255, end of text 256), for
/// checking a finished text without a model.
struct ByteVocab {
    trie: TokTrie,
}

impl TokenizerEnv for ByteVocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        s.iter().map(|&b| b as TokenId).collect()
    }
}

/// Whether `text` matches `g` as a whole (checked byte by byte with the
/// same compiler the engine masks with): how a client checks a structured
/// answer from any server. The error says where the text stops matching.
pub fn check_text(g: &Grammar, text: &str) -> Result<()> {
    static FACTORY: std::sync::OnceLock<std::result::Result<ParserFactory, String>> =
        std::sync::OnceLock::new();
    let factory = FACTORY
        .get_or_init(|| {
            let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            words.push(vec![TokTrie::SPECIAL_TOKEN_MARKER, b'<', b'e', b'>']);
            let info = TokRxInfo::new(257, 256);
            let env: TokEnv = Arc::new(ByteVocab {
                trie: TokTrie::from(&info, &words),
            });
            let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
            f.quiet();
            Ok(f)
        })
        .as_ref()
        .map_err(|e| Error::Config(format!("grammar support: {e}")))?;
    let parser = factory
        .create_parser(g.top_level_with(false))
        .map_err(|e| Error::Grammar(e.to_string()))?;
    let mut m = Matcher::new(Ok(parser));
    if let Some(e) = m.get_error() {
        return Err(Error::Grammar(e));
    }
    let bytes: Vec<TokenId> = text.bytes().map(TokenId::from).collect();
    let ok = m
        .validate_tokens(&bytes)
        .map_err(|e| Error::Grammar(e.to_string()))?;
    if ok < bytes.len() {
        return Err(Error::Grammar(format!(
            "the text stops matching at byte {ok}: {:?}",
            text.get(ok.saturating_sub(20)..ok.min(text.len()) + 1)
                .unwrap_or("")
        )));
    }
    m.consume_tokens(&bytes)
        .map_err(|e| Error::Grammar(e.to_string()))?;
    match m.is_accepting() {
        Ok(true) => Ok(()),
        _ => Err(Error::Grammar(
            "the text ends before the grammar does".into(),
        )),
    }
}

/// The tokens a grammar allows at one position.
pub struct Mask(llguidance::toktrie::SimpleVob);

impl Mask {
    /// Sets every logit the mask does not allow to minus infinity.
    pub fn apply(&self, logits: &mut [f32]) {
        // Word by word: whole words of allowed tokens are skipped.
        self.0.iter_unset_entries(|t| {
            if let Some(l) = logits.get_mut(t) {
                *l = f32::NEG_INFINITY;
            }
        });
        // Rows past the mask (padding of the output matrix) are never allowed.
        for l in logits.iter_mut().skip(self.0.len()) {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// Grammars of one step, each with the sequence it belongs to.
pub type StepGrammars = Vec<(usize, Constraint)>;
/// The same, with each grammar's next mask.
pub type StepMasks = Vec<(usize, Constraint, std::result::Result<Mask, String>)>;

/// A thread that computes grammar masks while the engine thread runs the
/// forward pass: [`MaskWorker::start`] hands it a step's grammars,
/// [`MaskWorker::finish`] takes them back with their masks. Used only when
/// a core is free for it (a thread competing with the kernel workers for
/// their cores would slow the pass more than the mask costs).
pub struct MaskWorker {
    jobs: std::sync::mpsc::Sender<StepGrammars>,
    done: std::sync::mpsc::Receiver<StepMasks>,
}

impl MaskWorker {
    pub fn spawn() -> std::io::Result<Self> {
        let (jobs, rx) = std::sync::mpsc::channel::<StepGrammars>();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("hasten-masks".into())
            .spawn(move || {
                for step in rx {
                    let out: StepMasks = step
                        .into_iter()
                        .map(|(i, mut g)| {
                            let m = g.next_mask();
                            (i, g, m)
                        })
                        .collect();
                    if tx.send(out).is_err() {
                        break;
                    }
                }
            })?;
        Ok(MaskWorker { jobs, done })
    }

    /// Starts on a step's grammars; `Err` gives them back (worker gone).
    pub fn start(&self, g: StepGrammars) -> std::result::Result<(), StepGrammars> {
        self.jobs.send(g).map_err(|e| e.0)
    }

    /// The grammars of the step started last, with their masks.
    pub fn finish(&self) -> Option<StepMasks> {
        self.done.recv().ok()
    }
}

/// Computes a step's masks now, split over the kernel worker pool
/// (`threads` of it), before the forward pass uses it.
pub fn masks_now(g: StepGrammars, threads: hasten_kernels::threads::Threads) -> StepMasks {
    type Slot = (usize, Constraint, Option<std::result::Result<Mask, String>>);
    let mut slots: Vec<Slot> = g.into_iter().map(|(i, c)| (i, c, None)).collect();
    hasten_kernels::threads::par_chunks(&mut slots, 1, threads, |_, piece| {
        for s in piece {
            s.2 = Some(s.1.next_mask());
        }
    });
    slots
        .into_iter()
        .map(|(i, c, m)| (i, c, m.unwrap_or_else(|| Err("no mask computed".into()))))
        .collect()
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
        let m = self.next_mask()?;
        m.apply(logits);
        Ok(())
    }

    /// The tokens the grammar allows next (computed apart from applying
    /// it, so that the engine can compute it beside the forward pass).
    pub fn next_mask(&mut self) -> std::result::Result<Mask, String> {
        self.m
            .compute_mask_or_eos()
            .map(Mask)
            .map_err(|e| e.to_string())
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

    #[test]
    fn finished_texts_are_checked_byte_by_byte() {
        let g = Grammar::JsonSchema(serde_json::json!({"type": "object",
            "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"]}));
        check_text(&g, r#"{"n": 7}"#).unwrap();
        check_text(&g, "{\n                                    \"n\":7\n}").unwrap();
        let e = check_text(&g, r#"{"n": 17}"#).unwrap_err().to_string();
        assert!(e.contains("stops matching"), "{e}");
        assert!(check_text(&g, r#"{"n": 7"#).is_err());
        assert!(check_text(&Grammar::Regex("[a-c]+".into()), "abcab").is_ok());
        assert!(check_text(&Grammar::Regex("[a-c]+".into()), "abd").is_err());
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
