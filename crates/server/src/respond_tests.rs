//! The SSE state machine without HTTP: event order, roles, usage only when
//! asked and only last, `[DONE]` exactly once, held-back text released.

use super::*;
use hasten_engine::{FinishReason, TokenLogprobs};
use std::time::{Duration, Instant};

fn head() -> Header {
    Header {
        id: "x".into(),
        created: 1,
        model: "m".into(),
    }
}

fn text() -> TokenText {
    Arc::new(|id| format!("<{id}>"))
}

fn tok(id: u32, text: &str, index: usize) -> Event {
    Event::Token(TokenEvent {
        id,
        text: text.into(),
        index,
        at: Instant::now(),
        logprobs: Some(TokenLogprobs {
            logprob: -0.5,
            top: vec![(id, -0.5), (9, -1.5)],
        }),
    })
}

fn fin(text: &str, out: usize, reason: FinishReason) -> Event {
    Event::Finished(Finish {
        reason,
        text: text.into(),
        prompt_tokens: 5,
        cached_prompt_tokens: 2,
        output_tokens: out,
        drafted_tokens: 0,
        accepted_tokens: 0,
        stop: None,
        timing: hasten_engine::Timing {
            received: Instant::now(),
            queue: Duration::from_millis(1),
            prefill: Duration::from_millis(2),
            decode: Duration::from_millis(3),
            preemptions: 0,
        },
    })
}

fn data(frames: &[Frame]) -> Vec<serde_json::Value> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Data(d) if d != "[DONE]" => Some(serde_json::from_str(d).unwrap()),
            _ => None,
        })
        .collect()
}

