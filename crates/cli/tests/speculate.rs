//! Speculative decoding through the `hasten` binary: `--draft-model` with
//! `hasten run` and `hasten serve` gives the same text as no speculation,
//! reports its drafts (stderr, each answer's `timing`, `/metrics`), and
//! contradictory flags or a draft with another vocabulary are clear errors.

mod common;

use common::{hasten, synth_tiny as synth, testdata, Serve};
use serde_json::{json, Value};

fn run(model: &str, extra: &[&str]) -> (String, String) {
    let mut a = vec![
        "run",
        "--model",
        model,
        "-p",
        "Once upon a time",
        "-n",
        "40",
        "--temperature",
        "0",
        "--ignore-eos",
        "-t",
        "1",
    ];
    a.extend(extra);
    let o = hasten(&a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

#[test]
fn a_draft_model_drafts_in_run_and_serve_and_changes_no_text() {
    let dir = tempfile::tempdir().unwrap();
    // A planted loop: its own copy drafts it perfectly.
    let model = synth(&dir, "loop.gguf", &["--pattern", "8"]);
    let (plain, err) = run(&model, &["--speculate", "off"]);
    assert!(!err.contains("speculation:"), "{err}");
    for extra in [
        &["--draft-model", model.as_str()][..],
        &["--speculate", "draft", "--draft-model", model.as_str()],
        &["--speculate", "ngram"],
        &[],
    ] {
        let (text, err) = run(&model, extra);
        assert_eq!(text, plain, "{extra:?}");
        assert!(err.contains("speculation: "), "{extra:?}: {err}");
    }

    let s = Serve::start(&["--model", &model, "--draft-model", &model, "-t", "1"]);
    let log = s.log.lock().unwrap().clone();
    assert!(
        log.iter().any(|l| l.contains("speculation draft model")),
        "{log:?}"
    );
    let ask = |speculate: &str| -> Value {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0,
            "ignore_eos": true, "speculate": speculate});
        let (status, text) =
            common::http(&s.addr, "POST", "/v1/completions", &body.to_string()).unwrap();
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    };
    let off = ask("off");
    for how in ["draft", "ngram"] {
        let v = ask(how);
        assert_eq!(v["choices"][0]["text"], off["choices"][0]["text"], "{how}");
        let t = &v["timing"];
        assert!(t["accepted_tokens"].as_u64().unwrap() > 0, "{how}: {v}");
    }
    assert!(off["timing"].get("drafted_tokens").is_none(), "{off}");
    assert_eq!(
        off["choices"][0]["text"].as_str().unwrap(),
        plain.trim_end_matches('\n')
    );
    let rate = s.metric("hasten_spec_acceptance_rate");
    let per_step = s.metric("hasten_spec_tokens_per_step");
    assert!(rate > 0.5 && rate <= 1.0, "{rate}");
    // Drafts were kept (a draft model as large as the target rarely pays,
    // so the engine pauses it by its cost fit: how often depends on the
    // machine's timings, so only "more than one token per step").
    assert!(per_step > 1.0, "{per_step}");
}

#[test]
fn speculation_flags_and_drafts_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(&dir, "m.gguf", &[]);
    let vocab = testdata().join("tokenizer/ggml-vocab-gpt-2.gguf");
    let other = synth(&dir, "gpt2.gguf", &["--vocab", vocab.to_str().unwrap()]);
    let fails = |extra: &[&str], want: &str| {
        let mut a = vec!["run", "--model", model.as_str(), "-p", "Hi", "-n", "4"];
        a.extend(extra);
        let o = hasten(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(want),
            "{extra:?}: {err}"
        );
    };
    fails(
        &["--speculate", "draft"],
        "--speculate draft needs --draft-model",
    );
    fails(
        &["--speculate", "off", "--draft-model", &model],
        "--draft-model drafts only with --speculate draft or auto",
    );
    fails(&["--draft-model", &other], "the draft model cannot draft");
    fails(&["--draft-model", "/nonexistent.gguf"], "nonexistent");
}
