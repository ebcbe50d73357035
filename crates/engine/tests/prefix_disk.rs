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

/// The tiny Gemma 3 (five layers with a window of 8 positions, one
/// global) in 4-token blocks: `swa_full` keeps every layer's rows in the
/// main pool; otherwise the windowed layers keep their window in a pool
/// of their own and a second tier (`DIR/window`) holds that pool's blocks.
fn gemma_engine(dir: Option<&std::path::Path>, swa_full: bool) -> Engine {
    let lm = hasten_model::testing::load_fixture(&Fixture::tiny_gemma3(GgmlType::Q8_0)).unwrap();
    let cfg = EngineConfig {
        block_size: 4,
        max_step_tokens: 16,
        max_running: 1,
        swa_full,
        prefix_cache: dir.is_some(),
        prefix_disk: dir.map(|d| DiskCacheConfig {
            dir: d.to_owned(),
            max_bytes: 1 << 30,
        }),
        ..EngineConfig::new(1024, Threads::ONE)
    };
    Engine::start(Arc::new(lm.model), Arc::new(lm.tokenizer), cfg).unwrap()
}

#[test]
fn a_windowed_cache_keeps_its_window_and_its_disk_tier_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let shared: Vec<u32> = (0..150).map(|i| 100 + i * 7).collect();
    let ask = |tail: u32| {
        let mut p = shared.clone();
        p.extend((0..21).map(|i| tail + i * 3));
        p
    };
    let (a, b) = (ask(9000), ask(12000));
    // The tokens of b computed with every position in every layer, no cache.
    let alone = gemma_engine(None, true);
    let (want, _) = run(&alone, &b);
    alone.shutdown();

    let e = gemma_engine(Some(dir.path()), false);
    let (_, cached) = run(&e, &a);
    assert_eq!(cached, 0);
    assert!(
        e.metrics().kv_windowed_blocks_total > 0,
        "the disk tier no longer makes every layer keep every position"
    );
    e.shutdown();
    let files = |d: &std::path::Path| std::fs::read_dir(d).map_or(0, |r| r.count());
    assert!(
        files(&dir.path().join("window")) > 0,
        "the windowed pool's blocks were saved"
    );

    // A new engine: b shares a's 150 tokens, 37 full blocks of 4 (148).
    let e = gemma_engine(Some(dir.path()), false);
    let (got, cached) = run(&e, &b);
    assert_eq!(cached, 148, "the whole shared prefix, from both tiers");
    assert_eq!(got, want);
    e.shutdown();

    // Without the windowed pool's files the main pool's blocks are no use:
    // no hit, the same tokens (and the request is not left waiting).
    std::fs::remove_dir_all(dir.path().join("window")).unwrap();
    let e = gemma_engine(Some(dir.path()), false);
    let (got, cached) = run(&e, &a);
    assert_eq!(cached, 0);
    let (again, cached) = run(&e, &b);
    assert_eq!(again, want);
    assert_eq!(cached, 148, "a's blocks, computed again, serve b");
    drop(got);
}
