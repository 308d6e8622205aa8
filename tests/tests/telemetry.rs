//! Observability through real parts: the runner exports its spans over OTLP to a receiver in
//! this test (a tonic server from the OpenTelemetry proto definitions) and serves metrics that
//! a real Prometheus server scrapes.

#[path = "support/pod_world.rs"]
mod pod_world;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use krm_kube_standin::fixture::require_podman;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Server, exec_chain_config, free_port, have_tool, resource_list, scratch, script,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// An OTLP/gRPC trace receiver on loopback, keeping every span it is sent.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Serves on a loopback port until the test's runtime ends; returns its endpoint.
    async fn start(&self) -> String {
        self.start_on(Ipv4Addr::LOCALHOST.into()).await
    }

    /// Serves on a port of `address` until the test's runtime ends; returns its endpoint.
    async fn start_on(&self, address: IpAddr) -> String {
        let listener = tokio::net::TcpListener::bind((address, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(self.clone()))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{address}")
    }

    /// The spans of `trace_id` once at least `count` have arrived (within 20 s).
    async fn spans_of(&self, trace_id: &[u8], count: usize) -> Vec<Span> {
        let started = Instant::now();
        loop {
            let spans: Vec<Span> = self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|span| span.trace_id == trace_id)
                .cloned()
                .collect();
            if spans.len() >= count || started.elapsed() > Duration::from_secs(20) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf) on loopback, on threads of its own.
fn http_receiver() -> (String, Receiver) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let receiver = Receiver::default();
    let kept = receiver.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || serve_otlp_http(stream, &kept));
        }
    });
    (format!("http://{address}"), receiver)
}

/// Answers HTTP/1.1 requests on one connection until the client closes it.
fn serve_otlp_http(stream: TcpStream, receiver: &Receiver) {
    use prost::Message;
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        assert!(
            request_line.starts_with("POST /v1/traces "),
            "{request_line:?}"
        );
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        receiver
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(
                request
                    .resource_spans
                    .into_iter()
                    .flat_map(|resource| resource.scope_spans)
                    .flat_map(|scope| scope.spans),
            );
        writer
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            )
            .unwrap();
    }
}

/// The `TRACEPARENT` a function printed into its log (`echo TRACEPARENT=$TRACEPARENT`).
fn function_traceparent(log: &str) -> &str {
    log.split_whitespace()
        .find_map(|word| word.strip_prefix("TRACEPARENT="))
        .unwrap_or_else(|| panic!("no TRACEPARENT in the function's log: {log:?}"))
}

fn attribute(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.clone()?.value)
}

fn string_attribute(span: &Span, key: &str) -> String {
    match attribute(span, key) {
        Some(Value::StringValue(text)) => text,
        other => panic!("{key} of span {:?} is {other:?}", span.name),
    }
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

/// A call of `image` on one ConfigMap, made under the caller's span (`CALLER_TRACE`,
/// `CALLER_SPAN`) as its `traceparent` metadata says.
fn traced_request(image: &str) -> tonic::Request<EvaluateFunctionRequest> {
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: resource_list(&["a"]),
        image: image.to_owned(),
        tag: String::new(),
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
            .parse()
            .unwrap(),
    );
    request
}

