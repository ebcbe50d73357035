//! Sampling and emitting one token of a sequence (a child of `core.rs`):
//! the grammar mask, the sampler, stop tokens and strings, logprobs, the
//! TTFT/ITL metrics and the token event, for plain decoding and for each
//! verified position of a speculative pass alike.

use super::Seq;
use crate::metrics::Metrics;
use crate::request::{Event, FinishReason, TokenEvent, TokenLogprobs};
use hasten_model::tokenizer::Tokenizer;
use std::time::Instant;

/// Samples the next token of `s` and sends it; returns why the sequence
/// ends, if it does.
pub(super) fn emit_token(
    s: &mut Seq,
    logits: &mut [f32],
    tok: &Tokenizer,
    now: Instant,
    m: &mut Metrics,
) -> Option<FinishReason> {
    let spec = s.req.spec();
    // From the model's distribution, before bias and penalties change `logits`.
    let dist = spec
        .logprobs
        .map(|n| (log_softmax_top(logits, n), logits.to_vec()));
    // The grammar's mask, before sampling; a grammar that fails ends the
    // output where it stands (a finished grammar allows only EOS).
    let mask = match (s.mask.take(), s.constraint.as_mut()) {
        (Some(m), _) => Some(m),
        (None, Some(c)) => Some(c.next_mask()),
        (None, None) => None,
    };
    match mask {
        Some(Ok(m)) => m.apply(logits),
        Some(Err(_)) => return Some(FinishReason::Stop),
        None => {}
    }
    let t = s.sampler.sample(logits, &s.tokens);
    let grammar_done = match s.constraint.as_mut() {
        Some(c) => c.consume(t).is_err() || c.is_stopped(),
        None => false,
    };
    match s.last_token {
        None => {
            s.first_token = Some(now);
            m.ttft
                .observe_duration(now.saturating_duration_since(s.received));
        }
        Some(prev) => m.itl.observe_duration(now.saturating_duration_since(prev)),
    }
    s.last_token = Some(now);
    s.tokens.push(t);
    if (!spec.ignore_eos && tok.is_eos(t)) || spec.stop_tokens.contains(&t) {
        return Some(FinishReason::Stop);
    }
    s.generated += 1;
    m.generated_tokens += 1;
    let bytes = tok.token_bytes(t);
    let piece;
    let bytes = if bytes.is_empty() && spec.special_text {
        piece = tok.piece(t);
        piece.as_bytes()
    } else {
        bytes
    };
    let shown = s.stops.push(&s.detok.push(bytes));
    s.stop_string = shown.stop.clone();
    let logprobs = dist.map(|((lse, top), raw)| TokenLogprobs {
        logprob: raw[t as usize] - lse,
        top,
    });
    let ev = Event::Token(TokenEvent {
        id: t,
        text: shown.text,
        index: s.generated - 1,
        at: now,
        logprobs,
    });
    if spec.deliver_at_end {
        s.held.push(ev);
    } else {
        let _ = s.tx.send(ev);
    }
    if shown.stopped || grammar_done {
        Some(FinishReason::Stop)
    } else if s.generated >= spec.max_tokens {
        Some(FinishReason::Length)
    } else {
        None
    }
}

/// The text still held by the detokenizer and the stop matcher.
pub(super) fn held_text(s: &mut Seq) -> String {
    let rest = s.detok.flush();
    let tail = s.stops.push(&rest);
    let mut text = tail.text;
    if tail.stopped {
        s.stop_string = tail.stop;
    } else {
        text.push_str(&s.stops.finish());
    }
    text
}

/// The log-sum-exp of the raw logits and the `n` best (token, logprob).
fn log_softmax_top(logits: &[f32], n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = n.max(1).min(idx.len());
    let order = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    idx.select_nth_unstable_by(k - 1, order);
    idx.truncate(k);
    idx.sort_by(order);
    let mut top: Vec<(u32, f32)> = idx.iter().map(|&i| (i, logits[i as usize] - lse)).collect();
    top.truncate(n);
    (lse, top)
}
