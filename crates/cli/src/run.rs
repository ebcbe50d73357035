//! `hasten run`: load a model, generate from one prompt, stream the text to
//! stdout, and report load time, TTFT and throughput on stderr.

use anyhow::{bail, Context, Result};
use hasten_model::chat::{ChatTemplate, Message, FALLBACK_TEMPLATE};
use hasten_model::detok::{Detokenizer, StopMatcher};
use hasten_model::loader::load;
use hasten_model::sampler::{Sampler, SamplingParams};
use hasten_model::session::Session;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face checkpoint directory, or
    /// hf:OWNER/REPO[:QUANT|:FILE] from the Hub (default: the small demo
    /// model built into hasten).
    #[arg(long)]
    model: Option<PathBuf>,
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
    #[arg(long, short = 'n', default_value_t = 128)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
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
    /// Also print the statistics as one JSON object on the last stderr line.
    #[arg(long)]
    json_stats: bool,
    /// After generating, probe this machine's read bandwidth (about a
    /// second) and print the decode's as a fraction of it, with the TPOT
    /// that bandwidth bound predicts (as `hasten estimate --measure` does).
    #[arg(long)]
    vs_estimate: bool,
}

pub fn main(a: Args) -> Result<()> {
    let threads = crate::threads(a.threads)?;
    let t_load = Instant::now();
    let (path, _) = crate::models::resolve(a.model.as_deref())?;
    let lm = load(&path).with_context(|| format!("loading {}", path.display()))?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let tok = &lm.tokenizer;
    let params = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repeat_penalty,
        frequency_penalty: a.frequency_penalty,
        presence_penalty: a.presence_penalty,
        seed: a.seed,
        ..SamplingParams::default()
    };
    params.validate(lm.model.config.vocab_size)?;
    let prompt = if let Some(n) = a.random_prompt {
        random_tokens(n, tok.vocab_size().min(lm.model.config.vocab_size), a.seed)
    } else if a.chat {
        let fallback;
        let template = match &lm.template {
            Some(t) => t,
            None => {
                fallback = ChatTemplate::new(FALLBACK_TEMPLATE, "", "")?;
                &fallback
            }
        };
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(Message::new("system", s));
        }
        msgs.push(Message::new("user", &a.prompt));
        let text = template.render(&msgs, true)?;
        let has_bos = !template.bos_token.is_empty() && text.starts_with(&template.bos_token);
        tok.encode(&text, tok.add_bos && !has_bos, true)?
    } else {
        tok.encode(&a.prompt, tok.add_bos, false)?
    };
    let ctx = lm.model.config.context_length;
    if prompt.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    if prompt.len() >= ctx {
        bail!(
            "the prompt has {} tokens but the model's context holds {ctx}",
            prompt.len()
        );
    }
    let max_new = a.max_tokens.min(ctx - prompt.len());
    let mut session = Session::new(&lm.model, prompt.len() + max_new, threads);
    let mut sampler = Sampler::new(params);
    let mut detok = Detokenizer::new();
    let mut stops = StopMatcher::new(&a.stop);
    let mut history = prompt.clone();
    let mut out = std::io::stdout().lock();

    let t_start = Instant::now();
    let mut logits = session.feed(&prompt)?;
    let prefill_s = t_start.elapsed().as_secs_f64();
    let mut ttft_s = None;
    let mut generated = 0usize;
    let mut finish = "length";
    let mut stop_string = false;
    let t_decode = Instant::now();
    while generated < max_new {
        let next = sampler.sample(&mut logits, &history);
        generated += 1;
        ttft_s.get_or_insert_with(|| t_start.elapsed().as_secs_f64());
        if tok.is_eos(next) && !a.ignore_eos {
            finish = "stop";
            break;
        }
        history.push(next);
        let shown = stops.push(&detok.push(tok.token_bytes(next)));
        out.write_all(shown.text.as_bytes())?;
        out.flush()?;
        if shown.stopped {
            finish = "stop";
            stop_string = true;
            break;
        }
        if generated == max_new {
            break;
        }
        logits = session.feed(&[next])?;
    }
    // Only a stop string ends the text where it starts; any other end
    // (length, end of sequence) shows what was held back.
    if !stop_string {
        let rest = detok.flush();
        let tail = stops.push(&rest);
        out.write_all(tail.text.as_bytes())?;
        if !tail.stopped {
            out.write_all(stops.finish().as_bytes())?;
        }
    }
    writeln!(out)?;
    let decode_s = t_decode.elapsed().as_secs_f64();
    // The first sampled token comes from the prefill logits; the rest each cost a decode step.
    let decode_tokens = generated.saturating_sub(1);
    let prefill_tps = prompt.len() as f64 / prefill_s.max(1e-9);
    let decode_tps = if decode_tokens > 0 {
        decode_tokens as f64 / decode_s.max(1e-9)
    } else {
        0.0
    };
    let ttft_ms = ttft_s.unwrap_or(prefill_s) * 1e3;
    eprintln!(
        "load {load_ms:.0} ms | prompt {} tokens, TTFT {ttft_ms:.1} ms, prefill {prefill_tps:.1} tok/s | {generated} tokens generated, decode {decode_tps:.1} tok/s | {} threads | finish {finish}",
        prompt.len(),
        threads.get()
    );
    // Bytes a decode step reads: every weight matrix once (the packed copy
    // replaces the file's bytes, same size) plus K and V of the average
    // context during decode.
    let avg_ctx = prompt.len() + generated / 2;
    let decode_bytes = lm.model.weight_bytes() + avg_ctx * lm.model.config.kv_bytes_per_token();
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
            "load_ms": load_ms, "prompt_tokens": prompt.len(), "ttft_ms": ttft_ms,
            "prefill_tokens_per_s": prefill_tps, "generated_tokens": generated,
            "decode_tokens_per_s": decode_tps, "threads": threads.get(), "finish_reason": finish,
        });
        eprintln!("{stats}");
    }
    Ok(())
}

/// `n` token ids drawn from a seeded xorshift generator, skipping the
/// first 3 ids (special tokens in most vocabularies).
fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
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
