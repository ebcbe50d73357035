//! OpenTelemetry traces of requests (`hasten serve --otlp-endpoint URL`),
//! exported over OTLP/HTTP (JSON) from the SDK's batch thread.
//!
//! Each HTTP request gets a server span named `METHOD /route`, a child of
//! the caller's span when the request carries a W3C `traceparent` (from a
//! client or a gateway), and the response carries the server span's own
//! `traceparent`, so a slow request can be followed from gateway to
//! replica. A request the engine ran gets three children per choice,
//! `queue`, `prefill` and `decode`, timed from the engine's own record
//! ([`hasten_engine::Finish`]); the server span ends when the last of its
//! streams has ended (after the response head, for a stream).
//!
//! This module owns the spans and their export. Where requests enter
//! ([`crate::middleware::request_id`]) and where the engine's record
//! arrives ([`hasten_engine::RequestStream::on_finish`]) call into it.

use hasten_engine::Finish;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::time::{Duration, Instant, SystemTime};

tokio::task_local! {
    /// The trace of the request being handled (set around the handler by
    /// [`crate::middleware::count`] when tracing is on).
    static CURRENT: (std::sync::Arc<Otel>, TraceCx);
}

/// Runs `f` with `trace` as the request's trace.
pub async fn scope<F: std::future::Future>(
    trace: (std::sync::Arc<Otel>, TraceCx),
    f: F,
) -> F::Output {
    CURRENT.scope(trace, f).await
}

/// The trace of the request being handled, if tracing is on.
pub fn current() -> Option<(std::sync::Arc<Otel>, TraceCx)> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Whether `endpoint` can be exported to (for the command line's check).
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if endpoint.starts_with("http://") {
        Ok(())
    } else {
        Err(format!(
            "--otlp-endpoint must be an http:// URL (OTLP over HTTP, JSON), got {endpoint:?}"
        ))
    }
}

/// The exporter and the tracer spans come from.
pub struct Otel {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
}

/// One request's trace context: the server span (shared by the request's
/// streams; it ends when the last reference goes).
#[derive(Clone)]
pub struct TraceCx(pub Context);

impl std::fmt::Debug for TraceCx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TraceCx({:?})", self.0.span().span_context())
    }
}

struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct Out<'a>(&'a mut axum::http::HeaderMap);

impl Injector for Out<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(key.as_bytes()),
            axum::http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

impl Otel {
    /// Exports to the OTLP/HTTP collector at `endpoint` (`http://host:4318`;
    /// `/v1/traces` is added unless the URL ends with it), batching spans
    /// for at most `flush` before sending them.
    pub fn new(endpoint: &str, flush: Duration) -> Result<Otel, String> {
        check_endpoint(endpoint)?;
        let mut url = endpoint.trim_end_matches('/').to_owned();
        if !url.ends_with("/v1/traces") {
            url.push_str("/v1/traces");
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("the OTLP exporter: {e}"))?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(flush)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_resource(Resource::builder().with_service_name("hasten").build())
            .build();
        let tracer = provider.tracer("hasten");
        Ok(Otel { provider, tracer })
    }

    /// Starts the server span of a request with `headers` (its parent from
    /// `traceparent` when they carry one).
    pub fn start(
        &self,
        headers: &axum::http::HeaderMap,
        name: String,
        request_id: &str,
    ) -> TraceCx {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("hasten.request_id", request_id.to_owned())])
            .start_with_context(&self.tracer, &parent);
        TraceCx(parent.with_span(span))
    }

    /// Adds the server span's `traceparent` to a response's headers.
    pub fn inject(cx: &TraceCx, headers: &mut axum::http::HeaderMap) {
        TraceContextPropagator::new().inject_context(&cx.0, &mut Out(headers));
    }

    /// Records the response's status on the server span (an error status
    /// from 500 on, as OpenTelemetry's HTTP conventions say).
    pub fn status(cx: &TraceCx, status: u16) {
        let span = cx.0.span();
        span.set_attribute(KeyValue::new("http.response.status_code", status as i64));
        if status >= 500 {
            span.set_status(opentelemetry::trace::Status::error(format!(
                "HTTP {status}"
            )));
        }
    }

    /// Records choice `choice`'s queue, prefill and decode as children of
    /// `cx`'s span, from the engine's record `f`.
    pub fn finished(&self, cx: &TraceCx, choice: usize, f: &Finish) {
        let t = &f.timing;
        // The engine's instants as wall-clock times.
        let wall = |at: Instant| {
            let now = (SystemTime::now(), Instant::now());
            now.0 - now.1.saturating_duration_since(at)
        };
        let start = wall(t.received);
        let marks = [
            ("queue", start, start + t.queue),
            ("prefill", start + t.queue, start + t.queue + t.prefill),
            (
                "decode",
                start + t.queue + t.prefill,
                start + t.queue + t.prefill + t.decode,
            ),
        ];
        for (name, from, to) in marks {
            let mut attrs = vec![KeyValue::new("hasten.choice", choice as i64)];
            match name {
                "prefill" => {
                    attrs.push(KeyValue::new(
                        "hasten.prompt_tokens",
                        f.prompt_tokens as i64,
                    ));
                    attrs.push(KeyValue::new(
                        "hasten.cached_prompt_tokens",
                        f.cached_prompt_tokens as i64,
                    ));
                }
                "decode" => {
                    attrs.push(KeyValue::new(
                        "hasten.output_tokens",
                        f.output_tokens as i64,
                    ));
                    attrs.push(KeyValue::new("hasten.finish_reason", f.reason.as_openai()));
                }
                _ => attrs.push(KeyValue::new("hasten.preemptions", t.preemptions as i64)),
            }
            let mut span = self
                .tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(from)
                .with_attributes(attrs)
                .start_with_context(&self.tracer, &cx.0);
            span.end_with_timestamp(to);
        }
    }

    /// Exports what is buffered (at shutdown).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

impl Drop for Otel {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}
