//! The `hasten` binary: clap subcommands that wire the crates together.
//! Errors become `anyhow` reports here and nowhere else.

mod bench;
mod chat;
mod complete;
mod estimate;
mod models;
mod perplexity;
mod remote;
mod run;
mod serve;
mod synth;
mod tokenize;

use clap::{Parser, Subcommand};

/// jemalloc with background threads hands freed pages back to the system
/// (about 10 s after a burst; `_RJEM_MALLOC_CONF=dirty_decay_ms:N` tunes
/// it), where glibc's allocator kept what a burst of large prompts took and
/// mimalloc kept more (BENCHMARKS.md, "Memory after a burst").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "hasten",
    version,
    about = "A latency-first LLM inference stack"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt, streaming it to stdout.
    Run(run::Args),
    /// Serve a model over an OpenAI-compatible HTTP API.
    Serve(serve::Args),
    /// Print the token ids of a text.
    Tokenize(tokenize::Args),
    /// Write a synthetic model with random weights (benchmarks, tests).
    Synth(synth::Args),
    /// Chat with an OpenAI-compatible server (default: a local `hasten serve`).
    Chat(chat::Args),
    /// One request to an OpenAI-compatible server, from arguments or stdin.
    Complete(complete::Args),
    /// Load an OpenAI-compatible server and measure TTFT, TPOT, ITL, E2E,
    /// throughput and goodput (`bench compare A.json B.json` for ratios).
    Bench(bench::Args),
    /// Explain latency from first principles: weight and KV bytes,
    /// bandwidth and compute rooflines (presets; see --list).
    Estimate(estimate::Args),
    /// A model's perplexity on a text file (as llama-perplexity computes it).
    Perplexity(perplexity::Args),
}

/// `println!` panics when stdout is a closed pipe (`hasten estimate | head`);
/// the reader has all it wanted, so end quietly as `cat` would instead of
/// printing a panic. Every other panic keeps the default report.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Serve(a) => serve::main(a),
        Command::Tokenize(a) => tokenize::main(a),
        Command::Perplexity(a) => perplexity::main(a),
        Command::Synth(a) => synth::main(a),
        Command::Chat(a) => chat::main(a),
        Command::Complete(a) => complete::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Estimate(a) => estimate::main(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Validates a `--threads` value (0 means one per core) and sizes the
/// kernel pool to it (never to all cores when fewer were asked for).
/// `--kv-type`: f16, q8_0 or q4_0.
pub(crate) fn parse_kv_type(s: &str) -> Result<hasten_kernels::attention::KvType, String> {
    hasten_kernels::attention::KvType::parse(s)
        .ok_or_else(|| format!("unknown KV type {s:?}: use f16, q8_0 or q4_0"))
}

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{s:?}: use a number of bytes with K, M, G or T")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s:?}: use a number of bytes with K, M, G or T"))
}

pub(crate) fn threads(n: usize) -> anyhow::Result<hasten_kernels::threads::Threads> {
    use hasten_kernels::threads::{init_pool, Threads};
    let t = if n == 0 {
        Threads::available()
    } else {
        Threads::new(n)?
    };
    init_pool(t);
    Ok(t)
}

/// Speculative decoding flags of `hasten serve` and `hasten run`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Speculation {
    /// Speculative decoding: drafted tokens are verified in the same pass
    /// as the token before them, and the output is the same token for
    /// token. `auto` drafts with --draft-model if given, else by prompt
    /// lookup (`ngram`: from the prompt and the text so far), and each
    /// sequence backs off where its drafts do not pay for their share of
    /// the step; `draft` needs --draft-model; `off` never drafts.
    #[arg(long, value_enum, default_value = "auto")]
    speculate: SpecMode,
    /// Drafted tokens verified per step at most.
    #[arg(long, default_value_t = 8)]
    max_draft: usize,
    /// A small model with the same vocabulary that drafts (GGUF file,
    /// checkpoint directory or hf: reference); its KV rows share the
    /// KV cache's blocks.
    #[arg(long, value_name = "MODEL")]
    draft_model: Option<std::path::PathBuf>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum SpecMode {
    Auto,
    Off,
    Ngram,
    Draft,
}

impl Speculation {
    /// The engine's `max_draft` (0: off).
    pub(crate) fn max_draft(&self) -> usize {
        match self.speculate {
            SpecMode::Off => 0,
            _ => self.max_draft,
        }
    }

    /// The draft model to load, if speculation drafts with one; an error
    /// for flags that contradict each other.
    pub(crate) fn draft_model(&self) -> anyhow::Result<Option<&std::path::Path>> {
        match (self.speculate, &self.draft_model) {
            (SpecMode::Draft, None) => anyhow::bail!("--speculate draft needs --draft-model FILE"),
            (SpecMode::Off | SpecMode::Ngram, Some(_)) => {
                anyhow::bail!("--draft-model drafts only with --speculate draft or auto")
            }
            (_, Some(_)) if self.max_draft == 0 => {
                anyhow::bail!("--draft-model needs --max-draft of at least 1")
            }
            (SpecMode::Auto | SpecMode::Draft, Some(p)) => Ok(Some(p)),
            _ => Ok(None),
        }
    }

    /// Loads the draft model for `model` (`hasten run` and `hasten serve`).
    pub(crate) fn load_draft(
        &self,
        model: &hasten_model::llama::Model,
        tok: &hasten_model::tokenizer::Tokenizer,
    ) -> anyhow::Result<Option<std::sync::Arc<hasten_model::llama::Model>>> {
        use anyhow::Context;
        let Some(p) = self.draft_model()? else {
            return Ok(None);
        };
        let (path, _) = crate::models::resolve(Some(p))?;
        let d = hasten_engine::draft::load_draft_model(&path, model, tok)
            .with_context(|| format!("loading --draft-model {}", path.display()))?;
        Ok(Some(d))
    }
}

/// `--chat-template-kwargs JSON` of `hasten run --chat` and `hasten chat`:
/// a JSON object of template variables (a request's
/// `chat_template_kwargs`).
pub(crate) fn template_kwargs(
    json: &str,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    use anyhow::Context;
    match serde_json::from_str(json).context("--chat-template-kwargs is not JSON")? {
        serde_json::Value::Object(m) => Ok(m),
        _ => anyhow::bail!("--chat-template-kwargs must be a JSON object"),
    }
}

#[cfg(test)]
mod help_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every flag of every subcommand says what it does in `--help`.
    #[test]
    fn every_flag_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} --{}", arg.get_long().unwrap_or(id)));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "hasten", &mut missing);
        assert!(
            missing.is_empty(),
            "flags without help:\n{}",
            missing.join("\n")
        );
    }
}
