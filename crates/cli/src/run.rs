//! `hasten run`: load a model, generate from one prompt, stream the text to
//! stdout, and report load time, TTFT and throughput on stderr. It is a
//! client of the engine (the same scheduler, sampler, stop conditions and
//! detokenizer `hasten serve` runs), so run and serve cannot drift apart;
//! its figures come from the engine's `Finish` timing.

use anyhow::{bail, Context, Result};
use hasten_engine::{Engine, EngineConfig, Event, RequestSpec};
use hasten_model::chat::Message;
use hasten_model::loader::load_with;
use hasten_model::prompt::{self, Ending};
use hasten_model::sampler::SamplingParams;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face checkpoint directory, or
    /// hf:OWNER/REPO[:QUANT|:FILE] from the Hub (default: the small demo
    /// model built into hasten).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt text; without it (and without --random-prompt) generation
    /// starts from the BOS token alone, as llama.cpp does.
    #[arg(long, short, default_value = "")]
    prompt: String,
    /// Benchmark mode: use N seeded random token ids as the prompt instead
    /// of --prompt (as llama-bench does for pp tests).
    #[arg(long)]
    random_prompt: Option<usize>,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long)]
    system: Option<String>,
    /// Extra chat-template variables for --chat, a JSON object, as a
    /// request's `chat_template_kwargs` (e.g. '{"enable_thinking": false}'
    /// for Qwen3).
    #[arg(long, value_name = "JSON")]
    chat_template_kwargs: Option<String>,
    /// Tokens to generate at most.
    #[arg(long, short = 'n', default_value_t = 128)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Sample from the K most likely tokens only (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Sample from the smallest set of tokens holding this much probability (1: all).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0: off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Divide the logits of recently seen tokens by this (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Subtract this times the count of each token seen so far (OpenAI's).
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Subtract this from every token seen so far (OpenAI's).
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// Seed of the sampler (the same seed gives the same output).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop before this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Worker threads; 0 uses every core.
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// Generate exactly --max-tokens tokens, ignoring end-of-sequence.
    #[arg(long)]
    ignore_eos: bool,
    /// Prompt tokens computed in one forward pass at most (as `hasten
    /// serve --max-batch-tokens`).
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// How the KV cache stores K and V: f16, q8_0 or q4_0 (as `hasten
    /// serve --kv-type`).
    #[arg(long, default_value = "f16", value_parser = crate::parse_kv_type)]
    kv_type: hasten_kernels::attention::KvType,
    /// Keep every position's K and V in sliding-window layers too (`hasten
    /// serve --swa-full`); by default they keep only their window.
    #[arg(long)]
    swa_full: bool,
    /// Also print the statistics as one JSON object on the last stderr line.
    #[arg(long)]
    json_stats: bool,
    /// After generating, probe this machine's read bandwidth (about a
    /// second) and print the decode's as a fraction of it, with the TPOT
    /// that bandwidth bound predicts (as `hasten estimate --measure` does).
    #[arg(long)]
    vs_estimate: bool,
    /// Run the model at this context (tokens), below its trained one
    /// (llama.cpp's -c; default: the trained context).
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    #[command(flatten)]
    speculation: crate::Speculation,
}

