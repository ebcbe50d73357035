//! Drafters for speculative decoding (verified in the engine's step,
//! `core/speculate.rs`). [`NgramDrafter`] is prompt lookup: the tokens that
//! followed the latest earlier occurrence of the sequence's last n tokens
//! (the longest n that has one), as vLLM's `ngram` and llama.cpp's lookup
//! decoding draft. Answers that repeat spans of their input (RAG, code
//! edits, JSON, summaries) or of themselves get long accepted drafts.
//! A draft model (run by the step itself) must first pass
//! [`check_draft_model`].

use crate::{Error, Result};
use hasten_model::llama::Model;
use hasten_model::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::Arc;

/// Loads the draft model at `path` for `target` (`--draft-model`) and
/// checks that it can draft for it.
pub fn load_draft_model(path: &Path, target: &Model, tok: &Tokenizer) -> Result<Arc<Model>> {
    let lm = hasten_model::loader::load(path)?;
    check_draft_model(target, tok, &lm.model, &lm.tokenizer)?;
    Ok(Arc::new(lm.model))
}

/// Checks that `draft` (with its tokenizer) can draft for `target`: the
/// same vocabulary, token for token (a draft's token ids are verified as
/// the target's own), and the same end-of-sequence tokens.
pub fn check_draft_model(
    target: &Model,
    target_tok: &Tokenizer,
    draft: &Model,
    draft_tok: &Tokenizer,
) -> Result<()> {
    let bad = |m: String| Err(Error::Config(format!("the draft model cannot draft: {m}")));
    let (tv, dv) = (target.config.vocab_size, draft.config.vocab_size);
    if tv != dv || target_tok.vocab_size() != draft_tok.vocab_size() {
        return bad(format!(
            "its vocabulary has {dv} tokens, the model's {tv} (they must be the same)"
        ));
    }
    for id in 0..target_tok.vocab_size() as u32 {
        let (a, b) = (target_tok.piece(id), draft_tok.piece(id));
        if a != b || target_tok.is_eos(id) != draft_tok.is_eos(id) {
            return bad(format!(
                "token {id} is {b:?} in its vocabulary, {a:?} in the model's"
            ));
        }
    }
    Ok(())
}

/// Prompt-lookup drafting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramDrafter {
    /// Longest suffix looked up.
    pub max_ngram: usize,
    /// Shortest suffix worth a draft.
    pub min_ngram: usize,
}

impl Default for NgramDrafter {
    /// Suffixes of 4 down to 2 tokens (a single repeated token is too
    /// common to predict what follows it).
    fn default() -> Self {
        NgramDrafter {
            max_ngram: 4,
            min_ngram: 2,
        }
    }
}

impl NgramDrafter {
    /// Up to `k` tokens that followed the latest earlier occurrence of the
    /// longest suffix of `tokens` (from `max_ngram` down to `min_ngram`
    /// tokens) that occurs before; empty when none does.
    pub fn draft(&self, tokens: &[u32], k: usize) -> Vec<u32> {
        let len = tokens.len();
        if k == 0 {
            return Vec::new();
        }
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if n >= len {
                continue;
            }
            let suffix = &tokens[len - n..];
            // The latest start j < len - n whose n tokens equal the suffix.
            let found = (0..len - n).rev().find(|&j| &tokens[j..j + n] == suffix);
            if let Some(j) = found {
                let from = j + n;
                return tokens[from..(from + k).min(len)].to_vec();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_latest_longest_match() {
        let d = NgramDrafter::default();
        // ... 5 6 7 | 8 9 ... 5 6 7 -> 8 9 10
        let t = [1, 5, 6, 7, 8, 9, 10, 2, 3, 5, 6, 7];
        assert_eq!(d.draft(&t, 3), [8, 9, 10]);
        // The latest occurrence wins.
        let t = [5, 6, 1, 2, 5, 6, 3, 4, 5, 6];
        assert_eq!(d.draft(&t, 2), [3, 4]);
        // A longer match beats a later, shorter one.
        let t = [7, 5, 6, 11, 5, 6, 12, 9, 7, 5, 6];
        assert_eq!(d.draft(&t, 1), [11]);
        // Drafts stop at the end of what is known.
        let t = [1, 2, 3, 1, 2];
        assert_eq!(d.draft(&t, 5), [3, 1, 2]);
    }

    #[test]
    fn no_match_no_draft() {
        let d = NgramDrafter::default();
        assert!(d.draft(&[1, 2, 3, 4, 5], 4).is_empty());
        assert!(d.draft(&[], 4).is_empty());
        assert!(
            d.draft(&[1, 1], 4).is_empty(),
            "a one-token suffix is below min_ngram"
        );
        assert!(d.draft(&[1, 2, 1, 2], 0).is_empty());
        // A periodic text drafts its period.
        let periodic: Vec<u32> = (0..40).map(|i| i % 7).collect();
        assert_eq!(d.draft(&periodic, 7), [5, 6, 0, 1, 2, 3, 4]);
    }
}
