//! Drafters for speculative decoding (issue 24; verification in the step is
//! not built yet). [`NgramDrafter`] is prompt lookup: the tokens that
//! followed the latest earlier occurrence of the sequence's last n tokens
//! (the longest n that has one), as vLLM's `ngram` and llama.cpp's lookup
//! decoding draft. Answers that repeat spans of their input (RAG, code
//! edits, JSON, summaries) or of themselves get long accepted drafts.

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