/// The caller's W3C context reaches the runner's spans (its call span is the child of the
/// caller's span), the evaluator's span, the log line and, as TRACEPARENT/TRACESTATE, the
/// function process, whose parent is the runner's span for the evaluator that ran it.
#[tokio::test(flavor = "multi_thread")]
async fn a_callers_trace_continues_through_the_runner_into_the_function() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let dir = scratch();
    let function = script(
        dir.path(),
        "traced",
        "echo \"TRACEPARENT=$TRACEPARENT TRACESTATE=$TRACESTATE\" >&2\ncat",
    );
    let config = exec_chain_config(&[("example/traced", &function)], "kit, exec", "");
    let server = Server::start_with_env(
        &config,
        &[],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut request = traced_request("example/traced");
    request
        .metadata_mut()
        .insert("tracestate", "vendor=value".parse().unwrap());
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .expect("the call succeeds")
        .into_inner();

    // The function's environment: the caller's trace, a parent span of the runner's.
    let log = String::from_utf8_lossy(&response.log).into_owned();
    let function_parent = function_traceparent(&log);
    let fields: Vec<&str> = function_parent.split('-').collect();
    assert_eq!(fields.len(), 4, "{function_parent}");
    assert_eq!(
        (fields[0], fields[1], fields[3]),
        ("00", CALLER_TRACE, "01")
    );
    assert_ne!(
        fields[2], CALLER_SPAN,
        "the function's parent is the runner's span"
    );
    assert!(log.contains("TRACESTATE=vendor=value"), "{log:?}");

    // The runner's spans: the call, the routing decision, the evaluator that ran the function.
    let spans = receiver.spans_of(&hex(CALLER_TRACE), 3).await;
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
    let call = spans
        .iter()
        .find(|span| span.name == "evaluator.FunctionEvaluator/EvaluateFunction")
        .unwrap_or_else(|| panic!("no call span among {names:?}"));
    assert_eq!(call.parent_span_id, hex(CALLER_SPAN));
    assert_eq!(call.kind, SpanKind::Server as i32);
    assert_eq!(string_attribute(call, "rpc.system"), "grpc");
    assert_eq!(
        string_attribute(call, "krm.function.image"),
        "example/traced"
    );
    assert_eq!(string_attribute(call, "krm.evaluator"), "exec");
    assert_eq!(string_attribute(call, "krm.outcome"), "OK");
    match attribute(call, "krm.evaluators.declined") {
        Some(Value::ArrayValue(list)) => {
            let declined: Vec<_> = list.values.into_iter().filter_map(|v| v.value).collect();
            assert_eq!(declined, [Value::StringValue("kit".to_owned())]);
        }
        other => panic!("krm.evaluators.declined is {other:?}"),
    }
    let route = spans
        .iter()
        .find(|span| span.name == "route")
        .unwrap_or_else(|| panic!("no route span among {names:?}"));
    assert_eq!(route.parent_span_id, call.span_id);
    let evaluate = spans
        .iter()
        .find(|span| span.span_id == hex(fields[2]))
        .unwrap_or_else(|| panic!("the function's parent span is not among {names:?}"));
    assert_eq!(evaluate.name, "evaluate");
    assert_eq!(evaluate.parent_span_id, call.span_id);
    assert_eq!(string_attribute(evaluate, "krm.outcome"), "served");

    // The log line names the trace.
    let stderr = server.stderr();
    assert!(
        stderr
            .lines()
            .any(|line| line.contains(&format!("trace_id={CALLER_TRACE}"))
                && line.contains("call")),
        "no log line naming the trace:\n{stderr}"
    );
}

/// A plugin's span, opened through the host handle under the context the call lent it, joins
/// the caller's trace as a child of the runner's span for that evaluator, with the plugin's
/// attributes; the context it hands on names that span.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugins_span_joins_the_callers_trace() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let config = exec_chain_config(&[], "kit, exec", "");
    let server = Server::start_with_env(
        &config,
        &[],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let request = traced_request("testkit/telemetry");
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .expect("the call succeeds")
        .into_inner();
    let log = String::from_utf8_lossy(&response.log).into_owned();
    let handed_on = log
        .strip_prefix("TRACEPARENT=")
        .unwrap_or_else(|| panic!("the plugin's span has no context: {log:?}"));
    let fields: Vec<&str> = handed_on.split('-').collect();
    assert_eq!((fields[0], fields[1]), ("00", CALLER_TRACE), "{handed_on}");

    let spans = receiver.spans_of(&hex(CALLER_TRACE), 4).await;
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
    let work = spans
        .iter()
        .find(|span| span.name == "testkit.work")
        .unwrap_or_else(|| panic!("no plugin span among {names:?}"));
    assert_eq!(
        work.span_id,
        hex(fields[2]),
        "the context handed on is the span's"
    );
    assert_eq!(string_attribute(work, "krm.plugin"), "testkit");
    assert_eq!(string_attribute(work, "krm.evaluator"), "kit");
    assert_eq!(string_attribute(work, "testkit.note"), "hello");
    assert_eq!(attribute(work, "testkit.items"), Some(Value::IntValue(3)));
    let parent = spans
        .iter()
        .find(|span| span.span_id == work.parent_span_id)
        .unwrap_or_else(|| panic!("the plugin span's parent is not among {names:?}"));
    assert_eq!(parent.name, "evaluate");
    // The instance the runner asked: the chain that delegated to `kit`.
    assert_eq!(string_attribute(parent, "krm.evaluator"), "default");
    let call = spans
        .iter()
        .find(|span| span.span_id == parent.parent_span_id)
        .unwrap_or_else(|| panic!("the evaluate span's parent is not among {names:?}"));
    assert_eq!(call.parent_span_id, hex(CALLER_SPAN));
}

