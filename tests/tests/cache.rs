//! The result cache, through the real binary over gRPC: which calls it answers again, which it
//! never does, concurrent twins running once, a cancelled first caller, expiry and the bound,
//! a pod image keyed by its digest; and ConfigHub's FunctionExecutor requests over HTTP and
//! gRPC.

#[path = "support/pod_world.rs"]
mod pod_world;

use std::time::{Duration, Instant};

use base64::{Engine, engine::general_purpose::STANDARD};
use krm_kube_standin::fixture::require_podman;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;
use krm_runner_tests::{
    Server, exec_chain_config, free_port, http_exchange, http_exchange_with_head, resource_list,
    scratch, script,
};
use serde_json::json;

/// One call; the `x-krm-cache` header and the output, or the status.
async fn call(
    server: &Server,
    image: &str,
    input: &[u8],
) -> Result<(String, Vec<u8>), tonic::Status> {
    let response = server
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: input.to_vec(),
            image: image.to_owned(),
            tag: String::new(),
        })
        .await?;
    let cache = response
        .metadata()
        .get("x-krm-cache")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("absent")
        .to_owned();
    Ok((cache, response.into_inner().resource_list))
}

async fn cache_header(server: &Server, image: &str, input: &[u8]) -> String {
    call(server, image, input)
        .await
        .unwrap_or_else(|status| panic!("{image}: {status:?}\n{}", server.stderr()))
        .0
}

/// A runner with metrics served on a port of their own; the port.
fn with_metrics(config: &str) -> (Server, u16) {
    let port = free_port();
    let text = port.to_string();
    let server = Server::start_with_env(
        config,
        &[],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &text),
        ],
    );
    (server, port)
}

/// The value of `series` (name and labels as exposed) at `/metrics`; 0 when absent.
fn metric(port: u16, series: &str) -> f64 {
    let (status, body) = http_exchange(port, "GET", "/metrics", "", b"");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn pure_runs(port: u16, image: &str) -> f64 {
    metric(
        port,
        &format!("krm_plugin_testkit_pure_runs_total{{evaluator=\"kit\",image=\"{image}\"}}"),
    )
}

fn set_namespace(namespace: &str, names: &[&str]) -> Vec<u8> {
    let mut input = String::from_utf8(resource_list(names)).unwrap();
    input.push_str(&format!(
        "functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: {namespace}\n"
    ));
    input.into_bytes()
}

/// The embedded default configuration caches the builtins: the second identical call is a hit
/// with the same bytes; another input or functionConfig misses.
#[tokio::test(flavor = "multi_thread")]
async fn a_builtin_call_is_answered_again_and_any_change_misses() {
    let server = Server::start("{}\n", &[]);
    let input = set_namespace("prod", &["a", "b"]);
    let (first, output) = call(&server, "set-namespace", &input).await.unwrap();
    assert_eq!(first, "miss");
    assert!(String::from_utf8_lossy(&output).contains("namespace: prod"));
    let (second, again) = call(&server, "set-namespace", &input).await.unwrap();
    assert_eq!(second, "hit");
    assert_eq!(again, output);
    let other_input = set_namespace("prod", &["a", "c"]);
    assert_eq!(
        cache_header(&server, "set-namespace", &other_input).await,
        "miss"
    );
    let other_config = set_namespace("staging", &["a", "b"]);
    let (changed, output) = call(&server, "set-namespace", &other_config).await.unwrap();
    assert_eq!(changed, "miss");
    assert!(String::from_utf8_lossy(&output).contains("namespace: staging"));
    // The same request under another image name runs the same code, but is another request.
    let image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1";
    assert_eq!(cache_header(&server, image, &input).await, "miss");
    assert_eq!(cache_header(&server, image, &input).await, "hit");
}

/// One setting turns the cache off: every call (ConfigHub's requests too) then runs and says
/// `bypass`.
#[tokio::test(flavor = "multi_thread")]
async fn the_cache_turned_off_answers_bypass() {
    let server = Server::start("cache: {enabled: false}\n", &[]);
    let input = set_namespace("prod", &["a"]);
    assert_eq!(
        cache_header(&server, "set-namespace", &input).await,
        "bypass"
    );
    assert_eq!(
        cache_header(&server, "set-namespace", &input).await,
        "bypass"
    );
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let request = replicas_request(7);
    for _ in 0..2 {
        assert_eq!(invoke_grpc(&mut client, &request).await.0, "bypass");
    }
}

/// An exec function is never cached unless its image is marked; marked, a replaced binary
/// misses, and an answer past its TTL misses.
#[tokio::test(flavor = "multi_thread")]
async fn exec_is_cached_only_when_marked_and_a_replaced_binary_misses() {
    let dir = scratch();
    let identity = script(dir.path(), "identity", "cat");
    let input = resource_list(&["a"]);
    let unmarked = Server::start(
        &exec_chain_config(&[("example/fn", &identity)], "exec", ""),
        &[],
    );
    assert_eq!(
        cache_header(&unmarked, "example/fn", &input).await,
        "bypass"
    );
    assert_eq!(
        cache_header(&unmarked, "example/fn", &input).await,
        "bypass"
    );
    drop(unmarked);

    let marked = exec_chain_config(
        &[("example/fn", &identity)],
        "exec",
        "cache:\n  images: [{prefix: example/, ttl_seconds: 3}]\n",
    );
    let (server, metrics) = with_metrics(&marked);
    assert_eq!(cache_header(&server, "example/fn", &input).await, "miss");
    assert_eq!(cache_header(&server, "example/fn", &input).await, "hit");
    // Replaced as deployments replace binaries: a new file renamed over the old.
    let replacement = script(dir.path(), "identity.new", "cat; echo replaced >&2");
    std::fs::rename(&replacement, &identity).unwrap();
    assert_eq!(cache_header(&server, "example/fn", &input).await, "miss");
    assert_eq!(
        metric(
            metrics,
            "krm_cache_misses_total{image=\"example/fn\",reason=\"new_digest\"}"
        ),
        1.0
    );
    assert_eq!(cache_header(&server, "example/fn", &input).await, "hit");
    hits_until_expired(&server, "example/fn", &input, Instant::now(), "3 s TTL").await;
    assert_eq!(
        metric(
            metrics,
            "krm_cache_misses_total{image=\"example/fn\",reason=\"expired\"}"
        ),
        1.0
    );
}

/// A FunctionConfig marks a binaryExecutor's calls cacheable with its own TTL: they hit on
/// the second identical call and expire after it; another executor section, not marked, runs
/// every call.
#[tokio::test(flavor = "multi_thread")]
async fn a_function_config_marks_its_binary_executor_cacheable() {
    let dir = scratch();
    let bin = dir.path().join("bin");
    let fc = dir.path().join("fc");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&fc).unwrap();
    script(&bin, "identity", "cat");
    std::fs::write(
        fc.join("fns.yaml"),
        r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: marked}
spec:
  image: marked
  prefixes: [example.com/fns]
  binaryExecutor: {tags: [v1], path: identity, cache: {timeToLive: 2s}}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: unmarked}
