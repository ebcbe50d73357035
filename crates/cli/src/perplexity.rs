//! `hasten perplexity`: a model's perplexity on a text file, computed as
//! `llama-perplexity` does (chunks of `--ctx-size` tokens, BOS first, the
//! second half of each chunk scored), e.g. to see what `--kv-type q8_0`
//! costs on a model and a text of one's own.

use anyhow::{Context, Result};
use hasten_model::loader::load_with;
use hasten_model::perplexity::perplexity;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a checkpoint directory or hf:OWNER/REPO (default: the
    /// built-in demo model).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The text to score.
    #[arg(long, short = 'f')]
    file: PathBuf,
    /// Tokens per chunk (llama.cpp's -c; default 512, or the model's
    /// context when smaller).
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    /// How the KV cache stores K and V: f16, q8_0 or q4_0.
    #[arg(long, default_value = "f16", value_parser = crate::parse_kv_type)]
    kv_type: hasten_kernels::attention::KvType,
    /// Worker threads; 0 uses every core.
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// Also print the result as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

pub fn main(a: Args) -> Result<()> {
    let threads = crate::threads(a.threads)?;
    let (path, _) = crate::models::resolve(a.model.as_deref())?;
    let lm = load_with(&path, None).context("loading the model")?;
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let tok = &lm.tokenizer;
    let tokens = tok.encode(&text, tok.add_bos, false)?;
    let ctx = a
        .ctx_size
        .unwrap_or(512.min(lm.model.config.context_length));
    let bos = tok.bos.filter(|_| tok.add_bos);
    eprintln!(
        "hasten perplexity: {} tokens of {}, chunks of {ctx} ({} of them), {} KV cache",
        tokens.len(),
        a.file.display(),
        tokens.len() / ctx.max(1),
        a.kv_type.name()
    );
    let t0 = std::time::Instant::now();
    let p = perplexity(
        &lm.model,
        &tokens,
        ctx,
        bos,
        a.kv_type,
        threads,
        |i, n, ppl| {
            eprint!("[{i}]{ppl:.4},");
            if i == n {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        },
    )?;
    println!(
        "PPL = {:.4} +/- {:.4} over {} tokens ({} chunks of {ctx}; {:.1} s)",
        p.ppl,
        p.ppl_err,
        p.scored,
        p.chunks,
        t0.elapsed().as_secs_f64()
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "ppl": p.ppl, "ppl_err": p.ppl_err, "nll": p.nll, "scored_tokens": p.scored,
                "chunks": p.chunks, "ctx": ctx, "kv_type": a.kv_type.name(),
            })
        );
    }
    Ok(())
}