#[test]
fn chat_stream_with_usage_and_two_choices() {
    let mut e = StreamEncoder::new(Kind::Chat, head(), 2, 2, true, LogprobStyle::None, text());
    let mut frames = e.start();
    frames.extend(e.event(0, Event::Prefill { done: 4, total: 5 }));
    frames.extend(e.event(0, tok(1, "Hel", 0)));
    frames.extend(e.event(1, tok(2, "", 0)));
    frames.extend(e.event(1, fin("held", 1, FinishReason::Stop)));
    assert!(!e.is_done());
    frames.extend(e.event(0, tok(3, "lo", 1)));
    frames.extend(e.event(0, fin("", 2, FinishReason::Length)));
    assert!(e.is_done());
    // Nothing after the end.
    assert!(e.event(0, tok(4, "x", 2)).is_empty());

    assert_eq!(
        frames
            .iter()
            .filter(|f| **f == Frame::Data("[DONE]".into()))
            .count(),
        1
    );
    assert_eq!(frames.last(), Some(&Frame::Data("[DONE]".into())));
    assert_eq!(frames[2], Frame::Comment("prefill done=4 total=5".into()));
    let d = data(&frames);
    // Role-only openers for both choices.
    for (i, v) in d[..2].iter().enumerate() {
        assert_eq!(v["choices"][0]["index"], i);
        assert_eq!(v["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(v["choices"][0]["delta"]["content"], "");
    }
    let content = |i: usize| -> String {
        d.iter()
            .filter(|v| {
                v["choices"].as_array().is_some_and(|c| !c.is_empty())
                    && v["choices"][0]["index"] == i
            })
            .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
            .collect()
    };
    assert_eq!(content(0), "Hello");
    assert_eq!(content(1), "held");
    // The empty-text token of choice 1 sent nothing.
    let finals: Vec<_> = d
        .iter()
        .filter(|v| !v["choices"][0]["finish_reason"].is_null() && v["choices"][0].is_object())
        .collect();
    assert_eq!(finals.len(), 2);
    assert_eq!(finals[0]["choices"][0]["finish_reason"], "stop");
    assert_eq!(finals[1]["choices"][0]["finish_reason"], "length");
    assert_eq!(finals[1]["timing"]["prefill_ms"], 2.0);
    // Usage only on the last data chunk, with no choices; the shared prompt counts once.
    let usage: Vec<_> = d.iter().filter(|v| v.get("usage").is_some()).collect();
    assert_eq!(usage.len(), 1);
    let u = &d.last().unwrap()["usage"];
    assert_eq!(d.last().unwrap()["choices"].as_array().unwrap().len(), 0);
    assert_eq!(
        (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
        (Some(5), Some(3))
    );
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 2);
}

#[test]
fn no_usage_chunk_unless_asked() {
    let mut e = StreamEncoder::new(
        Kind::Completion,
        head(),
        1,
        1,
        false,
        LogprobStyle::None,
        text(),
    );
    let mut frames = e.start();
    assert!(frames.is_empty(), "completions have no role chunk");
    frames.extend(e.event(0, tok(1, "a", 0)));
    frames.extend(e.event(0, fin("", 1, FinishReason::Stop)));
    let d = data(&frames);
    assert!(d.iter().all(|v| v.get("usage").is_none()));
    assert!(d.iter().all(|v| v["object"] == "text_completion"));
    assert_eq!(d[0]["choices"][0]["text"], "a");
}

#[test]
fn logprobs_in_both_styles() {
    let mut e = StreamEncoder::new(
        Kind::Chat,
        head(),
        1,
        1,
        false,
        LogprobStyle::Chat(2),
        text(),
    );
    let f = e.event(0, tok(7, "", 0));
    let v = &data(&f)[0];
    // A token with no visible text still reports its logprob.
    assert_eq!(v["choices"][0]["logprobs"]["content"][0]["token"], "<7>");
    assert_eq!(
        v["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"],
        "<9>"
    );

    let mut c = vec![Collected::default()];
    for ev in [
        tok(1, "ab", 0),
        tok(2, "c", 1),
        fin("", 2, FinishReason::Length),
    ] {
        c[0].push(ev);
    }
    let r = completion_response(head(), &c, 1, LogprobStyle::Legacy(2), &text());
    let lp = r.choices[0].logprobs.as_ref().unwrap();
    assert_eq!(lp.tokens, vec!["<1>", "<2>"]);
    assert_eq!(lp.text_offset, vec![0, 2]);
    assert_eq!(r.choices[0].text, "abc");
    assert_eq!(r.usage.unwrap().completion_tokens, 2);
}

#[test]
fn a_failure_ends_the_stream_with_an_error_event() {
    let mut e = StreamEncoder::new(Kind::Chat, head(), 1, 1, true, LogprobStyle::None, text());
    e.start();
    let f = e.event(0, Event::Failed("boom at /secret".into()));
    let d = data(&f);
    assert_eq!(d[0]["error"]["type"], "server_error");
    assert!(!d[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("secret"));
    assert_eq!(f.last(), Some(&Frame::Data("[DONE]".into())));
}

#[test]
fn server_timing_header_format() {
    let t = Timing {
        queue_ms: 1.0,
        prefill_ms: 2.5,
        decode_ms: 3.25,
        prompt_tokens: 7,
        cached_prompt_tokens: 4,
        ..Timing::default()
    };
    assert_eq!(
        server_timing(&t),
        "queue;dur=1.000, prefill;dur=2.500, decode;dur=3.250, prompt_tokens;desc=\"7\", cached_prompt_tokens;desc=\"4\""
    );
}

#[test]
fn continuous_usage_counts_the_tokens_each_chunk_carries() {
    let mut e = StreamEncoder::new(
        Kind::Completion,
        head(),
        1,
        1,
        true,
        LogprobStyle::None,
        text(),
    )
    .with_continuous_usage(vec![5]);
    let mut frames = e.start();
    frames.extend(e.event(0, tok(1, "a", 0)));
    // A token whose text is held back (half a character) shows up in the
    // next chunk's count.
    frames.extend(e.event(0, tok(2, "", 1)));
    frames.extend(e.event(0, tok(3, "bc", 2)));
    frames.extend(e.event(0, fin("", 3, FinishReason::Length)));
    let d = data(&frames);
    let counts: Vec<u64> = d
        .iter()
        .map(|v| v["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 3, 3, 3], "{d:?}");
    assert!(d.iter().all(|v| v["usage"]["prompt_tokens"] == 5));
}