spec:
  image: unmarked
  prefixes: [example.com/fns]
  binaryExecutor: {tags: [v1], path: identity}
"#,
    )
    .unwrap();
    let config = format!(
        r#"evaluators:
  exec: {{plugin: exec}}
  default: {{plugin: multi, config: {{chain: [exec]}}}}
function_configs:
  paths: ["{fc}"]
  functions_dir: "{bin}"
  executors: {{goExecutor: [], binaryExecutor: exec, podExecutor: ""}}
"#,
        fc = fc.display(),
        bin = bin.display(),
    );
    let (server, metrics) = with_metrics(&config);
    let input = resource_list(&["a"]);
    let unmarked = "example.com/fns/unmarked:v1";
    assert_eq!(cache_header(&server, unmarked, &input).await, "bypass");
    assert_eq!(cache_header(&server, unmarked, &input).await, "bypass");
    let marked = "example.com/fns/marked:v1";
    // Before the call: the answer is younger than this by the time it is stored.
    let stored_at = Instant::now();
    let (first, output) = call(&server, marked, &input).await.unwrap();
    assert_eq!(first, "miss");
    let (second, again) = call(&server, marked, &input).await.unwrap();
    assert_eq!((second.as_str(), again), ("hit", output));
    hits_until_expired(&server, marked, &input, stored_at, "2 s timeToLive").await;
    assert!(
        stored_at.elapsed() >= Duration::from_secs(2),
        "expired before its timeToLive"
    );
    assert_eq!(
        metric(
            metrics,
            &format!("krm_cache_misses_total{{image=\"{marked}\",reason=\"expired\"}}")
        ),
        1.0
    );
}

const SLOW: &str = "testkit/pure-sleep:1500";

