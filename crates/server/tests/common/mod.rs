//! Shared by the server's tests: the tiny synthetic model (written once per
//! test binary) and app states around it.
#![allow(dead_code)]

pub mod live;

use hasten_engine::{Engine, EngineConfig};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::loader;
use hasten_model::testing::Fixture;
use hasten_server::{AppState, Backend, ServerConfig, Shared};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub fn testdata() -> PathBuf {
    hasten_model::testing::testdata_dir()
}

/// The tiny fixture (dim 256, 2 layers, llama-spm vocabulary, context 512).
pub fn model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| write(Fixture::tiny(GgmlType::Q8_0)))
        .clone()
}

/// The tiny fixture with a 4096-token context: a prompt of a few thousand
/// tokens takes about a second to prefill (attention), long enough to
/// leave in the middle of it.
pub fn long_model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        write(Fixture {
            context_length: 4096,
            ..Fixture::tiny(GgmlType::Q8_0)
        })
    })
    .clone()
}

fn write(f: Fixture) -> PathBuf {
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        f.write_gguf(
            &testdata().join("tokenizer/ggml-vocab-llama-spm.gguf"),
            &path,
        )
        .unwrap();
        // Loaded models map the file: keep it for the whole run.
        std::mem::forget(dir);
        path
    }
}

pub fn engine_config() -> EngineConfig {
    EngineConfig {
        max_step_tokens: 64,
        max_running: 8,
        ..EngineConfig::new(2048, Threads::ONE)
    }
}

pub fn backend(ec: EngineConfig) -> Backend {
    backend_of(&model_path(), ec)
}

pub fn backend_of(path: &std::path::Path, ec: EngineConfig) -> Backend {
    let lm = loader::load(path).unwrap();
    let template = hasten_model::prompt::template_or_fallback(lm.template).unwrap();
    let tok = Arc::new(lm.tokenizer);
    let engine = Engine::start(Arc::new(lm.model), tok.clone(), ec).unwrap();
    Backend::new(engine, tok, template, "tiny".into())
}

pub fn state_with(cfg: ServerConfig, ec: EngineConfig) -> AppState {
    let st = Shared::new(cfg);
    st.set_backend(backend(ec));
    st
}

pub fn state() -> AppState {
    state_with(ServerConfig::default(), engine_config())
}

/// A sample's value on a `/metrics` page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}
