//! Text to prompt tokens, decided once for every caller (`hasten run`, the
//! server's chat and completions routes): the chat template (the model's or
//! the fallback), how the conversation ends, and whether a BOS token is
//! added after the template rendered one.

use crate::chat::{ChatTemplate, Message, TemplateVars, FALLBACK_TEMPLATE};
use crate::tokenizer::Tokenizer;
use crate::Result;

/// How a chat prompt ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A new assistant turn begins (`add_generation_prompt`).
    Generate,
    /// The final (assistant) message is continued, as llama-server does for
    /// a final assistant message and vLLM's `continue_final_message`.
    Continue,
    /// Neither (`add_generation_prompt: false`).
    Nothing,
}

/// The model's chat template, or the plain `role: content` fallback for
/// models that ship none (the template's BOS/EOS texts are then empty).
pub fn template_or_fallback(template: Option<ChatTemplate>) -> Result<ChatTemplate> {
    match template {
        Some(t) => Ok(t),
        None => ChatTemplate::new(FALLBACK_TEMPLATE, "", ""),
    }
}

/// Renders `msgs` with `template` (and the extra template variables
/// `vars`, a request's `chat_template_kwargs`) and tokenizes the text
/// (control-token text becomes its tokens). BOS is added when the
/// tokenizer asks for it, unless the rendered text already starts with the
/// template's BOS text. A template that cannot render these messages is
/// [`Error::Template`].
pub fn chat_tokens(
    template: &ChatTemplate,
    tok: &Tokenizer,
    msgs: &[Message],
    how: Ending,
    vars: &TemplateVars,
) -> Result<Vec<u32>> {
    let text = chat_text(template, msgs, how, vars)?;
    rendered_tokens(template, tok, &text)
}

/// The rendered text of a chat prompt (what [`chat_tokens`] tokenizes).
pub fn chat_text(
    template: &ChatTemplate,
    msgs: &[Message],
    how: Ending,
    vars: &TemplateVars,
) -> Result<String> {
    match how {
        Ending::Continue => template.render_continuing_with(msgs, vars),
        Ending::Generate => template.render_with(msgs, true, vars),
        Ending::Nothing => template.render_with(msgs, false, vars),
    }
}

/// The tokens of a text [`chat_text`] rendered.
pub fn rendered_tokens(template: &ChatTemplate, tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let has_bos = !template.bos_token.is_empty() && text.starts_with(&template.bos_token);
    tok.encode(text, tok.add_bos && !has_bos, true)
}

/// A raw text prompt (no template): BOS when the tokenizer asks for it,
/// control-token text kept as text.
pub fn text_tokens(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    tok.encode(text, tok.add_bos, false)
}

/// `n` token ids drawn from a seeded xorshift generator over `vocab`,
/// skipping the first 3 ids (special tokens in most vocabularies): the
/// prompts of llama-bench-style prefill tests (`hasten run
/// --random-prompt`, `scripts/lib/ttft_probe.py` computes the same ids).
pub fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (3 + x % (vocab.max(4) as u64 - 3)) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_are_seeded_and_in_range() {
        let a = random_tokens(1000, 50, 7);
        assert_eq!(a, random_tokens(1000, 50, 7));
        assert_ne!(a, random_tokens(1000, 50, 8));
        assert!(a.iter().all(|&t| (3..50).contains(&t)));
        // Pinned: scripts/lib/ttft_probe.py must produce the same ids.
        assert_eq!(random_tokens(4, 32000, 1), [6520, 11557, 21594, 30501]);
    }
}
