//! `/metrics`: the engine's counters, gauges and histograms and the
//! server's own counters in the Prometheus text format (version 0.0.4).

use crate::Shared;
use hasten_engine::metrics::{Histogram, Metrics};
use std::fmt::Write;
use std::sync::atomic::Ordering;

fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
    );
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let mut cum = 0;
    for (i, c) in h.counts.iter().enumerate() {
        cum += c;
        match h.bounds.get(i) {
            Some(b) => {
                let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
            }
            None => {
                let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cum}");
            }
        }
    }
    let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
}

fn engine(out: &mut String, m: &Metrics) {
    let counters = [
        (
            "hasten_requests_admitted_total",
            "Requests the engine accepted.",
            m.requests_admitted,
        ),
        (
            "hasten_requests_finished_total",
            "Requests that ran to their end.",
            m.requests_finished,
        ),
        (
            "hasten_requests_cancelled_total",
            "Requests cancelled because their client left (KV blocks freed).",
            m.requests_cancelled,
        ),
        (
            "hasten_requests_rejected_total",
            "Requests refused as overload (429).",
            m.requests_rejected,
        ),
        (
            "hasten_preemptions_total",
            "Sequences preempted for KV space and recomputed.",
            m.preemptions,
        ),
        (
            "hasten_prompt_tokens_total",
            "Prompt tokens received.",
            m.prompt_tokens,
        ),
        (
            "hasten_prefix_cache_hit_tokens_total",
            "Prompt tokens whose KV came from the prefix cache.",
            m.prefix_cache_hit_tokens,
        ),
        (
            "hasten_generation_tokens_total",
            "Output tokens generated.",
            m.generated_tokens,
        ),
        (
            "hasten_spec_drafted_tokens_total",
            "Speculative decoding: tokens drafted and verified.",
            m.drafted_tokens,
        ),
        (
            "hasten_spec_accepted_tokens_total",
            "Speculative decoding: drafted tokens the model agreed with (acceptance rate: accepted / drafted).",
            m.accepted_tokens,
        ),
        (
            "hasten_engine_steps_total",
            "Engine steps (forward passes).",
            m.steps,
        ),
        (
            "hasten_decode_sequence_steps_total",
            "Decoding sequences summed over steps (each step gives a sequence one token plus its accepted drafts).",
            m.decode_seq_steps,
        ),
    ];
    for (name, help, v) in counters {
        scalar(out, name, "counter", help, v as f64);
    }
    let gauges = [
        (
            "hasten_requests_waiting",
            "Requests waiting to be admitted.",
            m.waiting,
        ),
        (
            "hasten_requests_running",
            "Sequences in the running batch.",
            m.running,
        ),
        (
            "hasten_kv_blocks_total",
            "KV cache blocks.",
            m.kv_blocks_total,
        ),
        (
            "hasten_kv_bytes_per_token",
            "KV cache bytes per token of context (K and V of every layer, in the cache's --kv-type; without the sliding-window layers when they keep only their window).",
            m.kv_bytes_per_token,
        ),
        (
            "hasten_kv_capacity_tokens",
            "Tokens the KV cache holds.",
            m.kv_capacity_tokens,
        ),
        (
            "hasten_kv_blocks_used",
            "KV blocks held by sequences.",
            m.kv_blocks_used,
        ),
        (
            "hasten_kv_blocks_free",
            "KV blocks free (including idle cached ones).",
            m.kv_blocks_free,
        ),
        (
            "hasten_kv_blocks_cached",
            "Idle KV blocks kept for prefix reuse.",
            m.kv_blocks_cached,
        ),
        (
            "hasten_kv_windowed_blocks_total",
            "Blocks of the sliding-window layers' own KV pool (0 without one).",
            m.kv_windowed_blocks_total,
        ),
        (
            "hasten_kv_windowed_blocks_used",
            "Blocks of the sliding-window layers' pool held by sequences.",
            m.kv_windowed_blocks_used,
        ),
        (
            "hasten_step_token_budget",
            "Tokens per step the ITL target allows.",
            m.step_token_budget,
        ),
    ];
    for (name, help, v) in gauges {
        scalar(out, name, "gauge", help, v as f64);
    }
    if let Some(d) = m.prefix_disk {
        for (name, kind, help, v) in [
            (
                "hasten_prefix_disk_files",
                "gauge",
                "KV blocks the prefix cache keeps on disk (--prefix-cache-dir).",
                d.files as u64,
            ),
            (
                "hasten_prefix_disk_bytes",
                "gauge",
                "Bytes of the prefix cache's block files.",
                d.bytes,
            ),
            (
                "hasten_prefix_disk_written_blocks_total",
                "counter",
                "KV blocks written to disk (evicted from memory, or at shutdown).",
                d.written,
            ),
            (
                "hasten_prefix_disk_loaded_blocks_total",
                "counter",
                "KV blocks read back from disk for a prompt.",
                d.loaded,
            ),
            (
                "hasten_prefix_disk_rejected_files_total",
                "counter",
                "Block files skipped: another model's, truncated or altered.",
                d.rejected,
            ),
        ] {
            scalar(out, name, kind, help, v as f64);
        }
    }
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    scalar(
        out,
        "hasten_spec_acceptance_rate",
        "gauge",
        "Speculative decoding since start: accepted / drafted tokens (0 before any draft).",
        ratio(m.accepted_tokens, m.drafted_tokens),
    );
    scalar(
        out,
        "hasten_spec_tokens_per_step",
        "gauge",
        "Output tokens a decoding sequence gets per step since start (1 without speculation; 0 before any decode).",
        ratio(m.decode_seq_steps + m.accepted_tokens, m.decode_seq_steps),
    );
    let hists = [
        (
            "hasten_queue_time_seconds",
            "Arrival to first prompt token in a forward pass.",
            &m.queue_time,
        ),
        (
            "hasten_time_to_first_token_seconds",
            "Arrival to first output token (server side).",
            &m.ttft,
        ),
        (
            "hasten_inter_token_latency_seconds",
            "Gap between consecutive output tokens.",
            &m.itl,
        ),
        (
            "hasten_e2e_request_latency_seconds",
            "Arrival to last token.",
            &m.e2e,
        ),
        (
            "hasten_step_time_seconds",
            "Duration of one engine step.",
            &m.step_time,
        ),
        (
            "hasten_batch_size",
            "Sequences per engine step.",
            &m.batch_size,
        ),
        (
            "hasten_batch_tokens",
            "Tokens per engine step.",
            &m.batch_tokens,
        ),
    ];
    for (name, help, h) in hists {
        histogram(out, name, help, h);
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What the Gateway API Inference Extension's endpoint picker reads (its
/// model server protocol): queued and running requests (`m`'s, read live
/// by the caller), KV-cache use as a 0-1 fraction of blocks held by
/// sequences (idle prefix-cache blocks are free: they are evicted on
/// demand), and the cache geometry as an info metric for the prefix-aware
/// scorer. `deploy/` configures the picker for these names. With
/// `vllm_names` the same values also appear under vLLM's names, which the
/// picker's default engine config and the vLLM production-stack router
/// read, so a hasten pod works behind them unconfigured.
fn fleet(out: &mut String, b: &crate::Backend, m: &Metrics, vllm_names: bool) {
    let usage = if m.kv_blocks_total == 0 {
        0.0
    } else {
        m.kv_blocks_used as f64 / m.kv_blocks_total as f64
    };
    scalar(
        out,
        "hasten_kv_cache_usage_ratio",
        "gauge",
        "KV cache blocks held by sequences over all blocks (0 to 1; idle prefix-cache blocks count as free).",
        usage,
    );
    let cfg = b.engine.config();
    let info = format!(
        "block_size=\"{}\",num_gpu_blocks=\"{}\",cache_dtype=\"{}\"",
        cfg.block_size,
        m.kv_blocks_total,
        cfg.kv_type.name()
    );
    let _ = writeln!(
        out,
        "# HELP hasten_cache_config_info KV cache geometry (labels; value 1): block_size in tokens, num_gpu_blocks (blocks in the pool; CPU memory here), cache_dtype.\n# TYPE hasten_cache_config_info gauge\nhasten_cache_config_info{{{info}}} 1"
    );
    if !vllm_names {
        return;
    }
    let model = format!("model_name=\"{}\"", label(&b.model_id));
    let series: [(&str, &str, &str, f64); 7] = [
        ("vllm:num_requests_waiting", "gauge", "hasten_requests_waiting under vLLM's name.", m.waiting as f64),
        ("vllm:num_requests_running", "gauge", "hasten_requests_running under vLLM's name.", m.running as f64),
        ("vllm:kv_cache_usage_perc", "gauge", "hasten_kv_cache_usage_ratio under vLLM's name (0 to 1).", usage),
        (
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "hasten_kv_cache_usage_ratio under vLLM's older name, which older endpoint pickers read.",
            usage,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache (hasten_prompt_tokens_total).",
            m.prompt_tokens as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache (hasten_prefix_cache_hit_tokens_total).",
            m.prefix_cache_hit_tokens as f64,
        ),
        ("vllm:cache_config_info", "gauge", "hasten_cache_config_info under vLLM's name.", 1.0),
    ];
    for (name, kind, help, v) in series {
        let labels = if name == "vllm:cache_config_info" {
            format!("{model},{info}")
        } else {
            model.clone()
        };
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v}"
        );
    }
}

