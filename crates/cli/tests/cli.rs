//! The `hasten` binary driven as a user would: synthesize a model, run it,
//! tokenize with it, and feed it bad input.

mod common;

use common::{hasten, testdata, tiny_model};
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn run_streams_text_and_reports_stats() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let run = |seed: &str| {
        hasten(&[
            "run",
            "--model",
            &model,
            "-p",
            "Hello world",
            "-n",
            "12",
            "--seed",
            seed,
            "--ignore-eos",
            "--json-stats",
            "-t",
            "2",
            "--temperature",
            "5",
            "--top-k",
            "0",
            "--min-p",
            "0",
        ])
    };
    let o = run("7");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).trim().is_empty());
    let err = stderr(&o);
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(stats["generated_tokens"], 12);
    assert_eq!(stats["prompt_tokens"], 3);
    assert!(stats["ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(stats["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    // Same seed, same text; another seed, other text.
    assert_eq!(run("7").stdout, o.stdout);
    assert_ne!(run("8").stdout, o.stdout);
}

/// Without a prompt, `run` starts from the BOS token alone (llama.cpp's
/// empty prompt), so `hasten run --model F -n 4` works as a smoke test.
#[test]
fn run_without_a_prompt_starts_from_bos() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let o = hasten(&[
        "run",
        "--model",
        &model,
        "-n",
        "4",
        "--ignore-eos",
        "--json-stats",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(stats["prompt_tokens"], 1);
    assert_eq!(stats["generated_tokens"], 4);
}

#[test]
fn chat_mode_and_greedy_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let o = hasten(&[
        "run",
        "--model",
        &model,
        "-p",
        "Hi",
        "--chat",
        "--system",
        "Be brief",
        "-n",
        "5",
        "--temperature",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn synth_writes_each_architecture_and_run_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["llama", "qwen2", "qwen3", "granite", "smollm3"] {
        let path = dir.path().join(format!("{arch}.gguf"));
        let p = path.to_str().unwrap();
        let o = hasten(&["synth", "--arch", arch, "-o", p]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = hasten(&[
            "run",
            "--model",
            p,
            "-p",
            "Hi",
            "-n",
            "3",
            "--temperature",
            "0",
        ]);
        assert!(
            o.status.success() && !o.stdout.is_empty(),
            "{arch}: {}",
            stderr(&o)
        );
    }
    let o = hasten(&["synth", "--arch", "gemma", "-o", "/tmp/never.gguf"]);
    assert!(
        stderr(&o).contains("unknown --arch \"gemma\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn tokenize_matches_llama_cpp_vectors() {
    let vocab = testdata().join("tokenizer/ggml-vocab-llama-spm.gguf");
    let o = hasten(&[
        "tokenize",
        "--model",
        vocab.to_str().unwrap(),
        "--no-bos",
        "Hello world",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "15043 3186");
    let o = hasten(&[
        "tokenize",
        "--model",
        vocab.to_str().unwrap(),
        "--pieces",
        "Hello",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1\t\"<s>\"\n15043\t\"▁Hello\"\n"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let bytes = std::fs::read(&model).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let not_gguf = dir.path().join("notes.gguf");
    std::fs::write(&not_gguf, "hello").unwrap();
    let long_prompt = "word ".repeat(600);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--model", truncated.to_str().unwrap(), "-p", "x"],
            "extends past the end",
        ),
        (
            vec!["run", "--model", not_gguf.to_str().unwrap(), "-p", "x"],
            "not a GGUF file",
        ),
        (
            vec!["run", "--model", "/nonexistent/model.gguf", "-p", "x"],
            "No such file",
        ),
        (
            vec!["run", "--model", &model, "-p", &long_prompt],
            "context holds 512",
        ),
        (
            vec!["run", "--model", &model, "-p", "x", "-t", "100000"],
            "thread count",
        ),
        (
            vec!["run", "--model", &model, "-p", "x", "--top-p", "0"],
            "top_p",
        ),
        (
            vec![
                "run",
                "--model",
                &model,
                "-p",
                "x",
                "--max-batch-tokens",
                "0",
            ],
            "--max-batch-tokens must be at least 1",
        ),
        (
            vec!["serve", "--model", "/nonexistent/model.gguf", "--port", "0"],
            "No such file",
        ),
        (
            vec![
                "serve",
                "--port",
                "0",
                "--tls-cert",
                "/nonexistent/cert.pem",
                "--tls-key",
                "/nonexistent/key.pem",
            ],
            "reading the TLS certificate /nonexistent/cert.pem",
        ),
        (
            vec!["complete", "--ca-cert", "/nonexistent/ca.pem", "Hi"],
            "reading the CA certificates /nonexistent/ca.pem",
        ),
    ];
    for (args, want) in cases {
        let o = hasten(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // One `error: <what>: <why>` line, the cause said once, and a
        // server that failed to load never claims to be listening.
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: {err}");
        assert_eq!(errors[0].matches(want).count(), 1, "{args:?}: {err}");
        assert!(!err.contains("listening on"), "{args:?}: {err}");
    }
}

#[test]
fn piped_chat_without_a_server_fails_and_tokenize_needs_no_model() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let url = common::dead_url();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hasten"))
        .args(["chat", "--url", &url, "--model", "m"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Hello\n").unwrap();
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error: an answer failed"), "{err}");
    // The built-in model's tokenizer, without --model.
    let o = hasten(&["tokenize", "Hello world"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.trim()
            .split([' ', ',', '[', ']'])
            .any(|t| t.parse::<u32>().is_ok()),
        "{out}"
    );
}

#[test]
fn chat_template_kwargs_must_be_a_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let run = |kwargs: &str| {
        hasten(&[
            "run",
            "--model",
            &model,
            "--chat",
            "-p",
            "Hi",
            "-n",
            "2",
            "-t",
            "1",
            "--chat-template-kwargs",
            kwargs,
        ])
    };
    let ok = run(r#"{"enable_thinking": false}"#);
    assert!(ok.status.success(), "{}", stderr(&ok));
    for (bad, what) in [("[1]", "must be a JSON object"), ("{", "is not JSON")] {
        let o = run(bad);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(what), "{bad}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
    // `hasten chat` refuses it before connecting anywhere.
    let o = hasten(&[
        "chat",
        "--url",
        "http://127.0.0.1:9",
        "--chat-template-kwargs",
        "[1]",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("must be a JSON object"),
        "{}",
        stderr(&o)
    );
}

/// `hasten perplexity` scores a text in chunks (its JSON line says how
/// many tokens), the same figure for the same text, and refuses a text
/// shorter than one chunk or a chunk longer than the context, clearly.
#[test]
fn perplexity_scores_a_text_and_refuses_what_it_cannot_score() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let text = dir.path().join("text.txt");
    std::fs::write(
        &text,
        "the quick brown fox jumps over the lazy dog. ".repeat(40),
    )
    .unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    let args = |file: &std::path::Path, ctx: &str| {
        let f = file.to_str().unwrap().to_string();
        hasten(&[
            "perplexity",
            "--model",
            &model,
            "-f",
            &f,
            "-c",
            ctx,
            "-t",
            "2",
            "--json",
        ])
    };
    let o = args(&text, "64");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let j: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let chunks = j["chunks"].as_u64().unwrap();
    assert!(chunks >= 2, "{out}");
    assert_eq!(j["scored_tokens"].as_u64().unwrap(), chunks * (64 - 1 - 32));
    let ppl = j["ppl"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{out}");
    assert!(out.starts_with("PPL = "), "{out}");
    let again = String::from_utf8_lossy(&args(&text, "64").stdout).into_owned();
    assert_eq!(again.lines().last(), out.lines().last());
    for (file, ctx, want) in [
        (&short, "64", "fewer than one chunk of 64"),
        (&text, "100000", "it must be 4 to 512"),
    ] {
        let o = args(file, ctx);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{err}");
    }
}