/// The value of the series `series` (name and labels as exposed) in a `/metrics` text.
fn sample(exposed: &str, series: &str) -> Option<f64> {
    exposed
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
}

/// A traced call for `image` under the trace `trace_id`, within 120 s; the function's log.
async fn traced_call(server: &Server, image: &str, trace_id: &str) -> String {
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: resource_list(&["a"]),
        image: image.to_owned(),
        tag: String::new(),
    });
    request.set_timeout(Duration::from_secs(120));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{CALLER_SPAN}-01").parse().unwrap(),
    );
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .unwrap_or_else(|status| panic!("call failed: {status:?}\n{}", server.stderr()));
    String::from_utf8_lossy(&response.into_inner().log).into_owned()
}

/// The pod evaluator, in the Kubernetes API stand-in: each call's pod lease is a span of the
/// caller's trace (pod name, cold or warm, wait), the call to the wrapper server is one too
/// and is the function's parent; the pool's gauges, cold starts, start durations and
/// evictions are served for Prometheus.
#[tokio::test(flavor = "multi_thread")]
async fn pod_leases_are_spans_and_the_pool_is_measured() {
    if !require_podman("pod evaluator telemetry") {
        return;
    }
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let world = tokio::task::spawn_blocking(pod_world::pod_world)
        .await
        .unwrap();
    let cluster = &world.cluster;
    let function = push_traced_function(cluster);
    let metrics_port = free_port().to_string();
    let server = Server::start_with_env(
        &pod_world::runner_config(cluster, &world.wrapper, ""),
        &[],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &metrics_port),
        ],
    );
    const COLD_TRACE: &str = "11111111111111111111111111111111";
    const WARM_TRACE: &str = "22222222222222222222222222222222";
    let cold_log = traced_call(&server, &function, COLD_TRACE).await;
    traced_call(&server, &function, WARM_TRACE).await;
    let pods = pod_world::kubectl(
        cluster,
        &["get", "pods", "-n", pod_world::NAMESPACE, "-o", "name"],
    );
    let pod = pods
        .trim()
        .strip_prefix("pod/")
        .expect("one pod")
        .to_owned();

    let lease = |spans: &[Span]| -> Span {
        let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
        spans
            .iter()
            .find(|span| span.name == "pod.lease")
            .unwrap_or_else(|| panic!("no pod.lease span among {names:?}"))
            .clone()
    };
    let cold_spans = receiver.spans_of(&hex(COLD_TRACE), 5).await;
    let cold = lease(&cold_spans);
    assert_eq!(string_attribute(&cold, "krm.pod.name"), pod);
    assert_eq!(
        attribute(&cold, "krm.pod.cold"),
        Some(Value::BoolValue(true))
    );
    assert!(
        matches!(attribute(&cold, "krm.pod.wait_ms"), Some(Value::IntValue(ms)) if ms > 0),
        "{:?}",
        attribute(&cold, "krm.pod.wait_ms")
    );
    let evaluate = cold_spans
        .iter()
        .find(|span| span.span_id == cold.parent_span_id)
        .expect("the lease's parent");
    assert_eq!(evaluate.name, "evaluate");
    let call = cold_spans
        .iter()
        .find(|span| span.name == "pod.call")
        .expect("a pod.call span");
    assert_eq!(call.parent_span_id, evaluate.span_id);
    assert_eq!(string_attribute(call, "krm.pod.name"), pod);
    let function_parent = function_traceparent(&cold_log);
    let fields: Vec<&str> = function_parent.split('-').collect();
    assert_eq!(fields.get(1), Some(&COLD_TRACE), "{function_parent}");
    assert_eq!(
        hex(fields[2]),
        call.span_id,
        "the function runs under the call to the wrapper server"
    );
    let warm = lease(&receiver.spans_of(&hex(WARM_TRACE), 5).await);
    assert_eq!(string_attribute(&warm, "krm.pod.name"), pod);
    assert_eq!(
        attribute(&warm, "krm.pod.cold"),
        Some(Value::BoolValue(false))
    );

    let metrics = format!("127.0.0.1:{metrics_port}");
    // The pool is the image's pinned to its digest.
    let digest = cluster
        .registry
        .digest_of(&function)
        .expect("the function's digest");
    let image = format!("evaluator=\"pod\",image=\"{function}@{digest}\"");
    let exposed = http_get(&metrics, "/metrics");
    for (series, value) in [
        (
            format!("krm_plugin_pod_pods{{{image},state=\"ready\"}}"),
            1.0,
        ),
        (
            format!("krm_plugin_pod_pods{{{image},state=\"starting\"}}"),
            0.0,
        ),
        (format!("krm_plugin_pod_waitlist{{{image}}}"), 0.0),
        (format!("krm_plugin_pod_cold_starts_total{{{image}}}"), 1.0),
        (
            format!("krm_plugin_pod_pod_start_seconds_count{{{image},outcome=\"ready\"}}"),
            1.0,
        ),
    ] {
        assert_eq!(
            sample(&exposed, &series),
            Some(value),
            "{series} in:\n{exposed}"
        );
    }

    // Deleted behind the runner's back: evicted (the call finds it unreachable, or a scan
    // finds it gone), and a new pod starts.
    pod_world::kubectl(
        cluster,
        &[
            "delete",
            "-n",
            pod_world::NAMESPACE,
            &format!("pod/{pod}"),
            "--wait=true",
            "--timeout=60s",
        ],
    );
    traced_call(&server, &function, COLD_TRACE).await;
    let exposed = http_get(&metrics, "/metrics");
    let evictions: f64 = ["unreachable", "gone"]
        .iter()
        .filter_map(|reason| {
            sample(
                &exposed,
                &format!("krm_plugin_pod_evictions_total{{{image},reason=\"{reason}\"}}"),
            )
        })
        .sum();
    assert_eq!(evictions, 1.0, "{exposed}");
    assert_eq!(
        sample(
            &exposed,
            &format!("krm_plugin_pod_pod_start_seconds_count{{{image},outcome=\"ready\"}}")
        ),
        Some(2.0),
        "{exposed}"
    );
    // The dashboard's pool panels read what the pod evaluator exports.
    for query in dashboard_queries() {
        for family in query
            .families
            .iter()
            .filter(|family| family.starts_with(POD_POOL_METRICS))
        {
            assert!(
                exposed.contains(&format!("# TYPE {family} ")),
                "panel {:?} uses {family}, which the pod evaluator does not export",
                query.panel
            );
        }
    }
}