/// Sixteen identical calls at once run the function once: one miss, fifteen shared, one run
/// as the plugin counts it; the next call is a hit.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_concurrent_twins_run_once() {
    let (server, metrics) = with_metrics(&exec_chain_config(&[], "kit", ""));
    let server = std::sync::Arc::new(server);
    let input = resource_list(&["twins"]);
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (server, input) = (server.clone(), input.clone());
            tokio::spawn(async move { call(&server, SLOW, &input).await })
        })
        .collect();
    let mut headers = Vec::new();
    for answer in calls {
        let (header, output) = answer.await.unwrap().expect("every twin is answered");
        assert_eq!(output, input);
        headers.push(header);
    }
    headers.sort();
    let misses = headers.iter().filter(|h| *h == "miss").count();
    let shared = headers.iter().filter(|h| *h == "shared").count();
    assert_eq!((misses, shared), (1, 15), "{headers:?}");
    assert_eq!(pure_runs(metrics, SLOW), 1.0);
    assert_eq!(cache_header(&server, SLOW, &input).await, "hit");
    assert_eq!(
        metric(
            metrics,
            &format!("krm_cache_shared_total{{image=\"{SLOW}\"}}")
        ),
        15.0
    );
}

/// The caller running the function goes away: the twin waiting for it runs it instead and is
/// answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_takes_over_when_the_first_caller_is_cancelled() {
    let (server, metrics) = with_metrics(&exec_chain_config(&[], "kit", ""));
    let server = std::sync::Arc::new(server);
    let input = resource_list(&["first"]);
    let image = "testkit/pure-sleep:2000";
    let first = {
        let (server, input) = (server.clone(), input.clone());
        tokio::spawn(async move { call(&server, image, &input).await })
    };
    let started = Instant::now();
    while pure_runs(metrics, image) < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the first call never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiter = {
        let (server, input) = (server.clone(), input.clone());
        tokio::spawn(async move { call(&server, image, &input).await })
    };
    // Nothing shows that a call waits; the first call runs 2 s, so the waiter is waiting
    // well before this (were it not, it would still run the function itself and pass).
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    let (header, output) = waiter.await.unwrap().expect("the waiter is answered");
    assert_eq!(output, input);
    assert_eq!(header, "miss", "the waiter ran the function itself");
    assert_eq!(pure_runs(metrics, image), 2.0);
    assert_eq!(cache_header(&server, image, &input).await, "hit");
}

/// A failed call is never cached: each identical call runs the function again.
#[tokio::test(flavor = "multi_thread")]
async fn failures_are_never_cached() {
    let (server, metrics) = with_metrics(&exec_chain_config(&[], "kit", ""));
    let input = resource_list(&["a"]);
    for _ in 0..2 {
        let status = call(&server, "testkit/pure-fail", &input)
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    }
    assert_eq!(pure_runs(metrics, "testkit/pure-fail"), 2.0);
}

/// A flood of unique requests keeps the store within `cache.max_bytes`, evicting the least
/// recently used.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_unique_requests_stays_within_the_bound() {
    let (server, metrics) = with_metrics("cache: {max_bytes: 1048576}\n");
    let padding = "x".repeat(16 * 1024);
    for index in 0..200 {
        let name = format!("n{index}-{padding}");
        let input = set_namespace("prod", &[&name[..name.len().min(253)]]);
        let mut input = String::from_utf8(input).unwrap();
        input.push_str(&format!("# {padding}\n"));
        assert_eq!(
            cache_header(&server, "set-namespace", input.as_bytes()).await,
            "miss"
        );
    }
    let stored = metric(metrics, "krm_cache_stored_bytes");
    assert!(
        stored > 0.0 && stored <= 1_048_576.0,
        "stored {stored} bytes"
    );
    let evicted = metric(
        metrics,
        "krm_cache_evictions_total{image=\"set-namespace\",reason=\"size\"}",
    );
    assert!(evicted > 0.0, "nothing was evicted");
}

/// `cache:` with a disk store in `dir` (and `extra` settings of the cache, as YAML keys).
fn with_disk(dir: &std::path::Path, extra: &str) -> String {
    format!(
        "cache:\n  disk: {{path: {}, max_bytes: 1048576}}\n{extra}",
        dir.display()
    )
}

/// The stored entries' files in `dir`.
fn disk_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ending| ending == "entry"))
        .collect();
    entries.sort();
    entries
}

/// With the disk store, an answer survives a restart: the new runner's first call is a hit,
/// with the same bytes.
#[tokio::test(flavor = "multi_thread")]
async fn the_disk_store_answers_after_a_restart() {
    let store = scratch();
    let config = with_disk(store.path(), "");
    let input = set_namespace("prod", &["a", "b"]);
    let server = Server::start(&config, &[]);
    let (first, output) = call(&server, "set-namespace", &input).await.unwrap();
    assert_eq!(first, "miss");
    assert_eq!(disk_entries(store.path()).len(), 1);
    drop(server);
    let server = Server::start(&config, &[]);
    let (again, cached) = call(&server, "set-namespace", &input).await.unwrap();
    assert_eq!(again, "hit", "{}", server.stderr());
    assert_eq!(cached, output);
    // Another request is still another answer.
    let other = set_namespace("staging", &["a", "b"]);
    assert_eq!(cache_header(&server, "set-namespace", &other).await, "miss");
}

