//! hasten against llama.cpp on the same fixture files: logits within a
//! per-type tolerance and identical greedy tokens up to the first step where
//! the reference's own top-two margin is within that tolerance (beyond it two
//! correct implementations may legitimately diverge).
//! Goldens: tools/goldens/model_goldens.py (llama-cpp-python: logits) and
//! tools/goldens/server_goldens.py (llama-server: log-probabilities, for
//! architectures added since, such as qwen3).

use super::vocab;
use hasten_kernels::threads::Threads;
use hasten_kernels::GgmlType;
use hasten_model::config::{Arch, Config};
use hasten_model::gguf::GgufFile;
use hasten_model::llama::{Model, Naming};
use hasten_model::sampler::argmax;
use hasten_model::session::Session;
use hasten_model::testing::{Fixture, RopeScalingFx};
use hasten_model::tokenizer::Tokenizer;
use serde_json::Value;

const GOLDEN: &str = include_str!("../golden/llama_cpp.json");
const SERVER_GOLDEN: &str = include_str!("../golden/llama_server.json");

/// Log-softmax of `logits` (what llama-server reports as `logprob`).
fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max
        + logits
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln() as f32;
    logits.iter().map(|&x| x - lse).collect()
}

/// Largest |hasten - llama.cpp| allowed on a logit, per weight type. llama.cpp
/// quantizes activations (to f16 for F16 weights, to 8-bit blocks for the
/// quantized types) before its dot products; hasten's reference keeps them f32.
fn tolerance(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => 0.01,
        GgmlType::F16 | GgmlType::BF16 => 0.03,
        _ => 0.4,
    }
}

struct Outcome {
    compared_steps: usize,
    max_diff: f32,
}

/// `logprobs`: the golden holds log-probabilities, not logits.
fn check_prompt(m: &Model, prompt: &Value, tol: f32, logprobs: bool) -> Result<Outcome, String> {
    let tokens: Vec<u32> = prompt["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let steps = prompt["steps"].as_array().unwrap();
    let mut s = Session::new(m, tokens.len() + steps.len(), Threads::new(2).unwrap());
    let mut logits = s.feed(&tokens).map_err(|e| e.to_string())?;
    let mut out = Outcome {
        compared_steps: 0,
        max_diff: 0.0,
    };
    for (i, step) in steps.iter().enumerate() {
        if logprobs {
            logits = log_softmax(&logits);
        }
        let top: Vec<(u32, f32)> = step["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
            .collect();
        for &(id, want) in &top {
            let d = (logits[id as usize] - want).abs();
            out.max_diff = out.max_diff.max(d);
            if d > tol {
                return Err(format!(
                    "step {i}: logit of token {id} is {} vs llama.cpp {want} (tolerance {tol})",
                    logits[id as usize]
                ));
            }
        }
        out.compared_steps = i + 1;
        let margin = top[0].1 - top[1].1;
        if margin <= tol {
            break;
        }
        let ours = argmax(&logits);
        let theirs = step["token"].as_u64().unwrap() as u32;
        if ours != theirs {
            return Err(format!("step {i}: greedy token {ours} vs llama.cpp {theirs} with a reference margin of {margin}"));
        }
        logits = s.feed(&[theirs]).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

// Each golden's fixtures are spread over several tests (every `parts`-th
// from `part`) so the test threads share them: the server golden's 28
// took 40 s as one test on the scalar tier, the end of CI's model step.

#[test]
fn logits_and_greedy_tokens_match_llama_cpp_part_0() {
    check_golden(GOLDEN, 0, 2);
}

#[test]
fn logits_and_greedy_tokens_match_llama_cpp_part_1() {
    check_golden(GOLDEN, 1, 2);
}

#[test]
fn every_architecture_log_probabilities_and_greedy_tokens_match_llama_server_part_0() {
    check_golden(SERVER_GOLDEN, 0, 4);
}

#[test]
fn every_architecture_log_probabilities_and_greedy_tokens_match_llama_server_part_1() {
    check_golden(SERVER_GOLDEN, 1, 4);
}

#[test]
fn every_architecture_log_probabilities_and_greedy_tokens_match_llama_server_part_2() {
    check_golden(SERVER_GOLDEN, 2, 4);
}

#[test]
fn every_architecture_log_probabilities_and_greedy_tokens_match_llama_server_part_3() {
    check_golden(SERVER_GOLDEN, 3, 4);
}

/// Checks every `parts`-th fixture of the golden `text`, from `part`.
fn check_golden(text: &str, part: usize, parts: usize) {
    let golden: Value = serde_json::from_str(text).unwrap();
    let logprobs = golden["values"] == "logprobs";
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut report = Vec::new();
    let fixtures = golden["fixtures"].as_array().unwrap();
    assert!(fixtures.len() >= parts, "a part without fixtures");
    for fx in fixtures.iter().skip(part).step_by(parts) {
        let name = fx["name"].as_str().unwrap();
        let args: Vec<&str> = fx["synth_args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let ty = GgmlType::from_name(args[1]).unwrap();
        let arch = match args.iter().position(|a| *a == "--arch") {
            Some(i) => Arch::from_name(args[i + 1]).unwrap(),
            None if args.contains(&"--qwen2") => Arch::Qwen2,
            None => Arch::Llama,
        };
        let mut fixture = Fixture::tiny_arch(arch, ty);
        // The synth flags a golden fixture was made with, as `hasten synth` reads them.
        let flag = |f: &str| args.iter().position(|a| *a == f).map(|i| args[i + 1]);
        if let Some(c) = flag("--context") {
            fixture.context_length = c.parse().unwrap();
        }
        if let Some(r) = flag("--rope-scaling") {
            fixture.rope_scaling = Some(RopeScalingFx::parse(r).unwrap());
        }
        let path = dir.path().join(format!("{name}.gguf"));
        fixture.write_gguf(&vocab(), &path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        let c = Config::from_gguf(&f.header, &f.name, 32000).unwrap();
        let m = Model::load(&f, c, Naming::Gguf).unwrap();
        let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
        let mut compared = 0;
        for p in fx["prompts"].as_array().unwrap() {
            let text = p["text"].as_str().unwrap();
            let want: Vec<u32> = p["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            if tok.encode(text, true, false).unwrap() != want {
                failures.push(format!(
                    "{name} {text:?}: tokenization differs from llama.cpp's"
                ));
            }
            match check_prompt(&m, p, tolerance(ty), logprobs) {
                Ok(o) => {
                    compared += o.compared_steps;
                    report.push(format!(
                        "{name} {text:?}: {} steps, max |diff| {:.4}",
                        o.compared_steps, o.max_diff
                    ));
                }
                Err(e) => failures.push(format!("{name} {text:?}: {e}")),
            }
        }
        // Fixture weights keep margins comfortable; a fixture that lets the
        // comparison stop almost at once would test nothing.
        if compared < 60 {
            failures.push(format!(
                "{name}: only {compared} greedy steps were comparable"
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
