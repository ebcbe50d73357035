//! The prefix cache's disk tier inside one engine's life: blocks the pool
//! evicts are written to disk and read back for a later prompt with the
//! same prefix, which then gives the same tokens as computing it; and
//! blocks cached at shutdown are found by the next engine.

use hasten_engine::disk::DiskCacheConfig;
use hasten_engine::{Engine, EngineConfig, RequestSpec};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::testing::Fixture;
use std::sync::Arc;

fn engine(kv_tokens: usize, dir: &std::path::Path) -> Engine {
    let lm = hasten_model::testing::load_fixture(&Fixture::tiny(GgmlType::Q8_0)).unwrap();
    let cfg = EngineConfig {
        max_step_tokens: 64,
        max_running: 1,
        prefix_disk: Some(DiskCacheConfig {
            dir: dir.to_owned(),
            max_bytes: 1 << 30,
        }),
        ..EngineConfig::new(kv_tokens, Threads::ONE)
    };
    Engine::start(Arc::new(lm.model), Arc::new(lm.tokenizer), cfg).unwrap()
}

/// Greedy tokens of `prompt`, and how many prompt tokens came from the cache.
fn run(e: &Engine, prompt: &[u32]) -> (Vec<u32>, usize) {
    let spec = RequestSpec {
        ignore_eos: true,
        ..RequestSpec::greedy(prompt.to_vec(), 4)
    };
    let (toks, fin) = e.submit(e.validate(spec).unwrap()).unwrap().wait().unwrap();
    (
        toks.iter().map(|t| t.id).collect(),
        fin.cached_prompt_tokens,
    )
}

#[test]
fn evicted_blocks_come_back_from_disk_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<u32> = (0..80).map(|i| 100 + i * 7).collect();
    let b: Vec<u32> = (0..80).map(|i| 9000 + i * 3).collect();
    // Room for one 84-token sequence (6 blocks of 16): each prompt evicts
    // the other's cached blocks.
    let e = engine(96, dir.path());
    let (want, cached) = run(&e, &a);
    assert_eq!(cached, 0);
    let (_, cached) = run(&e, &b);
    assert_eq!(cached, 0);
    let (got, cached) = run(&e, &a);
    assert_eq!(
        cached, 64,
        "a's four full prompt blocks, read back from disk"
    );
    assert_eq!(got, want);
    let m = e.metrics().prefix_disk.unwrap();
    assert!(m.written >= 4 && m.loaded == 4, "{m:?}");
    e.shutdown();
    // b's blocks were cached at shutdown: the next engine finds them.
    let e = engine(96, dir.path());
    let (_, cached) = run(&e, &b);
    assert_eq!(cached, 64);
}