/// An entry edited by hand, or cut short, is discarded and counted, never served: the call
/// runs the function and its answer replaces the entry.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_entry_edited_or_truncated_misses_and_is_counted() {
    let store = scratch();
    let config = with_disk(store.path(), "");
    let edited_input = set_namespace("prod", &["a"]);
    let truncated_input = set_namespace("prod", &["b"]);
    let server = Server::start(&config, &[]);
    assert_eq!(
        cache_header(&server, "set-namespace", &edited_input).await,
        "miss"
    );
    let edited = disk_entries(store.path()).pop().unwrap();
    assert_eq!(
        cache_header(&server, "set-namespace", &truncated_input).await,
        "miss"
    );
    let truncated = disk_entries(store.path())
        .into_iter()
        .find(|path| *path != edited)
        .unwrap();
    drop(server);
    // The same length, another namespace: only the checksum tells.
    let mut bytes = std::fs::read(&edited).unwrap();
    let at = bytes
        .windows(b"namespace: prod".len())
        .position(|window| window == b"namespace: prod")
        .expect("the entry holds the answer");
    bytes[at..at + 15].copy_from_slice(b"namespace: evil");
    std::fs::write(&edited, &bytes).unwrap();
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 10]).unwrap();

    let (server, metrics) = with_metrics(&config);
    for input in [&edited_input, &truncated_input] {
        let (header, output) = call(&server, "set-namespace", input).await.unwrap();
        assert_eq!(header, "miss");
        let output = String::from_utf8_lossy(&output).into_owned();
        assert!(output.contains("namespace: prod"), "{output}");
        assert!(!output.contains("evil"), "{output}");
    }
    assert_eq!(
        metric(
            metrics,
            "krm_cache_misses_total{image=\"set-namespace\",reason=\"corrupt\"}"
        ),
        2.0
    );
    assert!(
        server.stderr().contains("its checksum does not match"),
        "{}",
        server.stderr()
    );
    // Replaced by the run's answer, which the next runner serves.
    drop(server);
    let server = Server::start(&config, &[]);
    assert_eq!(
        cache_header(&server, "set-namespace", &edited_input).await,
        "hit"
    );
}

/// An entry's expiry holds across a restart: past its TTL, the new runner's call misses as
/// `expired`.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_entry_expires_across_a_restart() {
    let store = scratch();
    let config = with_disk(store.path(), "  ttl_seconds: 2\n");
    let input = set_namespace("prod", &["a"]);
    let server = Server::start(&config, &[]);
    assert_eq!(cache_header(&server, "set-namespace", &input).await, "miss");
    let stored_at = Instant::now();
    drop(server);
    let (server, metrics) = with_metrics(&config);
    // Waits out the 2 s TTL (whole seconds on disk), which is what this test is about.
    if let Some(left) = Duration::from_secs(3).checked_sub(stored_at.elapsed()) {
        tokio::time::sleep(left).await;
    }
    assert_eq!(cache_header(&server, "set-namespace", &input).await, "miss");
    assert_eq!(
        metric(
            metrics,
            "krm_cache_misses_total{image=\"set-namespace\",reason=\"expired\"}"
        ),
        1.0
    );
}

/// A folder the runner cannot write (mounted read-only) is warned of once; every call is
/// still answered, and the memory store still answers again.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_disk_folder_serves_from_memory_with_one_warning() {
    if !krm_runner_tests::have_tool("unshare") {
        return;
    }
    let store = scratch();
    let folder = store.path().display().to_string();
    let server = Server::launch(
        &with_disk(store.path(), ""),
        &[],
        &krm_runner_tests::Launch {
            // A private mount namespace whose bind mount of the folder is read-only, then the
            // runner in place of the shell (the Server's pid stays the runner's).
            under: &[
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount --bind -o ro \"$0\" \"$0\" && exec \"$@\"",
                folder.as_str(),
            ],
            ..krm_runner_tests::Launch::default()
        },
    );
    for namespace in ["a", "b", "c"] {
        let input = set_namespace(namespace, &["x"]);
        assert_eq!(cache_header(&server, "set-namespace", &input).await, "miss");
        assert_eq!(cache_header(&server, "set-namespace", &input).await, "hit");
    }
    let stderr = server.stderr();
    assert_eq!(
        stderr.matches("cannot write a cached answer").count(),
        1,
        "{stderr}"
    );
    assert!(disk_entries(store.path()).is_empty());
}

