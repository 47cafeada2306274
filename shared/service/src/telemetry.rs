//! Tracing set-up: logs filtered by `RUST_LOG` (default `info`), pretty or JSON; and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans exported over OTLP/HTTP (JSON) so that one
//! conversation's work in ingest, extract and relate shows as one trace. The W3C
//! `traceparent` header carries the trace from service to service through NATS.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::LogFormat;

/// The W3C trace-context header.
pub const TRACEPARENT: &str = "traceparent";

/// How a service process reports: its log format and, optionally, where its spans go.
#[derive(Debug, Clone)]
pub struct Telemetry {
    pub service: String,
    pub log_format: LogFormat,
    /// An OTLP/HTTP endpoint (`http://collector:4318`); spans go to `/v1/traces` under it.
    pub otlp_endpoint: Option<String>,
}

/// Keeps the span exporter alive; dropping it flushes what is buffered.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("npcmem: could not flush the last spans: {error}");
        }
    }
}

/// Installs the global subscriber; a second call (tests running services in-process) is a
/// no-op. Traces are kept at `info` whatever `RUST_LOG` says about logs.
pub fn init(telemetry: &Telemetry) -> TelemetryGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only on a terminal: logs redirected to a file stay plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(true)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let logs = match telemetry.log_format {
        LogFormat::Pretty => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(true).with_filter(filter).boxed(),
    };
    let provider = telemetry.otlp_endpoint.as_deref().and_then(|endpoint| match exporter(endpoint) {
        Ok(exporter) => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder().with_service_name(telemetry.service.clone()).build(),
                )
                .build(),
        ),
        Err(error) => {
            eprintln!("npcmem: no traces: cannot export to {endpoint}: {error}");
            None
        }
    });
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("npcmem"))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    let _ = tracing_subscriber::registry().with(logs).with(traces).try_init();
    TelemetryGuard { provider }
}

fn exporter(endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::WithExportConfig as _;
    // reqwest is built without a default TLS crypto provider (an https collector needs one).
    npcmem_llm::install_crypto_provider();
    let traces = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(traces)
        .build()
}

/// A span for one message's work, continuing the trace its `traceparent` header names
/// (a new trace when it has none, or when traces are off).
pub fn message_span(span: tracing::Span, headers: Option<&async_nats::HeaderMap>) -> tracing::Span {
    if let Some(traceparent) = headers.and_then(|headers| headers.get(TRACEPARENT)) {
        let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.as_str().to_owned())]);
        let parent = TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
    span
}

/// The `traceparent` to send with the messages `span`'s work publishes; None when traces
/// are off (the span belongs to no trace).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// One span per item of a batch, named `name`: `items` gives each item's message id
/// (its `Nats-Msg-Id`) and conversation. Each span continues the trace its message's
/// `traceparent` names, and ends when dropped. Matched by message id, so no message is
/// decoded a second time.
pub fn batch_spans(
    name: &'static str,
    batch: &[npcmem_bus::Delivery],
    items: impl IntoIterator<Item = (uuid::Uuid, uuid::Uuid)>,
) -> Vec<(uuid::Uuid, tracing::Span)> {
    let headers: HashMap<&str, &async_nats::HeaderMap> = batch
        .iter()
        .filter_map(|delivery| {
            let headers = delivery.headers()?;
            Some((headers.get(async_nats::header::NATS_MESSAGE_ID)?.as_str(), headers))
        })
        .collect();
    items
        .into_iter()
        .map(|(message_id, conversation_id)| {
            let span = tracing::info_span!("message", otel.name = name, conversation_id = %conversation_id);
            (conversation_id, message_span(span, headers.get(message_id.to_string().as_str()).copied()))
        })
        .collect()
}