/// A process killed when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One call, under the caller's span, to this build's wrapper server (as function pods run it)
/// with `otel` in its environment, running a function that prints its TRACEPARENT; the server
/// (killed when the guard drops) and the TRACEPARENT the function printed.
async fn traced_wrapper_server_call(otel: &[(&str, &str)]) -> (KillOnDrop, String) {
    let dir = scratch();
    let function = script(
        dir.path(),
        "traced",
        "echo \"TRACEPARENT=$TRACEPARENT\" >&2\ncat",
    );
    let port = free_port();
    let wrapper = KillOnDrop(
        Command::new(krm_runner_tests::build_dir().join("wrapper-server"))
            .args(["--port", &port.to_string(), "--"])
            .arg(&function)
            .envs(otel.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wrapper-server"),
    );
    let started = Instant::now();
    let channel = loop {
        match tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
        {
            Ok(channel) => break channel,
            Err(error) if started.elapsed() > Duration::from_secs(20) => {
                panic!("wrapper-server never listened: {error}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let request = traced_request("example/traced");
    let log = krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::new(
        channel,
    )
    .evaluate_function(request)
    .await
    .expect("the call succeeds")
    .into_inner()
    .log;
    let log = String::from_utf8_lossy(&log).into_owned();
    let function_parent = log
        .trim()
        .strip_prefix("TRACEPARENT=")
        .unwrap_or_else(|| panic!("no TRACEPARENT in the function's log: {log:?}"))
        .to_owned();
    (wrapper, function_parent)
}

/// The wrapper server's spans of the caller's trace are its one server span, the child of the
/// caller's span, and the function ran under it.
fn assert_wrapper_span(spans: &[Span], function_parent: &str) {
    let [wrapper] = spans else {
        panic!("one span expected, got {spans:?}");
    };
    assert_eq!(wrapper.name, "evaluator.FunctionEvaluator/EvaluateFunction");
    assert_eq!(wrapper.kind, SpanKind::Server as i32);
    assert_eq!(wrapper.parent_span_id, hex(CALLER_SPAN));
    assert_eq!(
        string_attribute(wrapper, "krm.function.image"),
        "example/traced"
    );
    assert_eq!(
        attribute(wrapper, "rpc.grpc.status_code"),
        Some(Value::IntValue(0))
    );
    let fields: Vec<&str> = function_parent.split('-').collect();
    assert_eq!(fields[1], CALLER_TRACE, "{function_parent}");
    assert_eq!(
        hex(fields[2]),
        wrapper.span_id,
        "the function runs under the wrapper's span"
    );
}

/// The wrapper server with `OTEL_*` set: its span continues the caller's trace and is the
/// parent the function receives in TRACEPARENT.
#[tokio::test(flavor = "multi_thread")]
async fn the_wrapper_servers_span_continues_the_callers_trace() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_wrapper, function_parent) = traced_wrapper_server_call(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ])
    .await;
    assert_wrapper_span(
        &receiver.spans_of(&hex(CALLER_TRACE), 1).await,
        &function_parent,
    );
}

/// The wrapper server exports over OTLP/HTTP with `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`,
/// as the runner does.
#[tokio::test(flavor = "multi_thread")]
async fn the_wrapper_server_exports_over_http_protobuf_too() {
    let (endpoint, receiver) = http_receiver();
    let (_wrapper, function_parent) = traced_wrapper_server_call(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ])
    .await;
    assert_wrapper_span(
        &receiver.spans_of(&hex(CALLER_TRACE), 1).await,
        &function_parent,
    );
}

/// deploy/kubernetes's base pod template, in the function pods' namespace, with `env` added to
/// the function container: where an operator configures the wrapper servers, as in Porch.
/// Pushes a function that logs the `TRACEPARENT` it was given and echoes its input; its image.
fn push_traced_function(cluster: &krm_kube_standin::fixture::Cluster) -> String {
    cluster
        .push(
            &pod_world::function_image(&[
                "/bin/sh",
                "-c",
                "echo \"TRACEPARENT=$TRACEPARENT\" >&2; cat",
            ]),
            "krm/traced:v1",
        )
        .expect("function image")
}

fn base_pod_template_with_env(env: &[(&str, &str)]) -> serde_json::Value {
    let path = krm_runner_tests::repo_root().join("deploy/kubernetes/pod-template.yaml");
    let mut template: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    template["metadata"]["namespace"] = pod_world::NAMESPACE.into();
    let function = template["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|container| container["name"] == "function")
        .expect("a function container");
    let variables = function["env"].as_array().cloned().unwrap_or_default();
    function["env"] = variables
        .into_iter()
        .chain(
            env.iter()
                .map(|(name, value)| serde_json::json!({"name": name, "value": value})),
        )
        .collect();
    template
}

/// The wrapper server inside a real function pod (the stand-in's, run by podman), given
/// `OTEL_*` in the base pod template: its span joins the caller's trace under the runner's
/// `pod.call` span, reaches the receiver from inside the pod, and is the parent the function
/// receives in TRACEPARENT.
#[tokio::test(flavor = "multi_thread")]
async fn the_wrapper_server_in_a_function_pod_continues_the_trace() {
    if !require_podman("wrapper server telemetry in a function pod") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world::pod_world)
        .await
        .unwrap();
    let cluster = &world.cluster;
    // The pod's containers have network namespaces of their own, so not this host's loopback:
    // the receiver listens where they reach this host.
    let receiver = Receiver::default();
    let endpoint = receiver
        .start_on(pod_world::host_address_for_pods(cluster))
        .await;
    let dir = scratch();
    let template = dir.path().join("pod-template.json");
    std::fs::write(
        &template,
        base_pod_template_with_env(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ])
        .to_string(),
    )
    .unwrap();
    pod_world::kubectl(cluster, &["create", "-f", template.to_str().unwrap()]);
    let function = push_traced_function(cluster);
    let server = Server::start_with_env(
        &pod_world::runner_config(cluster, &world.wrapper, ""),
        &[],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    const TRACE: &str = "33333333333333333333333333333333";
    let log = traced_call(&server, &function, TRACE).await;

    // The runner's call, route, evaluate, pod.lease and pod.call spans, and the wrapper's.
    let spans = receiver.spans_of(&hex(TRACE), 6).await;
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
    let runner_call = spans
        .iter()
        .find(|span| span.parent_span_id == hex(CALLER_SPAN))
        .unwrap_or_else(|| panic!("no span under the caller's among {names:?}"));
    assert_eq!(
        runner_call.name,
        "evaluator.FunctionEvaluator/EvaluateFunction"
    );
    let pod_call = spans
        .iter()
        .find(|span| span.name == "pod.call")
        .unwrap_or_else(|| panic!("no pod.call span among {names:?}"));
    let wrapper = spans
        .iter()
        .find(|span| span.parent_span_id == pod_call.span_id)
        .unwrap_or_else(|| {
            panic!("no span under pod.call among {names:?}: the wrapper server exported none")
        });
    assert_eq!(wrapper.name, "evaluator.FunctionEvaluator/EvaluateFunction");
    assert_eq!(wrapper.kind, SpanKind::Server as i32);
    assert_eq!(string_attribute(wrapper, "krm.function.image"), function);
    assert_eq!(
        attribute(wrapper, "rpc.grpc.status_code"),
        Some(Value::IntValue(0))
    );
    let function_parent = function_traceparent(&log);
    let fields: Vec<&str> = function_parent.split('-').collect();
    assert_eq!(fields.get(1), Some(&TRACE), "{function_parent}");
    assert_eq!(
        hex(fields[2]),
        wrapper.span_id,
        "the function runs under the wrapper server's span"
    );
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`: spans go to `<endpoint>/v1/traces` over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn spans_are_exported_over_http_protobuf_too() {
    let (endpoint, receiver) = http_receiver();
    let dir = scratch();
    let function = script(dir.path(), "identity", "cat");
    let config = exec_chain_config(&[("example/identity", &function)], "exec", "");
    let server = Server::start_with_env(
        &config,
        &[],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let request = traced_request("example/identity");
    server
        .client()
        .await
        .evaluate_function(request)
        .await
        .expect("the call succeeds");
    let spans = receiver.spans_of(&hex(CALLER_TRACE), 3).await;
    let call = spans
        .iter()
        .find(|span| span.name == "evaluator.FunctionEvaluator/EvaluateFunction")
        .unwrap_or_else(|| panic!("no call span among {} spans", spans.len()));
    assert_eq!(call.parent_span_id, hex(CALLER_SPAN));
}

/// Without tracing configured, a function gets no TRACEPARENT, even when the caller sent one.
#[tokio::test(flavor = "multi_thread")]
async fn without_tracing_functions_get_no_trace_context() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "traced",
        "echo \"TRACEPARENT=[$TRACEPARENT]\" >&2\ncat",
    );
    let config = exec_chain_config(&[("example/traced", &function)], "exec", "");
    let server = Server::start(&config, &[]);
    let request = traced_request("example/traced");
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .expect("the call succeeds")
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&response.log).trim(),
        "TRACEPARENT=[]"
    );
}

/// The OTEL_* variables are a configuration layer of their own: `krm-runner config` names them
/// as the source, and `KRM_RUNNER_*` variables still win over them.
#[test]
fn otel_variables_are_a_named_layer_below_krm_runner_variables() {
    let output = krm_runner_tests::run_cli(
        &["config"],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("KRM_RUNNER_TELEMETRY__METRICS__EXPORTER", "none"),
        ],
        b"",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let source = |key: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("# {key} = ")))
            .unwrap_or_else(|| panic!("no provenance line for {key}:\n{stdout}"))
            .to_owned()
    };
    assert!(
        source("telemetry.traces.exporter")
            .ends_with("\"otlp\"  <- OpenTelemetry environment (OTEL_*)"),
        "{stdout}"
    );
    assert!(
        source("telemetry.metrics.exporter").contains("\"none\"  <- "),
        "{stdout}"
    );
}

/// Telemetry settings are checked with the rest of the configuration, every problem named.
#[test]
fn bad_telemetry_settings_are_reported_at_once_naming_the_key() {
    let output = krm_runner_tests::run_cli(
        &["config", "check"],
        &[
            ("OTEL_TRACES_EXPORTER", "jaeger"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_PROPAGATORS", "tracecontext,b3"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "99999"),
        ],
        b"",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for expected in [
        "telemetry.traces.exporter: unknown variant: found `jaeger`",
        "telemetry.traces.protocol: unknown variant: found `http/json`",
        "telemetry.metrics.port: ",
        "telemetry.propagators[1]: \"b3\" is not one of tracecontext, baggage, none",
        "telemetry.traces.endpoint: \"not a url\" is not an http:// or https:// URL",
    ] {
        assert!(
            stderr.contains(expected),
            "{expected:?} missing from:\n{stderr}"
        );
    }
}

/// A real Prometheus scrapes the runner; its HTTP API shows the calls this test made, by
/// outcome (a NOT_FOUND and a failed function included), and the duration histograms.
#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_per_function_and_rpc_metrics() {
    if !have_tool("prometheus") {
        return;
    }
    let dir = scratch();
    let identity = script(dir.path(), "identity", "cat");
    let failing = script(dir.path(), "failing", "echo boom >&2\nexit 3");
    let config = exec_chain_config(
        &[
            ("example/identity", &identity),
            ("example/failing", &failing),
        ],
        "exec",
        "",
    );
    let metrics_port = free_port().to_string();
    let server = Server::start_with_env(
        &config,
        &[],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &metrics_port),
        ],
    );
    let input = resource_list(&["a"]);
    for _ in 0..3 {
        server.call("example/identity", &input).await.unwrap();
    }
    let missing = server.call("example/missing", &input).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let failed = server.call("example/failing", &input).await.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Internal);
    // The other RPCs: two health checks (after the test harness's own), and a method no
    // service has.
    const HEALTH_CHECKS: &str = "rpc_server_duration_milliseconds_count{rpc_system=\"grpc\",\
         rpc_service=\"grpc.health.v1.Health\",rpc_method=\"Check\",rpc_grpc_status_code=\"0\"}";
    let checked_before = sample(
        &http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics"),
        HEALTH_CHECKS,
    )
    .unwrap_or(0.0);
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for _ in 0..2 {
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
    }
    let mut made_up = tonic::client::Grpc::new(channel);
    made_up.ready().await.unwrap();
    let unknown = made_up
        .unary::<_, (), _>(
            tonic::Request::new(()),
            "/made.Up/Nothing".parse().unwrap(),
            tonic_prost::ProstCodec::<(), ()>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::Unimplemented);

    let exposed = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics");
    assert!(
        exposed.contains("# TYPE rpc_server_duration_milliseconds histogram"),
        "{exposed}"
    );

    let prometheus = Prometheus::start(dir.path(), &format!("127.0.0.1:{metrics_port}"));
    for (query, value) in [
        (
            r#"krm_function_calls_total{image="example/identity",evaluator="exec",outcome="OK"}"#,
            3.0,
        ),
        (
            r#"krm_function_calls_total{image="example/missing",outcome="NOT_FOUND"}"#,
            1.0,
        ),
        (
            r#"krm_function_calls_total{image="example/failing",evaluator="exec",outcome="INTERNAL"}"#,
            1.0,
        ),
        (
            r#"krm_function_call_duration_seconds_count{image="example/identity",evaluator="exec"}"#,
            3.0,
        ),
        (
            r#"sum(rpc_server_duration_milliseconds_count{rpc_method="EvaluateFunction"})"#,
            5.0,
        ),
        (
            r#"rpc_server_duration_milliseconds_count{rpc_grpc_status_code="5"}"#,
            1.0,
        ),
        (
            r#"rpc_server_duration_milliseconds_count{rpc_service="other",rpc_method="other",rpc_grpc_status_code="12"}"#,
            1.0,
        ),
        (
            r#"krm_function_request_bytes_total{image="example/identity"}"#,
            3.0 * input.len() as f64,
        ),
        (
            r#"krm_function_calls_in_flight{image="example/identity"}"#,
            0.0,
        ),
    ] {
        prometheus.wait_for(query, value);
    }
    prometheus.wait_for(HEALTH_CHECKS, checked_before + 2.0);
    // The counters move with further calls.
    for _ in 0..2 {
        server.call("example/identity", &input).await.unwrap();
    }
    prometheus.wait_for(
        r#"krm_function_calls_total{image="example/identity",evaluator="exec",outcome="OK"}"#,
        5.0,
    );
    prometheus.wait_for(
        r#"histogram_quantile(1, sum by (le) (krm_function_call_duration_seconds_bucket{image="example/identity"})) > 0"#,
        -1.0,
    );

    // The shipped Grafana dashboard: every query is valid PromQL for this Prometheus, over
    // series the runner exports (the pod pool's: see `pod_leases_are_spans_and_the_pool_is_measured`).
    let exposed = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics");
    let queries = dashboard_queries();
    for query in &queries {
        for family in query
            .families
            .iter()
            .filter(|family| !family.starts_with(POD_POOL_METRICS))
        {
            assert!(
                exposed.contains(&format!("# TYPE {family} ")),
                "panel {:?} uses {family}, which the runner does not export",
                query.panel
            );
        }
        prometheus.accepts(&query.expression);
    }
    assert!(queries.len() >= 15, "{}", queries.len());
}

/// The pod evaluator's metrics, exported once it runs.
const POD_POOL_METRICS: &str = "krm_plugin_pod_";

/// One query of the shipped Grafana dashboard.
struct DashboardQuery {
    panel: String,
    /// With Grafana's variables replaced.
    expression: String,
    /// The metric families it reads.
    families: Vec<String>,
}

fn dashboard_queries() -> Vec<DashboardQuery> {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            krm_runner_tests::repo_root().join("deploy/grafana/krm-runner-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expression = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$job", ".*");
            let families = expression
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("krm_") || word.starts_with("rpc_server_"))
                .map(|name| {
                    ["_total", "_bucket", "_count", "_sum"]
                        .iter()
                        .find_map(|suffix| name.strip_suffix(suffix))
                        .unwrap_or(name)
                        .to_owned()
                })
                .collect();
            queries.push(DashboardQuery {
                panel: panel["title"].as_str().unwrap_or_default().to_owned(),
                expression,
                families,
            });
        }
    }
    queries
}

/// A plugin's measurements, recorded through the host handle, reach Prometheus under the
/// plugin's namespace with the instance as `evaluator`; one the runner cannot take is dropped,
/// logged once, and the runner keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_a_plugins_measurements() {
    if !have_tool("prometheus") {
        return;
    }
    let dir = scratch();
    let config = exec_chain_config(&[], "kit, exec", "");
    let metrics_port = free_port().to_string();
    let server = Server::start_with_env(
        &config,
        &[],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &metrics_port),
        ],
    );
    let input = resource_list(&["a"]);
    for _ in 0..2 {
        server.call("testkit/telemetry", &input).await.unwrap();
    }
    let exposed = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics");
    assert!(
        exposed.contains("# TYPE krm_plugin_testkit_calls counter"),
        "{exposed}"
    );
    assert!(!exposed.contains("Not A Name"), "{exposed}");

    let prometheus = Prometheus::start(dir.path(), &format!("127.0.0.1:{metrics_port}"));
    for (query, value) in [
        (
            r#"krm_plugin_testkit_calls_total{evaluator="kit",kind="telemetry"}"#,
            2.0,
        ),
        (
            r#"krm_plugin_testkit_work_seconds_count{evaluator="kit"}"#,
            2.0,
        ),
        (
            r#"krm_plugin_testkit_work_seconds_sum{evaluator="kit"}"#,
            0.5,
        ),
        (r#"krm_plugin_testkit_level{evaluator="kit"}"#, 7.0),
    ] {
        prometheus.wait_for(query, value);
    }
    server.call("testkit/telemetry", &input).await.unwrap();
    prometheus.wait_for(
        r#"krm_plugin_testkit_calls_total{evaluator="kit",kind="telemetry"}"#,
        3.0,
    );
    let stderr = server.stderr();
    let refusals: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("dropped the plugin's measurements"))
        .collect();
    assert_eq!(refusals.len(), 1, "{stderr}");
    assert!(
        refusals[0].contains("Not A Name") && refusals[0].contains("plugin=\"testkit\"")
            || refusals[0].contains("plugin=testkit"),
        "{}",
        refusals[0]
    );
}

/// A `prometheus` server on loopback scraping one target every second, killed when dropped.
struct Prometheus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(scratch_dir: &std::path::Path, target: &str) -> Self {
        let dir = tempfile::tempdir_in(scratch_dir).unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: krm-runner\n    \
                 static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .unwrap();
        let address = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Self {
            child,
            address,
            _dir: dir,
        }
    }

    /// Waits (up to 60 s) until `query` has one sample of `value` (any, for a negative value).
    fn wait_for(&self, query: &str, value: f64) {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(60) {
            let path = format!("/api/v1/query?query={}", percent_encode(query));
            if let Some(body) = try_http_get(&self.address, &path) {
                if let Ok(answer) = serde_json::from_str::<serde_json::Value>(&body) {
                    let samples = answer["data"]["result"].as_array().cloned();
                    let values: Vec<f64> = samples
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|sample| sample["value"][1].as_str()?.parse().ok())
                        .collect();
                    if values.len() == 1 && (value < 0.0 || values[0] == value) {
                        return;
                    }
                }
                last = body;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let log =
            std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default();
        panic!("Prometheus never answered {query} = {value}; last answer: {last}\nlog:\n{log}");
    }
}

impl Prometheus {
    /// Prometheus evaluates `query` without error.
    fn accepts(&self, query: &str) {
        let path = format!("/api/v1/query?query={}", percent_encode(query));
        let body = http_get(&self.address, &path);
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["status"], "success", "{query}: {body}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// An HTTP/1.0 GET's body, `None` when the server does not answer 200.
fn try_http_get(address: &str, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then_some(())
        .or_else(|| head.starts_with("HTTP/1.1 200").then_some(()))?;
    Some(body.to_owned())
}

fn http_get(address: &str, path: &str) -> String {
    try_http_get(address, path).unwrap_or_else(|| panic!("GET http://{address}{path} failed"))
}