pub fn main(a: Args) -> Result<()> {
    let threads = crate::threads(a.threads)?;
    // Contradictory flags fail before the model loads.
    a.speculation.draft_model()?;
    let t_load = Instant::now();
    let (path, _) = crate::models::resolve(a.model.as_deref())?;
    let lm = load_with(&path, a.ctx_size).context("loading the model")?;
    let draft = a.speculation.load_draft(&lm.model, &lm.tokenizer)?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let tok = Arc::new(lm.tokenizer);
    let model = Arc::new(lm.model);
    let prompt = if let Some(n) = a.random_prompt {
        prompt::random_tokens(n, tok.vocab_size().min(model.config.vocab_size), a.seed)
    } else if a.chat {
        let template = prompt::template_or_fallback(lm.template)?;
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(Message::new("system", s));
        }
        msgs.push(Message::new("user", &a.prompt));
        let vars = match &a.chat_template_kwargs {
            None => Default::default(),
            Some(j) => crate::template_kwargs(j)?,
        };
        prompt::chat_tokens(&template, &tok, &msgs, Ending::Generate, &vars)?
    } else {
        prompt::text_tokens(&tok, &a.prompt)?
    };
    let ctx = model.config.context_length;
    if prompt.is_empty() {
        // No --prompt: as llama.cpp, generate from the BOS token alone;
        // a model without one has nothing to start from.
        bail!("no prompt, and the model adds no BOS token to start from: give --prompt TEXT (or --random-prompt N)");
    }
    if prompt.len() >= ctx {
        bail!(
            "the prompt has {} tokens but the model's context holds {ctx}",
            prompt.len()
        );
    }
    if a.max_batch_tokens == 0 {
        bail!("--max-batch-tokens must be at least 1");
    }
    // As llama.cpp's -n: what the context leaves, at most.
    let max_new = a.max_tokens.min(ctx - prompt.len());
    let n_prompt = prompt.len();
    let spec = RequestSpec {
        params: SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repeat_penalty,
            frequency_penalty: a.frequency_penalty,
            presence_penalty: a.presence_penalty,
            seed: a.seed,
            ..SamplingParams::default()
        },
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        ..RequestSpec::greedy(prompt, max_new)
    };
    let engine = Engine::start(
        model.clone(),
        tok,
        EngineConfig {
            max_step_tokens: a.max_batch_tokens,
            max_draft: a.speculation.max_draft(),
            draft_model: draft,
            kv_type: a.kv_type,
            swa_full: a.swa_full,
            ..EngineConfig::single(n_prompt + max_new, threads)
        },
    )?;
    let mut stream = engine.submit(engine.validate(spec)?)?;
    let mut out = std::io::stdout().lock();
    let fin = loop {
        match stream.blocking_recv() {
            Some(Event::Token(t)) => {
                out.write_all(t.text.as_bytes())?;
                out.flush()?;
            }
            Some(Event::Prefill { .. }) => {}
            Some(Event::Finished(f)) => {
                out.write_all(f.text.as_bytes())?;
                break f;
            }
            Some(Event::Failed(m)) => bail!("generation failed: {m}"),
            None => bail!("the engine stopped before the answer finished"),
        }
    };
    writeln!(out)?;
    let m = engine.metrics();
    engine.shutdown();
    let t = fin.timing;
    let generated = fin.output_tokens;
    let finish = fin.reason.as_openai();
    // TTFT as a user sees it: from submission to the first token's logits.
    let ttft_ms = (t.queue + t.prefill).as_secs_f64() * 1e3;
    let prefill_tps = n_prompt as f64 / t.prefill.as_secs_f64().max(1e-9);
    // The first token comes from the prefill logits; the rest each cost a decode step.
    let decode_tokens = generated.saturating_sub(1);
    let decode_tps = if decode_tokens > 0 {
        decode_tokens as f64 / t.decode.as_secs_f64().max(1e-9)
    } else {
        0.0
    };
    eprintln!(
        "load {load_ms:.0} ms | prompt {n_prompt} tokens, TTFT {ttft_ms:.1} ms, prefill {prefill_tps:.1} tok/s | {generated} tokens generated, decode {decode_tps:.1} tok/s | {} threads | finish {finish}",
        threads.get()
    );
    if m.drafted_tokens > 0 {
        eprintln!(
            "speculation: {} tokens drafted, {} accepted ({:.0}%), {} steps for {generated} tokens",
            m.drafted_tokens,
            m.accepted_tokens,
            100.0 * m.accepted_tokens as f64 / m.drafted_tokens as f64,
            m.steps
        );
    }
    // Bytes a decode step reads: every weight matrix once (the packed copy
    // replaces the file's bytes, same size) plus K and V of the average
    // context during decode (sliding-window layers: their window).
    let avg_ctx = n_prompt + generated / 2;
    let decode_bytes = model.weight_bytes() + model.config.kv_bytes_read(avg_ctx, a.kv_type);
    let decode_gbs = decode_bytes as f64 * decode_tps / 1e9;
    let read_gbs = if a.vs_estimate && decode_tokens > 0 {
        let bw = hasten_kernels::probe::read_bandwidth(threads, 512 << 20, 5) / 1e9;
        eprintln!(
            "decode reads {:.1} MB a token at {decode_gbs:.2} GB/s = {:.0}% of this machine's read bandwidth ({bw:.2} GB/s, {} threads): bandwidth-bound TPOT {:.2} ms, measured {:.2} ms",
            decode_bytes as f64 / 1e6,
            100.0 * decode_gbs / bw,
            threads.get(),
            decode_bytes as f64 / (bw * 1e9) * 1e3,
            1e3 / decode_tps
        );
        Some(bw)
    } else {
        None
    };
    if a.json_stats {
        let stats = serde_json::json!({
            "read_gb_per_s": read_gbs,
            "decode_bandwidth_fraction": read_gbs.map(|bw| decode_gbs / bw),
            "decode_bytes_per_token": decode_bytes,
            "decode_gb_per_s": decode_gbs,
            "load_ms": load_ms, "prompt_tokens": n_prompt, "ttft_ms": ttft_ms,
            "queue_ms": t.queue.as_secs_f64() * 1e3, "prefill_ms": t.prefill.as_secs_f64() * 1e3,
            "prefill_tokens_per_s": prefill_tps, "generated_tokens": generated,
            "decode_tokens_per_s": decode_tps, "threads": threads.get(), "finish_reason": finish,
            "drafted_tokens": m.drafted_tokens, "accepted_tokens": m.accepted_tokens, "steps": m.steps,
        });
        eprintln!("{stats}");
    }
    Ok(())
}
