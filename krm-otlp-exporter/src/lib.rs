//! The OTLP span exporter of the runner and of the pods' wrapper server, over either protocol
//! `OTEL_EXPORTER_OTLP_PROTOCOL` names: gRPC (tonic) or HTTP with protobuf bodies (hyper). No
//! plugin ABI here, so the static wrapper server can use it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{
    ExporterBuildError, Protocol, SpanExporter, WithExportConfig, WithHttpConfig,
};

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

impl OtlpProtocol {
    const NAMES: [(&'static str, Self); 2] =
        [("grpc", Self::Grpc), ("http/protobuf", Self::HttpProtobuf)];
}

/// An `OTEL_EXPORTER_OTLP_PROTOCOL` value that is not one of the supported protocols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProtocol(String);

impl fmt::Display for UnknownProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not one of grpc, http/protobuf", self.0)
    }
}

impl std::error::Error for UnknownProtocol {}

impl FromStr for OtlpProtocol {
    type Err = UnknownProtocol;

    /// Parses OpenTelemetry's name for the protocol (`grpc`, `http/protobuf`).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, protocol)| *protocol)
            .ok_or_else(|| UnknownProtocol(name.to_owned()))
    }
}

/// A span exporter sending to `endpoint` as `OTEL_EXPORTER_OTLP_ENDPOINT` means it (over HTTP,
/// spans go to `<endpoint>/v1/traces`). Without one, the OpenTelemetry SDK takes it from the
/// environment (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`) or its
/// default (`http://localhost:4317`, `http://localhost:4318/v1/traces`). Call it inside the
/// async runtime that serves: the gRPC connection and the HTTP client live there.
pub fn span_exporter(
    protocol: OtlpProtocol,
    endpoint: Option<&str>,
) -> Result<SpanExporter, ExporterBuildError> {
    match protocol {
        OtlpProtocol::Grpc => {
            let builder = SpanExporter::builder().with_tonic();
            match endpoint {
                Some(endpoint) => builder.with_endpoint(endpoint).build(),
                None => builder.build(),
            }
        }
        OtlpProtocol::HttpProtobuf => {
            let builder = SpanExporter::builder()
                .with_http()
                .with_http_client(OnRuntime::new())
                .with_protocol(Protocol::HttpBinary);
            match endpoint {
                Some(base) => builder
                    .with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')))
                    .build(),
                None => builder.build(),
            }
        }
    }
}

/// How long one export over HTTP may take (OpenTelemetry's default export timeout).
const HTTP_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP/HTTP client: hyper's, run on the serving async runtime. The batch span processor
/// exports from a thread of its own, where hyper's client (which needs a tokio runtime) cannot
/// run by itself.
#[derive(Debug)]
struct OnRuntime {
    client: HyperClient,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    fn new() -> Self {
        Self {
            client: HyperClient::with_default_connector(HTTP_EXPORT_TIMEOUT, None),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[tonic::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_parsed_by_their_opentelemetry_names() {
        assert_eq!("grpc".parse(), Ok(OtlpProtocol::Grpc));
        assert_eq!("http/protobuf".parse(), Ok(OtlpProtocol::HttpProtobuf));
        assert_eq!(
            "http/json".parse::<OtlpProtocol>().unwrap_err().to_string(),
            "\"http/json\" is not one of grpc, http/protobuf"
        );
    }
}