/// `krm-runner cache`: with --server, a serving runner's memory and disk stores (from its
/// metrics listener), emptied by --clear so that the next identical call runs again; without,
/// the disk store the configuration names, read and emptied from its folder.
#[tokio::test(flavor = "multi_thread")]
async fn the_cache_command_shows_and_clears_the_stores() {
    let store = scratch();
    let config = with_disk(store.path(), "");
    let config_file = store.path().join("config.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let config_file = config_file.to_str().unwrap();
    let cache = |args: &[&str]| {
        let mut line = vec!["--config-file", config_file, "cache"];
        line.extend_from_slice(args);
        let output = krm_runner_tests::run_cli(&line, &[], b"");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let folder = store.path().display();
    let (server, metrics) = with_metrics(&config);
    let inputs = [set_namespace("a", &["x"]), set_namespace("b", &["x"])];
    for input in &inputs {
        assert_eq!(cache_header(&server, "set-namespace", input).await, "miss");
    }
    let address = format!("127.0.0.1:{metrics}");
    let shown = cache(&["--server", &address]);
    assert!(shown.contains("memory: 2 entries"), "{shown}");
    assert!(
        shown.contains(&format!("disk {folder}: 2 entries")),
        "{shown}"
    );
    let local = cache(&[]);
    assert!(
        local.contains(&format!("disk {folder}: 2 entries")),
        "{local}"
    );

    let cleared = cache(&["--server", &address, "--clear"]);
    assert!(cleared.contains("memory: 0 entries, 0 of"), "{cleared}");
    assert!(
        cleared.contains(&format!("disk {folder}: 0 entries")),
        "{cleared}"
    );
    assert!(disk_entries(store.path()).is_empty());
    assert_eq!(
        cache_header(&server, "set-namespace", &inputs[0]).await,
        "miss"
    );
    drop(server);

    let cleared = cache(&["--clear"]);
    assert!(cleared.contains("removed 1 entries"), "{cleared}");
    assert!(
        cleared.contains(&format!("disk {folder}: 0 entries")),
        "{cleared}"
    );
    assert!(disk_entries(store.path()).is_empty());
}

// ---- ConfigHub's FunctionExecutor requests ----

const UNIT: &str =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";

/// The label ConfigHub's Kubernetes/YAML requests have in the cache's metrics.
const CONFIGHUB: &str = "ConfigHub/kubernetes";

/// A FunctionInvocationRequest over `unit`, as ConfigHub's client sends it.
fn sequence_body(unit: &str, invocations: serde_json::Value) -> Vec<u8> {
    json!({
        "ToolchainType": "Kubernetes/YAML",
        "UnitSlug": "web",
        "RevisionNum": 1,
        "ConfigData": STANDARD.encode(unit),
        "CastStringArgsToScalars": true,
        "FunctionInvocations": invocations,
    })
    .to_string()
    .into_bytes()
}

/// One POST of `body` to ConfigHub's Kubernetes/YAML route: the status, the `x-krm-cache`
/// header and the body.
fn invoke_http(port: u16, body: &[u8]) -> (u16, String, String) {
    let (status, head, body) =
        http_exchange_with_head(port, "POST", "/function/kubernetes", "", body);
    let cache = head
        .lines()
        .find_map(|line| line.strip_prefix("x-krm-cache: "))
        .unwrap_or("absent")
        .to_owned();
    (status, cache, body)
}

/// Over HTTP: a sequence of hermetic and idempotent functions misses, then hits with the same
/// bytes; a request differing in one byte misses; one with a function that is not idempotent
/// is never cached, nor is a request that could not run.
#[test]
fn confighub_http_sequences_of_pure_functions_are_answered_again() {
    let http = free_port();
    let (server, metrics) = with_metrics(&format!("confighub_listen: \"127.0.0.1:{http}\"\n"));
    let request = sequence_body(
        UNIT,
        json!([
            {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
            {"FunctionName": "get-replicas", "Arguments": []}
        ]),
    );
    let (status, first, body) = invoke_http(http, &request);
    assert_eq!((status, first.as_str()), (200, "miss"), "{body}");
    assert!(body.contains("\"Success\":true"), "{body}");
    let (status, second, again) = invoke_http(http, &request);
    assert_eq!((status, second.as_str()), (200, "hit"), "{again}");
    assert_eq!(again, body);

    // The same request with one more byte (a space the JSON ignores) is another request.
    let mut spaced = request.clone();
    spaced.push(b' ');
    assert_eq!(invoke_http(http, &spaced).1, "miss");
    let four = String::from_utf8(request.clone())
        .unwrap()
        .replacen("\"3\"", "\"4\"", 1);
    let (status, changed, other) = invoke_http(http, four.as_bytes());
    assert_eq!((status, changed.as_str()), (200, "miss"), "{other}");
    assert_ne!(other, body);

    // delete-resource is not idempotent: the whole sequence runs every time.
    let deleting = sequence_body(
        UNIT,
        json!([
            {"FunctionName": "get-replicas", "Arguments": []},
            {"FunctionName": "delete-resource", "Arguments": [
                {"Value": "apps/v1/Deployment"}, {"Value": "web"}
            ]}
        ]),
    );
    for _ in 0..2 {
        let (status, cache, body) = invoke_http(http, &deleting);
        assert_eq!((status, cache.as_str()), (200, "bypass"), "{body}");
    }

    // A sequence that fails answers `Success: false` each time, never kept.
    let failing = sequence_body(
        UNIT,
        json!([{"FunctionName": "yq", "Arguments": [{"Value": "error(\"boom\")"}]}]),
    );
    for _ in 0..2 {
        let (status, cache, body) = invoke_http(http, &failing);
        assert_eq!((status, cache.as_str()), (200, "miss"), "{body}");
        assert!(body.contains("\"Success\":false"), "{body}");
    }

    // A request that cannot run is refused each time, never kept.
    let broken = sequence_body(
        "kind: [unclosed\n",
        json!([{"FunctionName": "get-replicas", "Arguments": []}]),
    );
    for _ in 0..2 {
        let (status, cache, body) = invoke_http(http, &broken);
        assert_eq!((status, cache.as_str()), (400, "miss"), "{body}");
    }

    let series = |name: &str, labels: &str| {
        metric(metrics, &format!("{name}{{image=\"{CONFIGHUB}\"{labels}}}"))
    };
    assert_eq!(series("krm_cache_hits_total", ""), 1.0);
    assert_eq!(
        series("krm_cache_misses_total", ",reason=\"not_cacheable\""),
        2.0
    );
    server.terminate();
}

fn argument(value: pb::argument::Value) -> pb::Argument {
    pb::Argument {
        parameter_name: String::new(),
        value: Some(value),
    }
}

fn invocation(name: &str, arguments: Vec<pb::Argument>) -> pb::Invocation {
    pb::Invocation {
        function_name: name.to_owned(),
        arguments,
    }
}

/// set-replicas `replicas` then get-replicas over [`UNIT`], as a FunctionExecutor request.
fn replicas_request(replicas: i64) -> pb::InvokeRequest {
    pb::InvokeRequest {
        toolchain: "Kubernetes/YAML".to_owned(),
        config_data: UNIT.as_bytes().to_vec(),
        invocations: vec![
            invocation(
                "set-replicas",
                vec![argument(pb::argument::Value::IntValue(replicas))],
            ),
            invocation("get-replicas", Vec::new()),
        ],
        ..Default::default()
    }
}

/// One FunctionExecutor call: the `x-krm-cache` metadata and the response.
async fn invoke_grpc(
    client: &mut FunctionExecutorClient<tonic::transport::Channel>,
    request: &pb::InvokeRequest,
) -> (String, pb::InvokeResponse) {
    let response = client
        .invoke(request.clone())
        .await
        .unwrap_or_else(|status| panic!("{status:?}"));
    let cache = response
        .metadata()
        .get("x-krm-cache")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("absent")
        .to_owned();
    (cache, response.into_inner())
}

/// Over gRPC as over HTTP: a miss, then a hit with the same response; a changed byte misses;
/// a sequence with a function that is not idempotent bypasses.
#[tokio::test(flavor = "multi_thread")]
async fn confighub_grpc_sequences_of_pure_functions_are_answered_again() {
    let server = Server::start("{}\n", &[]);
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let request = replicas_request(7);
    let (first, response) = invoke_grpc(&mut client, &request).await;
    assert_eq!(first, "miss");
    assert!(response.success, "{:?}", response.error_messages);
    assert_eq!(
        String::from_utf8(response.config_data.clone()).unwrap(),
        UNIT.replace("replicas: 1", "replicas: 7")
    );
    let (second, again) = invoke_grpc(&mut client, &request).await;
    assert_eq!(second, "hit");
    assert_eq!(again, response);

    let mut changed = request.clone();
    changed.config_data = UNIT.replace("name: web", "name: weB").into_bytes();
    let (cache, other) = invoke_grpc(&mut client, &changed).await;
    assert_eq!(cache, "miss");
    assert_ne!(other, response);

    let mut deleting = request.clone();
    deleting.invocations.push(invocation(
        "delete-resource",
        vec![
            argument(pb::argument::Value::StringValue(
                "apps/v1/Deployment".into(),
            )),
            argument(pb::argument::Value::StringValue("web".into())),
        ],
    ));
    for _ in 0..2 {
        assert_eq!(invoke_grpc(&mut client, &deleting).await.0, "bypass");
    }
    server.terminate();
}

/// Sixteen identical FunctionExecutor requests at once run the sequence once: one miss,
/// fifteen shared; the next is a hit.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_concurrent_confighub_twins_run_once() {
    let (server, metrics) = with_metrics(&exec_chain_config(&[], "kit", ""));
    let client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let request = pb::InvokeRequest {
        toolchain: "Kubernetes/YAML".to_owned(),
        config_data: UNIT.as_bytes().to_vec(),
        invocations: vec![invocation(
            "kit/sleep",
            vec![argument(pb::argument::Value::IntValue(1500))],
        )],
        ..Default::default()
    };
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (mut client, request) = (client.clone(), request.clone());
            tokio::spawn(async move { invoke_grpc(&mut client, &request).await })
        })
        .collect();
    let mut headers = Vec::new();
    for answer in calls {
        let (header, response) = answer.await.unwrap();
        assert!(response.success, "{:?}", response.error_messages);
        headers.push(header);
    }
    let misses = headers.iter().filter(|h| *h == "miss").count();
    let shared = headers.iter().filter(|h| *h == "shared").count();
    assert_eq!((misses, shared), (1, 15), "{headers:?}");
    assert_eq!(invoke_grpc(&mut client.clone(), &request).await.0, "hit");
    assert_eq!(
        metric(
            metrics,
            &format!("krm_cache_misses_total{{image=\"{CONFIGHUB}\",reason=\"new\"}}")
        ),
        1.0
    );
    assert_eq!(
        metric(
            metrics,
            &format!("krm_cache_shared_total{{image=\"{CONFIGHUB}\"}}")
        ),
        15.0
    );
    server.terminate();
}

