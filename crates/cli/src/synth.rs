//! `hasten synth`: write a model of a real architecture's shape with seeded
//! random weights, so benchmarks and tests need no download.

use anyhow::{anyhow, bail, Context, Result};
use hasten_kernels::GgmlType;
use hasten_model::config::Arch;
use hasten_model::gguf::GgufFile;
use hasten_model::testing::{Fixture, RopeScalingFx};
use std::path::PathBuf;

/// The default vocabulary, built into the binary so `hasten synth` works in
/// any directory: llama.cpp's `ggml-vocab-llama-spm.gguf` (the 32000-token
/// Llama 2 / TinyLlama SentencePiece vocabulary, MIT; `testdata/`).
const LLAMA_SPM_VOCAB: &[u8] =
    include_bytes!("../../../testdata/tokenizer/ggml-vocab-llama-spm.gguf");

#[derive(clap::Args)]
pub struct Args {
    /// tiny (2 layers, dim 256), 135m (SmolLM2-135M shape), 1b
    /// (TinyLlama-1.1B shape) or moe (12 of Qwen3-30B-A3B's layers with 32
    /// experts, 8 active: ~1.2 GB as Q4_0; --arch qwen3moe only).
    #[arg(long, default_value = "tiny")]
    shape: String,
    /// Weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k,
    /// q4_k, q5_k, q6_k, iq4_nl, iq4_xs.
    #[arg(long = "type", default_value = "q8_0")]
    ty: String,
    /// Architecture: llama, qwen2 (QKV biases, NeoX RoPE), qwen3 (Q/K
    /// norms, NeoX RoPE; the tiny shape gets Qwen3's 128-wide heads) or
    /// granite (Llama with embedding, residual, attention and logit
    /// multipliers) or smollm3 (no RoPE on every 4th layer; the tiny shape
    /// gets 4 layers) or qwen3moe (Qwen3 with 8 experts, 2 active, in the
    /// tiny shape; the moe shape) or mixtral (Llama with 8 experts, 2
    /// active; tiny shape only) or gemma2 / gemma3 (GeGLU, sandwich norms,
    /// sliding-window layers; Gemma 2's soft caps, Gemma 3's Q/K norms) or
    /// phi3 (fused QKV and gate-up, partial RoPE, LongRoPE factors) or
    /// olmo2 (norms after each block, Q/K norms over all heads).
    #[arg(long, default_value = "llama")]
    arch: String,
    /// Same as --arch qwen2.
    #[arg(long, conflicts_with = "arch")]
    qwen2: bool,
    /// Width of each attention head (default: the shape's).
    #[arg(long)]
    head_dim: Option<usize>,
    /// Tie the output matrix to the token embeddings.
    #[arg(long)]
    tied: bool,
    /// Context length the model declares (default: the shape's).
    #[arg(long)]
    context: Option<usize>,
    /// Scale RoPE: `yarn:FACTOR` or `llama3:FACTOR` (the original context
    /// is the declared one over FACTOR), as long-context models do, e.g.
    /// `--context 32768 --rope-scaling yarn:4`.
    #[arg(long, value_name = "KIND:FACTOR")]
    rope_scaling: Option<String>,
    /// Plant a pattern: each token's successor is a fixed one in a cycle of
    /// LEN tokens, pulled toward with STRENGTH (default 2.0: on the 135m
    /// shape a clean loop; 1.0 strays now and then, 0.5 mostly), so the
    /// greedy continuation repeats itself every LEN tokens, the text
    /// speculative decoding can draft (`LEN` or `LEN,STRENGTH`).
    #[arg(long, value_name = "LEN[,STRENGTH]")]
    pattern: Option<String>,
    /// Seed of the random weights (the same seed writes the same file;
    /// default: the fixture's, 42, or 43 for the tiny mixtral).
    #[arg(long)]
    seed: Option<u64>,
    /// Vocab-only GGUF whose tokenizer the model carries (default: the
    /// built-in 32000-token llama-spm vocabulary).
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// Where to write the model (`.gguf`), or a directory for `--safetensors`.
    #[arg(short, long)]
    output: PathBuf,
    /// Write a Hugging Face checkpoint (config.json + f32 safetensors) instead.
    #[arg(long)]
    safetensors: bool,
}

pub fn main(a: Args) -> Result<()> {
    let ty = GgmlType::from_name(&a.ty).ok_or_else(|| anyhow!("unknown type {:?}", a.ty))?;
    let arch = if a.qwen2 {
        Arch::Qwen2
    } else {
        Arch::from_name(&a.arch)
            .ok_or_else(|| anyhow!("unknown --arch {:?} ({})", a.arch, Arch::names()))?
    };
    let tiny = Fixture::tiny_arch(arch, ty);
    let mut fx = match a.shape.as_str() {
        "tiny" => tiny,
        "moe" if arch == Arch::Qwen3Moe => Fixture::shape("moe", ty).expect("a known shape"),
        other if other == "moe" || tiny.moe.is_some() => {
            bail!("--shape {other} goes with --arch qwen3moe only, qwen3moe with tiny or moe, mixtral with tiny")
        }
        other => Fixture::shape(other, ty)
            .ok_or_else(|| anyhow!("unknown shape {other:?} (tiny, 135m, 1b, moe)"))?
            .with_family(&tiny),
    };
    if let Some(hd) = a.head_dim {
        anyhow::ensure!(
            hd >= 2 && hd % 2 == 0,
            "--head-dim must be even and at least 2"
        );
        fx.head_dim = hd;
    }
    fx.tied |= a.tied;
    if let Some(seed) = a.seed {
        fx.seed = seed;
    }
    if let Some(p) = &a.pattern {
        let (len, strength) = p.split_once(',').unwrap_or((p, "2.0"));
        let len: usize = len
            .trim()
            .parse()
            .context("--pattern LEN must be a number")?;
        let strength: f32 = strength
            .trim()
            .parse()
            .context("--pattern STRENGTH must be a number")?;
        anyhow::ensure!(
            len >= 1 && strength > 0.0,
            "--pattern needs LEN >= 1 and STRENGTH > 0"
        );
        anyhow::ensure!(!fx.tied, "--pattern needs an untied output matrix");
        fx.cycle = Some(len);
        fx.bigram = strength;
    }
    if let Some(c) = a.context {
        anyhow::ensure!(c >= 1, "--context must be at least 1");
        fx.context_length = c;
    }
    if let Some(r) = &a.rope_scaling {
        fx.rope_scaling = Some(RopeScalingFx::parse(r).ok_or_else(|| {
            anyhow!("--rope-scaling {r:?}: expected yarn:FACTOR or llama3:FACTOR with FACTOR > 1")
        })?);
    }
    if a.safetensors {
        fx.write_safetensors(&a.output)?;
    } else {
        let vocab = match &a.vocab {
            Some(p) => {
                GgufFile::open(p).with_context(|| format!("reading --vocab {}", p.display()))?
            }
            None => {
                GgufFile::from_bytes("built-in llama-spm vocabulary", LLAMA_SPM_VOCAB.to_vec())?
            }
        };
        // The embedding and output rows follow the vocabulary's size.
        fx.vocab_size =
            hasten_model::tokenizer::Tokenizer::from_gguf(&vocab.header, &vocab.name)?.vocab_size();
        fx.write_gguf_with(&vocab, &a.output)?;
    }
    eprintln!("wrote {}", a.output.display());
    Ok(())
}