/// The whole `/metrics` page.
pub fn render(st: &Shared) -> String {
    let mut out = String::new();
    if let Ok(b) = st.backend() {
        let mut m = b.engine.metrics();
        // Read live, not as of the last step: a long prefill step would
        // hide requests that arrived meanwhile from the endpoint picker.
        m.waiting = b.engine.waiting();
        m.running = b.engine.running();
        engine(&mut out, &m);
        fleet(&mut out, &b, &m, st.cfg.vllm_metrics);
    }
    let c = &st.replays.counters;
    let server = [
        (
            "hasten_streams_abandoned_total",
            "Streams cancelled after their client left and did not come back within the grace period.",
            c.abandoned.load(Ordering::Relaxed),
        ),
        ("hasten_streams_resumed_total", "Streams a client reattached to.", c.resumed.load(Ordering::Relaxed)),
        ("hasten_streams_timed_out_total", "Streams ended by the request timeout.", c.timed_out.load(Ordering::Relaxed)),
        (
            "hasten_unary_disconnects_total",
            "Non-streaming requests cancelled because the client left.",
            st.unary_disconnects.load(Ordering::Relaxed),
        ),
        ("hasten_connections_accepted_total", "TCP connections accepted.", st.conns.accepted.load(Ordering::Relaxed)),
        (
            "hasten_connections_reclaimed_total",
            "Idle connections closed to make room at the connection limit.",
            st.conns.reclaimed.load(Ordering::Relaxed),
        ),
        (
            "hasten_connections_overflow_total",
            "Connections accepted while every slot was busy (probes only; others 503).",
            st.conns.overflow.load(Ordering::Relaxed),
        ),
        (
            "hasten_connections_refused_total",
            "Connections closed at once: no room even for probes.",
            st.conns.refused.load(Ordering::Relaxed),
        ),
        (
            "hasten_connections_timed_out_total",
            "Connections closed because no complete request head arrived within the idle timeout.",
            st.conns.timed_out.load(Ordering::Relaxed),
        ),
        (
            "hasten_connections_tls_failed_total",
            "Connections closed before HTTP: a failed or timed-out TLS handshake, or plain HTTP to the TLS port.",
            st.conns.tls_failed.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, v) in server {
        scalar(&mut out, name, "counter", help, v as f64);
    }
    scalar(
        &mut out,
        "hasten_connections_open",
        "gauge",
        "Open client connections.",
        st.conns.open.load(Ordering::Relaxed) as f64,
    );
    scalar(
        &mut out,
        "hasten_streams_live",
        "gauge",
        "Streams being produced or kept for reattachment.",
        st.replays.live() as f64,
    );
    let _ = writeln!(
        out,
        "# HELP hasten_http_responses_total HTTP responses by route and status.\n# TYPE hasten_http_responses_total counter"
    );
    for ((route, status), n) in st
        .http
        .by_route
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        let _ = writeln!(
            out,
            "hasten_http_responses_total{{route=\"{route}\",status=\"{status}\"}} {n}"
        );
    }
    out
}