/// With the disk store, a ConfigHub answer survives a restart (its key holds across
/// processes); a restart whose configuration declares another attribute, or sets another
/// `max_message_bytes`, misses, since those decide answers too.
#[tokio::test(flavor = "multi_thread")]
async fn a_confighub_answer_survives_a_restart_unless_what_decides_it_changed() {
    let store = scratch();
    let config = with_disk(store.path(), "");
    let request = replicas_request(4);
    let server = Server::start(&config, &[]);
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let (first, response) = invoke_grpc(&mut client, &request).await;
    assert_eq!(first, "miss");
    assert_eq!(disk_entries(store.path()).len(), 1);
    drop(server);

    let server = Server::start(&config, &[]);
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let (again, kept) = invoke_grpc(&mut client, &request).await;
    assert_eq!(again, "hit", "{}", server.stderr());
    assert_eq!(kept, response);
    drop(server);

    let declaring = format!(
        "{config}executor:\n  attributes:\n  - name: team\n    upsert: true\n    paths: {{apps/v1/Deployment: [metadata.labels.team]}}\n"
    );
    let limited = format!("{config}max_message_bytes: 262144\n");
    for changed in [declaring, limited] {
        let server = Server::start(&changed, &[]);
        let mut client = FunctionExecutorClient::connect(server.endpoint())
            .await
            .unwrap();
        assert_eq!(
            invoke_grpc(&mut client, &request).await.0,
            "miss",
            "{changed}"
        );
    }
}

