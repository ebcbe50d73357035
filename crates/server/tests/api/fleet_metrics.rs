//! The metrics an inference gateway's endpoint picker reads (the Gateway
//! API Inference Extension's model server protocol), scraped from a real
//! server under load: their names and types, and values that match the
//! engine's own counts at that moment (requests queued, in the batch, KV
//! blocks held over all blocks), under hasten's names and vLLM's.

use crate::common;

use common::live::Live;
use common::*;
use hasten_engine::EngineConfig;
use hasten_server::ServerConfig;
use serde_json::json;
use std::time::{Duration, Instant};

/// The value of the first sample whose line starts with `series` (a name,
/// or a name and the start of its labels).
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The `# TYPE` a page declares for `name`.
fn kind<'a>(page: &'a str, name: &str) -> &'a str {
    page.lines()
        .find_map(|l| {
            l.strip_prefix("# TYPE ")?
                .strip_prefix(name)?
                .strip_prefix(' ')
        })
        .unwrap_or_else(|| panic!("no TYPE for {name}"))
}

/// The labels of the first `name{...}` sample.
fn labels<'a>(page: &'a str, name: &str) -> &'a str {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('{')?.split_once('}'))
        .map(|(l, _)| l)
        .unwrap_or_else(|| panic!("no {name} sample"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_picker_sees_queue_batch_and_kv_use_as_they_are() {
    let ec = EngineConfig {
        max_running: 2,
        max_waiting: 16,
        ..engine_config()
    };
    let live = Live::start(ServerConfig::default(), ec, model_path()).await;
    let page = live.get("/metrics").await.text().await.unwrap();
    for (name, want) in [
        ("hasten_requests_waiting", "gauge"),
        ("hasten_requests_running", "gauge"),
        ("hasten_kv_cache_usage_ratio", "gauge"),
        ("hasten_cache_config_info", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:num_requests_running", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:gpu_cache_usage_perc", "gauge"),
        ("vllm:cache_config_info", "gauge"),
        ("vllm:prefix_cache_queries_total", "counter"),
        ("vllm:prefix_cache_hits_total", "counter"),
    ] {
        assert_eq!(kind(&page, name), want, "{name}");
    }
    let total = metric(&page, "hasten_kv_blocks_total");
    let info = labels(&page, "hasten_cache_config_info");
    assert!(info.contains("block_size=\"16\""), "{info}");
    assert!(
        info.contains(&format!("num_gpu_blocks=\"{total}\"")),
        "{info}"
    );
    assert!(info.contains("cache_dtype=\"f16\""), "{info}");
    let vinfo = labels(&page, "vllm:cache_config_info");
    assert!(
        vinfo.starts_with("model_name=\"tiny\"") && vinfo.ends_with(info),
        "{vinfo}"
    );
    assert_eq!(metric(&page, "hasten_kv_cache_usage_ratio"), 0.0);

    // Six long streams against two batch slots: two run, four wait.
    let req = json!({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true,
        "stream": true});
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let (http, url, req) = (live.http.clone(), live.url("/v1/completions"), req.clone());
            tokio::spawn(async move {
                let r = http.post(&url).json(&req).send().await.unwrap();
                assert_eq!(r.status(), 200);
                r.text().await.unwrap()
            })
        })
        .collect();
    let t0 = Instant::now();
    let page = loop {
        let page = live.get("/metrics").await.text().await.unwrap();
        if metric(&page, "hasten_requests_running") == 2.0
            && metric(&page, "hasten_requests_waiting") == 4.0
        {
            break page;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{page}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The engine agrees, and so do vLLM's names on the same page.
    let b = live.st.backend().unwrap();
    assert_eq!((b.engine.waiting(), b.engine.running()), (4, 2));
    let used = metric(&page, "hasten_kv_blocks_used");
    let usage = metric(&page, "hasten_kv_cache_usage_ratio");
    assert!(used > 0.0, "the running streams hold blocks");
    assert!(
        (usage - used / total).abs() < 1e-12 && usage > 0.0 && usage <= 1.0,
        "{usage} {used} {total}"
    );
    let tiny = "{model_name=\"tiny\"}";
    for (vllm, ours) in [
        ("vllm:num_requests_waiting", 4.0),
        ("vllm:num_requests_running", 2.0),
        ("vllm:kv_cache_usage_perc", usage),
        ("vllm:gpu_cache_usage_perc", usage),
        (
            "vllm:prefix_cache_queries_total",
            metric(&page, "hasten_prompt_tokens_total"),
        ),
        (
            "vllm:prefix_cache_hits_total",
            metric(&page, "hasten_prefix_cache_hit_tokens_total"),
        ),
    ] {
        assert_eq!(
            sample(&page, &format!("{vllm}{tiny}")),
            Some(ours),
            "{vllm}"
        );
    }
    assert!(metric(&page, "hasten_prompt_tokens_total") > 0.0);
    for c in clients {
        c.abort();
    }
    live.idle_kv(0).await;
    let page = live.get("/metrics").await.text().await.unwrap();
    assert_eq!(metric(&page, "hasten_kv_cache_usage_ratio"), 0.0);
    assert_eq!(metric(&page, "hasten_requests_waiting"), 0.0);
}

#[tokio::test]
async fn vllm_names_can_be_turned_off() {
    let cfg = ServerConfig {
        vllm_metrics: false,
        ..ServerConfig::default()
    };
    let live = Live::start(cfg, engine_config(), model_path()).await;
    let page = live.get("/metrics").await.text().await.unwrap();
    assert!(!page.contains("vllm:"), "{page}");
    assert_eq!(metric(&page, "hasten_kv_cache_usage_ratio"), 0.0);
    assert!(page.contains("hasten_cache_config_info{block_size=\"16\""));
}
