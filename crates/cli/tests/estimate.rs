//! `hasten estimate`: the figures the issue computes by hand, as JSON and
//! in the table, and clear errors for unknown names.

mod common;

use common::hasten;

#[test]
fn estimate_shows_the_work_and_the_json_matches() {
    let o = hasten(&["estimate", "--model", "llama-3-70b", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["estimate"]["kv_bytes_per_token"], 327680.0);
    assert_eq!(v["estimate"]["decode_first"]["bound"], "Memory");
    let o = hasten(&[
        "estimate",
        "--model",
        "gpt-3-175b",
        "--hardware",
        "h100-sxm",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("4.5000 MiB")
            && text.contains("2 × 96 layers × 96 KV heads × 128 × 16 bits / 8"),
        "{text}"
    );
    assert!(
        text.contains("TTFT") && text.contains("sequences that fit"),
        "{text}"
    );
    // A batch whose KV does not fit is warned about, in the JSON too.
    let o = hasten(&[
        "estimate",
        "--model",
        "llama-2-7b",
        "--batch",
        "500",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("warning: a batch of 500 sequences"),
        "{err}"
    );
    let v = json(&o);
    assert!(
        v["warnings"][0].as_str().unwrap().contains("only 165 fit"),
        "{v}"
    );
    let o = hasten(&["estimate", "--model", "llama-2-7b"]);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = hasten(&["estimate", "--model", "gpt-5"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown model \"gpt-5\""),
        "{err}"
    );
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_model_comes_from_a_gguf_file_a_config_json_or_dimensions() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::tiny_model(&dir);
    let v = json(&hasten(&["estimate", "--model", &gguf, "--json"]));
    let m = &v["model"];
    assert_eq!(
        (m["layers"].as_u64(), m["hidden"].as_u64()),
        (Some(2), Some(256))
    );
    // The file's own bytes per weight: Q8_0 matrices (8.5 bits) and f32 norms.
    let bits = v["weights"]["bits"].as_f64().unwrap();
    assert!(bits > 8.5 && bits < 9.5, "{bits}");
    assert_eq!(v["weights"]["name"], "q8_0 (file)");

    // Llama 2 7B's config.json gives the preset's figures.
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "vocab_size": 32000, "tie_word_embeddings": false, "torch_dtype": "float16"}"#,
    )
    .unwrap();
    let preset = json(&hasten(&["estimate", "--model", "llama-2-7b", "--json"]));
    for model in [dir.path().to_str().unwrap(), cfg.to_str().unwrap()] {
        let v = json(&hasten(&["estimate", "--model", model, "--json"]));
        assert_eq!(v["estimate"], preset["estimate"], "{model}");
    }
    // ... and so do its dimensions as flags.
    let v = json(&hasten(&[
        "estimate", "--layers", "32", "--hidden", "4096", "--heads", "32", "--ffn", "11008",
        "--vocab", "32000", "--json",
    ]));
    assert_eq!(v["estimate"], preset["estimate"]);
    // A flag overrides one dimension of a preset: GQA shrinks the KV cache 4×.
    let v = json(&hasten(&[
        "estimate",
        "--model",
        "llama-2-7b",
        "--kv-heads",
        "8",
        "--json",
    ]));
    assert_eq!(v["estimate"]["kv_bytes_per_token"], 131072.0);
    assert_eq!(v["model"]["name"], "llama-2-7b (modified)");
    // Mixtral's expert keys give active and total parameters.
    std::fs::write(
        &cfg,
        r#"{"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
            "num_local_experts": 8, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let v = json(&hasten(&[
        "estimate",
        "--model",
        cfg.to_str().unwrap(),
        "--json",
    ]));
    let mix = json(&hasten(&[
        "estimate",
        "--model",
        "mixtral-8x7b",
        "--weights",
        "bf16",
        "--json",
    ]));
    assert_eq!(v["estimate"], mix["estimate"]);
    // A Qwen3-MoE GGUF: the experts' count, use and width from its keys.
    let moe = dir.path().join("moe.gguf");
    let moe = moe.to_str().unwrap();
    let o = hasten(&["synth", "--arch", "qwen3moe", "--type", "q8_0", "-o", moe]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = json(&hasten(&["estimate", "--model", moe, "--json"]))["model"].clone();
    assert_eq!(
        (
            m["experts"].as_u64(),
            m["active_experts"].as_u64(),
            m["ffn"].as_u64()
        ),
        (Some(8), Some(2), Some(128)),
        "{m}"
    );
    // A Gemma 3 GGUF: five of its six layers see the last 8 positions,
    // and the KV of a sequence counts 8 of theirs at most.
    let g3 = dir.path().join("g3.gguf");
    let g3 = g3.to_str().unwrap();
    let o = hasten(&["synth", "--arch", "gemma3", "-o", g3]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let args = [
        "estimate", "--model", g3, "--prompt", "100", "--output", "20", "--json",
    ];
    let v = json(&hasten(&args));
    assert_eq!(
        v["model"]["window"],
        serde_json::json!({"size": 8, "layers": 5})
    );
    let per_token = v["estimate"]["kv_bytes_per_token"].as_f64().unwrap();
    let per_seq = v["estimate"]["kv_bytes_per_sequence"].as_f64().unwrap();
    assert_eq!(per_seq, per_token / 6.0 * (120.0 + 5.0 * 8.0));

    for (args, want) in [
        (vec!["--heads", "32"], "without --model, give at least"),
        (
            vec!["--model", "llama-2-7b", "--kv-heads", "7"],
            "cannot be shared by 7 KV heads",
        ),
        (
            vec!["--model", "llama-2-7b", "--layers", "0"],
            "layers must be between",
        ),
        (
            vec![
                "--model",
                cfg.parent().unwrap().join("nope.gguf").to_str().unwrap(),
            ],
            "No such file",
        ),
        (vec!["--model", &gguf[..gguf.len() - 5]], "unknown model"),
    ] {
        let mut a = vec!["estimate"];
        a.extend(args.iter().copied());
        let o = hasten(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
    std::fs::write(&cfg, "{\"hidden_size\": 4096}").unwrap();
    let o = hasten(&["estimate", "--model", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no number \"num_attention_heads\""),
        "{err}"
    );
}

#[test]
fn a_sweep_shows_kv_reads_growing_with_the_square_of_the_output() {
    let v = json(&hasten(&[
        "estimate",
        "--model",
        "llama-3-8b",
        "--hardware",
        "h100-sxm",
        "--prompt",
        "16",
        "--sweep",
        "output=128..4096",
        "--json",
    ]));
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 6);
    let f = |i: usize, k: &str| points[i]["estimate"][k].as_f64().unwrap();
    for i in 1..6 {
        assert!(f(i, "tpot_s") > f(i - 1, "tpot_s"));
        let r = f(i, "decode_kv_read_bytes") / f(i - 1, "decode_kv_read_bytes");
        assert!(r > 3.5 && r < 4.3, "{i}: {r}");
    }
    let o = hasten(&["estimate", "--sweep", "batch=1,8,64"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("-bound")).count(),
        3,
        "{text}"
    );
    let o = hasten(&["estimate", "--sweep", "speed=1..2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("one of output, prompt, batch, cached"));
}

#[test]
fn measure_probes_this_machine_and_run_reports_its_share_of_the_bandwidth() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::tiny_model(&dir);
    let v = json(&hasten(&[
        "estimate",
        "--model",
        &gguf,
        "--measure",
        "-t",
        "2",
        "--probe-mib",
        "4",
        "--prompt",
        "32",
        "--json",
    ]));
    let m = &v["measured"];
    assert_eq!(m["weight_type"], "Q8_0");
    assert_eq!(m["prefill_rows"], 32);
    for k in [
        "read_gbs",
        "decode_stream_gbs",
        "prefill_gflops",
        "attention_gflops",
    ] {
        assert!(m[k].as_f64().unwrap() > 0.001, "{k}: {m}");
    }
    // The estimate runs on what was measured.
    assert_eq!(v["hardware"]["bandwidth_gbs"], m["decode_stream_gbs"]);
    assert!(v["hardware"]["name"].as_str().unwrap().contains("measured"));
    assert!(v["estimate"]["tpot_s"].as_f64().unwrap() > 0.0);

    let o = hasten(&[
        "run",
        "--model",
        &gguf,
        "--random-prompt",
        "4",
        "-n",
        "8",
        "--ignore-eos",
        "-t",
        "2",
        "--vs-estimate",
        "--json-stats",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.contains("of this machine's read bandwidth"),
        "{err}"
    );
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    let f = stats["decode_bandwidth_fraction"].as_f64().unwrap();
    let want =
        stats["decode_gb_per_s"].as_f64().unwrap() / stats["read_gb_per_s"].as_f64().unwrap();
    assert!(f > 0.0 && (f - want).abs() < 1e-9, "{stats}");
}

#[test]
fn a_closed_stdout_ends_the_output_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    // 64 sweep points of JSON: more than a pipe buffer holds.
    let values: Vec<String> = (1..=64).map(|v| (v * 16).to_string()).collect();
    let sweep = format!("output={}", values.join(","));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hasten"))
        .args(["estimate", "--sweep", &sweep, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close the pipe before the output ends.
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8; 1];
    out.read_exact(&mut b).unwrap();
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success() && !err.contains("panicked"),
        "{status}: {err}"
    );
}