/// Calls `image` until its answer expires: each call a hit until one misses, which must come
/// within 30 s of `since`; `ttl` names the time-to-live in the failure.
async fn hits_until_expired(server: &Server, image: &str, input: &[u8], since: Instant, ttl: &str) {
    loop {
        let header = cache_header(server, image, input).await;
        if header == "miss" {
            return;
        }
        assert_eq!(header, "hit");
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the answer outlived its {ttl}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The function images the stand-in's pods run (their `function` containers), sorted.
fn function_images(cluster: &krm_kube_standin::fixture::Cluster) -> Vec<String> {
    let pods: serde_json::Value = serde_json::from_str(&pod_world::kubectl(
        cluster,
        &["get", "pods", "-n", pod_world::NAMESPACE, "-o", "json"],
    ))
    .unwrap();
    let mut images: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|pod| pod["spec"]["containers"].as_array().unwrap())
        .filter(|container| container["name"] == "function")
        .filter_map(|container| container["image"].as_str().map(str::to_owned))
        .collect();
    images.sort();
    images
}

/// A pod image marked cacheable is keyed by its digest: answered again, kept on disk across a
/// restart, until its tag is pushed to another image; then, once the pod evaluator has asked
/// the registry again, the call misses (`new_digest`), runs in a pod of the new digest and
/// answers as the new image does. A call by tag constraint is never cached.
#[tokio::test(flavor = "multi_thread")]
async fn a_marked_pod_image_is_keyed_by_its_digest_and_a_moved_tag_misses() {
    if !require_podman("the pod image's digest in the result cache's key") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world::pod_world)
        .await
        .unwrap();
    let cluster = &world.cluster;
    // The image's answer says which image it is: `marker` becomes its version.
    let push = |version: &str| {
        let script = format!("sed s/marker/{version}/; echo {version} >&2");
        let image = pod_world::function_image(&["/bin/sh", "-c", &script]);
        let reference = cluster
            .push(&image, "krm/moving:v1")
            .expect("function image");
        let digest = cluster.registry.digest_of(&reference).expect("its digest");
        (reference, digest)
    };
    let (image, first) = tokio::task::block_in_place(|| push("one"));
    let repository = image.trim_end_matches(":v1");
    let store = scratch();
    let config = format!(
        "{}{}",
        pod_world::runner_config(
            cluster,
            &world.wrapper,
            "      digest_recheck_interval: 1s\n"
        ),
        with_disk(
            store.path(),
            &format!("  images: [{{prefix: \"{repository}\", ttl_seconds: 600}}]\n")
        )
    );
    let input = resource_list(&["marker"]);
    let (server, metrics) = with_metrics(&config);
    let (cold, output) = call(&server, &image, &input)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(cold, "miss");
    assert!(String::from_utf8_lossy(&output).contains("name: one"));
    let (warm, again) = call(&server, &image, &input).await.unwrap();
    assert_eq!((warm.as_str(), &again), ("hit", &output));
    assert_eq!(function_images(cluster), [format!("{repository}@{first}")]);
    assert_eq!(
        disk_entries(store.path()).len(),
        1,
        "a pod answer named by its digest"
    );
    assert_eq!(
        metric(
            metrics,
            &format!("krm_cache_misses_total{{image=\"{image}\",reason=\"new\"}}")
        ),
        1.0
    );
    drop(server);

    // Restarted: the digest asked of the registry again names the same key, on disk.
    let (server, metrics_after) = with_metrics(&config);
    let (restarted, kept) = call(&server, &image, &input).await.unwrap();
    assert_eq!(
        (restarted.as_str(), &kept),
        ("hit", &output),
        "{}",
        server.stderr()
    );

    let (moved, second) = tokio::task::block_in_place(|| push("two"));
    assert_eq!(moved, image);
    assert_ne!(second, first);
    // Calls go on with the known digest until the evaluator's check (every second, in the
    // background) has seen the tag move.
    let started = Instant::now();
    let (header, output) = loop {
        let (header, output) = call(&server, &image, &input)
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
        if header != "hit" {
            break (header, output);
        }
        assert_eq!(output, kept);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the moved tag was never seen:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(header, "miss");
    assert!(
        String::from_utf8_lossy(&output).contains("name: two"),
        "{}",
        String::from_utf8_lossy(&output)
    );
    assert_ne!(output, kept);
    assert_eq!(
        metric(
            metrics_after,
            &format!("krm_cache_misses_total{{image=\"{image}\",reason=\"new_digest\"}}")
        ),
        1.0
    );
    // A pod of the new digest ran it; the old digest's pod takes no more calls and goes once
    // idle past its TTL.
    let images = function_images(cluster);
    assert!(
        images.contains(&format!("{repository}@{second}")),
        "{images:?}"
    );
    let (header, again) = call(&server, &image, &input).await.unwrap();
    assert_eq!((header.as_str(), &again), ("hit", &output));

    // Untagged, with a tag constraint only the call resolves: no digest to key it by before
    // the call, so never cached, although its repository is marked.
    for _ in 0..2 {
        let response = server
            .client()
            .await
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: input.clone(),
                image: repository.to_owned(),
                tag: "v1".to_owned(),
            })
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
        assert_eq!(response.metadata().get("x-krm-cache").unwrap(), "bypass");
        assert_eq!(response.into_inner().resource_list, output);
    }
}
