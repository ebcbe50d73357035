//! hasten-model: from model files to tokens.
//!
//! Owns the file formats (GGUF, safetensors + config.json), the resolved
//! model configuration, the Llama-family forward pass (dense or
//! mixture-of-experts FFNs) over a batch of
//! sequences and a paged KV cache, the tokenizer and incremental
//! detokenizer, chat templates, and sampling. Nothing here does network I/O
//! or async; the only `unsafe` is the memory map in [`mmap`].

pub mod arch;
pub mod chat;
pub mod config;
pub mod detok;
pub mod embed;
pub mod error;
pub mod fuzz;
pub mod gguf;
pub mod hf_config;
pub mod kv;
pub mod llama;
pub mod loader;
pub mod mmap;
pub mod moe;
pub mod naming;
pub mod output;
pub mod perplexity;
pub mod prompt;
pub mod safetensors;
pub mod sampler;
pub mod session;
pub mod testing;
pub mod tokenizer;
pub mod weights;

pub use error::{Error, Result};
