//! `hasten run` and `hasten serve` share one generation path: the same
//! prompt gives the same greedy text through both, with and without a chat
//! template; the start-up line names the kernels that run; and `hasten
//! synth` + `hasten run` work outside the repository.

mod common;

use common::{hasten, tiny_model, Serve};
use serde_json::{json, Value};

fn post(s: &Serve, path: &str, body: Value) -> Value {
    let (status, text) = common::http(&s.addr, "POST", path, &body.to_string()).unwrap();
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn run_text(args: &[&str]) -> String {
    let o = hasten(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    // run ends its text with one newline.
    out.strip_suffix('\n').unwrap().to_owned()
}

/// Greedy text of `model` (a path, or the built-in model when None) for a
/// raw prompt and a chat, through `run` and through `/v1/completions` and
/// `/v1/chat/completions`.
fn same_text_both_ways(model: Option<&str>, cache: &std::path::Path) {
    let mut serve_args = vec!["-t", "2"];
    let mut run_model = vec![];
    if let Some(m) = model {
        serve_args.extend(["--model", m]);
        run_model.extend(["--model", m]);
    }
    let s = Serve::start(&serve_args);
    let name = post(
        &s,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 1}),
    )["model"]
        .as_str()
        .unwrap()
        .to_owned();
    let cache = cache.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "-n", "24", "--temperature", "0", "-t", "2"];
        a.extend(&run_model);
        a.extend(extra);
        // The built-in model is written to the cache directory given.
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_hasten"))
            .args(&a)
            .env("HASTEN_CACHE", cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout)
            .unwrap()
            .strip_suffix('\n')
            .unwrap()
            .to_owned()
    };
    let raw = run(&["-p", "In the beginning"]);
    let served = post(
        &s,
        "/v1/completions",
        json!({"model": name, "prompt": "In the beginning", "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(served["choices"][0]["text"], raw.as_str(), "{served}");
    let chat = run(&[
        "-p",
        "Who made the earth?",
        "--chat",
        "--system",
        "Be brief",
    ]);
    let served = post(
        &s,
        "/v1/chat/completions",
        json!({"model": name, "max_tokens": 24, "temperature": 0, "messages": [
            {"role": "system", "content": "Be brief"},
            {"role": "user", "content": "Who made the earth?"}]}),
    );
    assert_eq!(
        served["choices"][0]["message"]["content"],
        chat.as_str(),
        "{served}"
    );
    assert!(!raw.is_empty() || !chat.is_empty());
}

#[test]
fn run_and_serve_give_the_same_greedy_text() {
    let dir = tempfile::tempdir().unwrap();
    // The synthetic model has no chat template (the fallback is used).
    same_text_both_ways(Some(&tiny_model(&dir)), dir.path());
    // The built-in model carries its own template.
    same_text_both_ways(None, dir.path());
}

#[test]
fn the_start_up_line_names_the_kernels_that_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir);
    let line = |isa: &str| {
        let s = Serve::start_with_env(&["--model", &model, "-t", "1"], &[("HASTEN_ISA", isa)]);
        let log = s.log.lock().unwrap().clone();
        log.into_iter()
            .find(|l| l.contains(" kernels"))
            .expect("a start-up line")
    };
    assert!(line("scalar").ends_with("scalar kernels"));
    // The forced tier, or the best below it where this CPU lacks it.
    for (name, isa) in [
        ("avx512", hasten_kernels::cpu::Isa::Avx512),
        ("amx", hasten_kernels::cpu::Isa::Amx),
    ] {
        let got = line(name);
        let table = hasten_kernels::cpu::Kernels::for_isa(isa).isa;
        assert!(got.ends_with(&format!("{} kernels", table.name())), "{got}");
    }
    if cfg!(target_arch = "x86_64")
        && hasten_kernels::cpu::supported() >= hasten_kernels::cpu::Isa::Avx2
    {
        assert!(line("avx2").ends_with("avx2 kernels"));
    }
}

#[test]
fn synth_and_run_work_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_hasten"))
        .args(["synth", "--shape", "tiny", "-o", "t.gguf"])
        .current_dir(dir.path())
        .env_remove("HASTEN_TESTDATA")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = run_text(&[
        "run",
        "--model",
        dir.path().join("t.gguf").to_str().unwrap(),
        "-n",
        "4",
        "-p",
        "Hello",
    ]);
    assert!(!text.is_empty());
    // The built-in vocabulary is llama.cpp's llama-spm: "Hello" is 15043.
    let o = hasten(&[
        "tokenize",
        "--model",
        dir.path().join("t.gguf").to_str().unwrap(),
        "--no-bos",
        "Hello world",
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "15043 3186");
}
