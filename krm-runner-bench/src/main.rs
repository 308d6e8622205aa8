//! `krm-runner-bench`: the foundation's performance targets, measured in one run, against the
//! `krm-runner-server` and `krm-runner` built beside it.
//!
//! - `abi`: one call through the plugin boundary (the `testkit` plugin's echo, called directly
//!   and through `multi`), target < 1 µs;
//! - `grpc`: EvaluateFunction over loopback to a `krm-runner-server serve` child running `/bin/cat`
//!   through `exec`, against spawning `/bin/cat` directly, same input, same run; target < 1 ms
//!   added at p50 for a 1 KiB ResourceList;
//! - `rss`: resident memory of that idle server with its plugins loaded, target < 30 MiB;
//! - `builtin`: set-namespace, a starlark program setting the namespace, and set-labels over 10
//!   to 10,000 Deployments, inside the plugin, over gRPC and as a whole `krm-runner fn` process,
//!   against `kubectl kustomize` doing the same transformation in the same run (only up to
//!   `--kustomize-max` objects: it grows quadratically);
//! - `versions`: the same warm builtin call with an exact tag and with a tag constraint
//!   (Porch's request field 3), alternating, in the plugin and over gRPC; target: a constraint
//!   adds at most 50 µs.
//! - `telemetry` (only when asked for): the `grpc` call with tracing (every call sampled,
//!   exported over OTLP to a receiver in this process) and Prometheus metrics on, against a
//!   runner with both off, calls alternating; target: at most 5% slower at p50.
//! - `workers` (only when asked for): what the worker processes cost and what they keep: a small
//!   Starlark call and a small yq call each through a worker against the same call in the runner,
//!   alternating (target: the worker adds at most 0.3 ms at p50); the CPU the runner and its
//!   workers use after a runaway program's deadline answered (target: none after 100 ms); the
//!   runner's resident memory before, right after and 30 s after ten 5 MB sequences at once
//!   (target: back within 2x of its start-up size).
//! - `policy` (only when asked for): the trust policy's decision for one call
//!   (`Runtime::admit`) with 20 glob rules, the last one matching, against the same runtime
//!   without a policy, calls alternating; target: at most 5 µs added at p50. Then, with a
//!   local docker-registry (skipped, saying so, without it), a rule requiring a cosign
//!   signature: an image's first call (the signature fetched and verified) against its next
//!   calls (the digest remembered) and the same call without a policy.
//! - `wasm` (only when asked for; needs Debian's clang and wasi-libc): the C set-namespace of
//!   `tests/wasm/` built twice, as a native executable served by `exec` and as a WASI module
//!   served by `wasm`, over 100 objects: whole `krm-runner fn` processes compiling the module
//!   and finding it compiled, the native executable spawned, and warm gRPC calls of both
//!   alternating; target: a warm module call within 1 ms of the native executable at p50.
//! - `cache` (only when asked for): a Porch-like re-render (the same six-step pipeline over an
//!   unchanged 100-Deployment package, each step one EvaluateFunction) on a runner with the
//!   result cache against one without; a hit against the empty gRPC round trip (Health/Check);
//!   target: a hit adds at most 50 µs at p50. Then (with podman and the Kubernetes API
//!   stand-in; skipped, saying so, without them) a pod function marked cacheable: its hit
//!   against the warm pod call of the same function, alternating; target: 20 times faster.
//! - `schema` (only when asked for): what the Kubernetes schema costs: its deflated bytes in
//!   every binary, its first load (time and resident memory) in this process, and whole
//!   `krm-runner` processes that load it against the same processes that do not, alternating
//!   (`do validate` against `do no-placeholders`, a starlark program reading `ctx.open_api`
//!   against one that does not).

mod cache;
/// The pod evaluator's world in the Kubernetes API stand-in, as the pod tests build it.
#[path = "../../tests/tests/support/pod_world.rs"]
mod pod_world;
mod policy;
mod schema;
mod wasm;
mod workers;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Parser};
use krm_plugin_loader::HostCallContext;
use krm_runner::{Config, EvaluatorConfig, Flags, Purpose, Runtime};
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// The runner's own flags say where the plugins are and which configuration the measured
/// runners start from, as they do for `krm-runner-server`.
#[derive(Debug, Parser)]
#[command(
    name = "krm-runner-bench",
    version,
    about = "Measure the plugin boundary, gRPC calls against direct process spawns, and idle memory"
)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Calls per measurement.
    #[arg(long, default_value_t = 2000)]
    pub calls: usize,
    /// Size of the ResourceList sent in the gRPC measurement.
    #[arg(long, default_value_t = 1024)]
    pub payload_bytes: usize,
    /// Which measurements (comma-separated): abi, grpc, rss, builtin, versions, telemetry,
    /// workers, policy, wasm, cache, schema.
    #[arg(
        long,
        default_value = "abi,grpc,rss,builtin,versions",
        value_delimiter = ','
    )]
    pub only: Vec<String>,
    /// Deployment counts for the builtin measurement.
    #[arg(long, default_value = "10,100,1000,10000", value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Largest input `kubectl kustomize` is run on (it took 79 s at 5,000 objects here).
    #[arg(long, default_value_t = 1000)]
    pub kustomize_max: usize,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let config = match krm_runner::configuration(&cli.flags) {
        Ok(config) => config,
        Err(code) => return code.into(),
    };
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(tokio) => tokio,
        Err(error) => {
            eprintln!("krm-runner-bench: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = tokio.block_on(run(&config, &cli.bench));
    // Blocking threads may still be cleaning up cancelled calls; don't wait for them.
    tokio.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("krm-runner-bench: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    let wants = |name: &str| args.only.iter().any(|s| s == name);
    println!(
        "krm-runner-bench: {} calls per measurement, {} cores",
        args.calls,
        cores()
    );
    if wants("abi") {
        abi(base, args.calls.max(100) * 100)?;
    }
    if wants("telemetry") {
        telemetry(base, args).await?;
    }
    if wants("workers") {
        workers::run(base, args).await?;
    }
    if wants("policy") {
        policy::run(base, args).await?;
    }
    if wants("wasm") {
        wasm::run(base, args).await?;
    }
    if wants("cache") {
        cache::run(base, args).await?;
    }
    if wants("schema") {
        schema::run(args.calls.clamp(10, 200))?;
    }
    if wants("grpc") || wants("rss") || wants("builtin") || wants("versions") {
        let mut server = BenchServer::start(base, &[]).await?;
        let outcome = async {
            if wants("rss") {
                server.idle_rss().await?;
            }
            if wants("grpc") {
                server.grpc_vs_spawn(args).await?;
            }
            if wants("builtin") {
                builtin(base, &mut server, args).await?;
            }
            if wants("versions") {
                versions(base, &mut server, args).await?;
            }
            if wants("rss") {
                // After every call above: memory a long-running runner keeps.
                println!(
                    "\n| VmRSS after the calls above | {:.1} MiB |",
                    resident_mib(server.child.id())?
                );
            }
            anyhow::Ok(())
        }
        .await;
        server.stop();
        outcome?;
    }
    Ok(())
}

/// The runner's executable `name`, built beside this one (a cargo build folder).
pub(crate) fn beside_this(name: &str) -> anyhow::Result<PathBuf> {
    Ok(std::env::current_exe()?.with_file_name(name))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `base` serving the `testkit` plugin's echo alone (instance `echo`, behind `default`, a
/// `multi` chain).
fn echo_config(base: &Config) -> Config {
    let mut config = base.clone();
    config.evaluators.clear();
    config.disabled.clear();
    config.evaluators.insert(
        "echo".into(),
        EvaluatorConfig {
            plugin: "testkit".into(),
            config: serde_json::json!({}),
            isolated: false,
        },
    );
    config.evaluators.insert(
        "default".into(),
        EvaluatorConfig {
            plugin: "multi".into(),
            config: serde_json::json!({"chain": ["echo"]}),
            isolated: false,
        },
    );
    config.serve = "default".into();
    config
}

fn abi(base: &Config, calls: usize) -> anyhow::Result<()> {
    let runtime = Runtime::start(&echo_config(base), Purpose::Serve).map_err(|problems| {
        anyhow::anyhow!(
            "abi bench needs the testkit plugin: {}",
            problems.join("; ")
        )
    })?;
    let context = HostCallContext::new(None);
    println!("\n## Plugin boundary ({calls} calls, empty ResourceList)");
    println!("| path | ns per call |\n|---|---|");
    for (label, instance) in [
        ("host -> echo", "echo"),
        ("host -> multi -> host -> echo", "default"),
    ] {
        let instance = runtime.instance(instance).context("instance built")?;
        for _ in 0..calls / 10 {
            instance.evaluate(&context, None, "testkit/echo", b"").ok();
        }
        let started = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(instance.evaluate(&context, None, "testkit/echo", b"")).ok();
        }
        let per_call = started.elapsed().as_nanos() as f64 / calls as f64;
        println!("| {label} | {per_call:.0} |");
    }
    Ok(())
}

/// A `krm-runner-server serve` child on loopback: the embedded default chain (builtin, confighub,
/// starlark, exec), with exec mapping `bench/cat` to `/bin/cat`.
struct BenchServer {
    child: std::process::Child,
    client: FunctionEvaluatorClient<tonic::transport::Channel>,
    endpoint: String,
    dir: PathBuf,
}

impl BenchServer {
    /// `env`: variables set for the server; they are removed from its environment when empty.
    async fn start(base: &Config, env: &[(&str, String)]) -> anyhow::Result<Self> {
        Self::start_cached(base, env, false).await
    }

    /// As [`BenchServer::start`], with the result cache on or off (off for every measurement
    /// but the cache's own, so that repeated calls run their function each time).
    async fn start_cached(
        base: &Config,
        env: &[(&str, String)],
        cache: bool,
    ) -> anyhow::Result<Self> {
        Self::start_with(
            base,
            env,
            "  exec:\n    plugin: exec\n    config:\n      functions:\n        - {image: bench/cat, path: /bin/cat}\n",
            &format!("{{enabled: {cache}}}"),
        )
        .await
    }

    /// A server whose configuration's `evaluators:` section is `evaluators` (YAML, indented),
    /// with `cache` its `cache:` section (YAML on one line).
    async fn start_with(
        base: &Config,
        env: &[(&str, String)],
        evaluators: &str,
        cache: &str,
    ) -> anyhow::Result<Self> {
        if !Path::new("/bin/cat").exists() {
            bail!("the gRPC benchmark needs /bin/cat");
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("krm-runner-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let config_file = dir.join("config.yaml");
        // JSON is YAML, and keeps the list on one line.
        let plugin_dirs = serde_json::to_string(&base.plugin_dirs)?;
        std::fs::write(
            &config_file,
            format!(
                "listen: 127.0.0.1:{port}\nlog_level: warn\nplugin_dirs: {plugin_dirs}\ncache: {cache}\nevaluators:\n{evaluators}"
            ),
        )?;
        let mut command = Command::new(beside_this(krm_runner::SERVER_EXECUTABLE)?);
        for (name, value) in env {
            match value.as_str() {
                "" => command.env_remove(name),
                value => command.env(name, value),
            };
        }
        let mut child = command
            .arg("--config-file")
            .arg(&config_file)
            .arg("serve")
            .stdin(Stdio::null())
            .spawn()
            .context("starting krm-runner-server serve")?;
        let endpoint = format!("http://127.0.0.1:{port}");
        match Self::connect(endpoint.clone(), &mut child).await {
            Ok(client) => Ok(Self {
                child,
                client,
                endpoint,
                dir,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&dir);
                Err(error)
            }
        }
    }

    /// A client of the `child` server once it answers, within 20 s.
    async fn connect(
        endpoint: String,
        child: &mut std::process::Child,
    ) -> anyhow::Result<FunctionEvaluatorClient<tonic::transport::Channel>> {
        let started = Instant::now();
        loop {
            match FunctionEvaluatorClient::connect(endpoint.clone()).await {
                Ok(client) => {
                    return Ok(client
                        .max_decoding_message_size(64 << 20)
                        .max_encoding_message_size(64 << 20));
                }
                Err(_) if started.elapsed() < Duration::from_secs(20) => {
                    if let Some(status) = child.try_wait()? {
                        bail!("krm-runner serve exited early: {status}");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => bail!("cannot reach krm-runner serve: {error}"),
            }
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    async fn call(&mut self, image: &str, resource_list: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.call_tagged(image, "", resource_list).await
    }

    async fn call_tagged(
        &mut self,
        image: &str,
        tag: &str,
        resource_list: &[u8],
    ) -> anyhow::Result<Vec<u8>> {
        let response = self
            .client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: resource_list.to_vec(),
                image: image.into(),
                tag: tag.into(),
            })
            .await?;
        Ok(response.into_inner().resource_list)
    }

    async fn idle_rss(&self) -> anyhow::Result<()> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!(
            "\n## Idle runner memory (builtin, confighub, starlark, exec and multi plugins loaded, no call yet)"
        );
        println!("| measure | value |\n|---|---|");
        println!("| VmRSS | {:.1} MiB |", resident_mib(self.child.id())?);
        Ok(())
    }

    async fn grpc_vs_spawn(&mut self, args: &BenchArgs) -> anyhow::Result<()> {
        let payload = resource_list_of(args.payload_bytes);
        for _ in 0..50 {
            self.call("bench/cat", &payload).await?;
        }
        let mut over_grpc = Vec::with_capacity(args.calls);
        let wall = Instant::now();
        for _ in 0..args.calls {
            let started = Instant::now();
            let output = self.call("bench/cat", &payload).await?;
            over_grpc.push(started.elapsed());
            if output != payload {
                bail!("the runner returned something other than its input");
            }
        }
        let grpc_rate = args.calls as f64 / wall.elapsed().as_secs_f64();

        let mut direct = Vec::with_capacity(args.calls);
        let wall = Instant::now();
        for _ in 0..args.calls {
            let started = Instant::now();
            let output = spawn_with_input(Command::new("/bin/cat"), &payload)?;
            direct.push(started.elapsed());
            if output != payload {
                bail!("/bin/cat returned something other than its input");
            }
        }
        let direct_rate = args.calls as f64 / wall.elapsed().as_secs_f64();

        let (grpc_p50, grpc_p99) = percentiles(&mut over_grpc);
        let (direct_p50, direct_p99) = percentiles(&mut direct);
        println!(
            "\n## EvaluateFunction vs direct spawn ({} calls, {} B ResourceList, sequential)",
            args.calls,
            payload.len()
        );
        println!("| path | p50 | p99 | calls/s |\n|---|---|---|---|");
        println!(
            "| gRPC -> multi -> (builtin, confighub, starlark decline) -> exec -> /bin/cat | {} | {} | {grpc_rate:.0} |",
            ms(grpc_p50),
            ms(grpc_p99)
        );
        println!(
            "| spawn /bin/cat directly | {} | {} | {direct_rate:.0} |",
            ms(direct_p50),
            ms(direct_p99)
        );
        println!(
            "| added by the runner | {} | {} | |",
            ms(grpc_p50.saturating_sub(direct_p50)),
            ms(grpc_p99.saturating_sub(direct_p99))
        );
        Ok(())
    }
}

/// Counts the spans exported to it over OTLP/gRPC.
#[derive(Clone, Default)]
struct SpanCounter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

#[tonic::async_trait]
impl TraceService for SpanCounter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.0
            .fetch_add(spans, std::sync::atomic::Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn telemetry(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let receiver = listener.local_addr()?;
    let spans = SpanCounter::default();
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(spans.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let metrics_port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let on = [
        ("OTEL_TRACES_EXPORTER", "otlp".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{receiver}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".to_owned()),
        ("OTEL_METRICS_EXPORTER", "prometheus".to_owned()),
        ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1".to_owned()),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", metrics_port.to_string()),
    ];
    // Unset variables are removed from the server's environment.
    let unset = |keep: &[&str]| {
        on.clone().map(|(name, value)| {
            (
                name,
                if keep.contains(&name) {
                    value
                } else {
                    String::new()
                },
            )
        })
    };
    let mut metrics_only = unset(&["OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_PROMETHEUS_HOST"]);
    let own_port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    metrics_only[7] = ("OTEL_EXPORTER_PROMETHEUS_PORT", own_port.to_string());
    let runners = [
        ("telemetry off", unset(&[])),
        ("Prometheus metrics on", metrics_only),
        ("traces (all sampled, OTLP/gRPC) + metrics on", on),
    ];
    let mut servers = Vec::new();
    for (label, env) in &runners {
        match BenchServer::start(base, env).await {
            Ok(server) => servers.push((*label, server, Vec::new())),
            Err(error) => {
                for (_, server, _) in servers {
                    server.stop();
                }
                serving.abort();
                return Err(error);
            }
        }
    }
    let outcome = async {
        let payload = resource_list_of(args.payload_bytes);
        for _ in 0..50 {
            for (_, server, _) in &mut servers {
                server.call("bench/cat", &payload).await?;
            }
        }
        for _ in 0..args.calls {
            for (_, server, times) in &mut servers {
                let started = Instant::now();
                server.call("bench/cat", &payload).await?;
                times.push(started.elapsed());
            }
        }
        // The exporter sends every 200 ms; give it a few rounds.
        let expected = (args.calls + 50) * 3;
        let waited = Instant::now();
        while spans.0.load(std::sync::atomic::Ordering::Relaxed) < expected
            && waited.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "\n## Telemetry cost ({} calls each, alternating, {} B ResourceList, exec /bin/cat)",
            args.calls,
            payload.len()
        );
        println!("| runner | p50 | p99 | p50 vs off |\n|---|---|---|---|");
        let mut off_p50 = None;
        for (label, _, times) in &mut servers {
            let (p50, p99) = percentiles(times);
            let base_p50 = *off_p50.get_or_insert(p50);
            println!(
                "| {label} | {} | {} | {:+.1}% |",
                ms(p50),
                ms(p99),
                (p50.as_secs_f64() / base_p50.as_secs_f64() - 1.0) * 100.0
            );
        }
        println!(
            "| spans received | {} (3 per traced call) | | |",
            spans.0.load(std::sync::atomic::Ordering::Relaxed)
        );
        anyhow::Ok(())
    }
    .await;
    for (_, server, _) in servers {
        server.stop();
    }
    serving.abort();
    outcome
}

/// The catalog transformations, the instance running each, and their kustomize equivalents.
/// Block style throughout, as kpt writes ResourceLists (the builtins parse block YAML on a fast
/// path). The starlark case (the `starlark` plugin) is a program doing set-namespace's job, to
/// compare with the native function.
const BUILTIN_CASES: [(&str, &str, &str, &str); 3] = [
    (
        "builtin",
        "set-namespace",
        "data:\n    namespace: prod",
        "namespace: prod\n",
    ),
    (
        "starlark",
        "starlark",
        "data:\n    source: |\n      for r in ctx.resource_list[\"items\"]:\n        r[\"metadata\"][\"namespace\"] = \"prod\"",
        "namespace: prod\n",
    ),
    (
        "builtin",
        "set-labels",
        "data:\n    color: blue",
        "labels:\n- pairs: {color: blue}\n  includeSelectors: true\n  includeTemplates: true\n",
    ),
];

async fn builtin(base: &Config, server: &mut BenchServer, args: &BenchArgs) -> anyhow::Result<()> {
    let runtime = Runtime::start(base, Purpose::Serve)
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    let have_kubectl = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok();
    let dir = std::env::temp_dir().join(format!("krm-runner-bench-builtin-{}", std::process::id()));
    println!("\n## Builtin functions vs kubectl kustomize (wall time per run, median of runs)");
    println!(
        "| Deployments | function | in plugin | gRPC end to end | `krm-runner fn` process | `cat` process | `kubectl kustomize` | kustomize / fn |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &size in &args.sizes {
        let deployments = deployments(size);
        let runs = (2000 / size.max(1)).clamp(3, 50);
        for (instance, function, config, kustomization) in BUILTIN_CASES {
            let instance = runtime
                .instance(instance)
                .with_context(|| format!("the {instance} instance"))?;
            let input = format!(
                "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  {config}\n",
                indent_items(&deployments)
            )
            .into_bytes();
            let context = HostCallContext::new(None);
            let in_plugin = median(runs, || {
                let started = Instant::now();
                instance
                    .evaluate(&context, None, function, &input)
                    .map_err(|e| anyhow::anyhow!(e.message))?;
                Ok(started.elapsed())
            })?;
            let mut over_grpc = Vec::with_capacity(runs);
            for _ in 0..runs {
                let started = Instant::now();
                server.call(function, &input).await?;
                over_grpc.push(started.elapsed());
            }
            let over_grpc = percentiles(&mut over_grpc).0;
            // `krm-runner` itself, which runs `fn` without this executable, and `cat`, the
            // floor for any process that reads the input and writes it back, alternating so
            // that both see the same machine.
            let launcher = beside_this(krm_runner::FUNCTION_EXECUTABLE)?;
            let mut process = Vec::with_capacity(PROCESS_RUNS);
            let mut cat = Vec::with_capacity(PROCESS_RUNS);
            for _ in 0..PROCESS_RUNS {
                let mut command = Command::new(&launcher);
                command.args(["fn", function]);
                let started = Instant::now();
                spawn_with_input(command, &input)?;
                process.push(started.elapsed());
                let started = Instant::now();
                spawn_with_input(Command::new("cat"), &input)?;
                cat.push(started.elapsed());
            }
            let process = percentiles(&mut process).0;
            let cat = percentiles(&mut cat).0;
            let kustomize = if have_kubectl && size <= args.kustomize_max {
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("deployments.yaml"), &deployments)?;
                std::fs::write(
                    dir.join("kustomization.yaml"),
                    format!("resources: [deployments.yaml]\n{kustomization}"),
                )?;
                let started = Instant::now();
                let output = Command::new("kubectl")
                    .arg("kustomize")
                    .arg(&dir)
                    .output()?;
                if !output.status.success() {
                    bail!(
                        "kubectl kustomize failed: {}",
                        String::from_utf8_lossy(&output.stderr)
                    );
                }
                Some(started.elapsed())
            } else {
                None
            };
            println!(
                "| {size} | {function} | {} | {} | {} | {} | {} | {} |",
                ms(in_plugin),
                ms(over_grpc),
                ms(process),
                ms(cat),
                kustomize.map_or("not run".to_owned(), ms),
                kustomize.map_or(String::new(), |k| format!(
                    "{:.0}x",
                    k.as_secs_f64() / process.as_secs_f64()
                )),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// What a tag constraint adds to a warm call: set-namespace over 10 Deployments by the builtin,
/// once as `…:v0.4.1` and once as the untagged image with `~0.4.0` (which resolves to v0.4.1),
/// alternating so that both see the same load.
async fn versions(base: &Config, server: &mut BenchServer, args: &BenchArgs) -> anyhow::Result<()> {
    const REPOSITORY: &str = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
    const CONSTRAINT: &str = "~0.4.0";
    let exact = format!("{REPOSITORY}:v0.4.1");
    let runtime = Runtime::start(base, Purpose::Serve)
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    let instance = runtime
        .instance("builtin")
        .context("the builtin instance")?
        .clone();
    let (_, _, config, _) = BUILTIN_CASES[0];
    let input = format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  {config}\n",
        indent_items(&deployments(10))
    )
    .into_bytes();
    let plain = HostCallContext::new(None);
    let constrained = HostCallContext::with_tag(None, CONSTRAINT.to_owned());
    let mut in_plugin = (Vec::new(), Vec::new());
    let mut over_grpc = (Vec::new(), Vec::new());
    for round in 0..args.calls + 50 {
        let measure = |context: &HostCallContext, image: &str| -> anyhow::Result<Duration> {
            let started = Instant::now();
            instance
                .evaluate(context, None, image, &input)
                .map_err(|e| anyhow::anyhow!(e.message))?;
            Ok(started.elapsed())
        };
        // Which goes first alternates too, so that neither always follows the other's work.
        let (exact_time, constrained_time) = if round % 2 == 0 {
            (measure(&plain, &exact)?, measure(&constrained, REPOSITORY)?)
        } else {
            let constrained_time = measure(&constrained, REPOSITORY)?;
            (measure(&plain, &exact)?, constrained_time)
        };
        let (exact_grpc, constrained_grpc) = if round % 2 == 0 {
            let exact_grpc = timed_call(server, &exact, "", &input).await?;
            (
                exact_grpc,
                timed_call(server, REPOSITORY, CONSTRAINT, &input).await?,
            )
        } else {
            let constrained_grpc = timed_call(server, REPOSITORY, CONSTRAINT, &input).await?;
            (
                timed_call(server, &exact, "", &input).await?,
                constrained_grpc,
            )
        };
        // The first rounds warm caches and connections.
        if round >= 50 {
            in_plugin.0.push(exact_time);
            in_plugin.1.push(constrained_time);
            over_grpc.0.push(exact_grpc);
            over_grpc.1.push(constrained_grpc);
        }
    }
    if constrained.resolved().as_deref() != Some(exact.as_str()) {
        bail!(
            "the constraint resolved to {:?}, not {exact}",
            constrained.resolved()
        );
    }
    println!(
        "\n## Tag constraints: set-namespace over 10 Deployments, {exact} vs {REPOSITORY} with tag {CONSTRAINT:?} ({} calls each, alternating)",
        args.calls
    );
    println!(
        "| path | exact tag p50 | constraint p50 | added by the constraint |\n|---|---|---|---|"
    );
    for (label, (mut exact_times, mut constrained_times)) in
        [("in the plugin", in_plugin), ("over gRPC", over_grpc)]
    {
        let exact_p50 = percentiles(&mut exact_times).0;
        let constrained_p50 = percentiles(&mut constrained_times).0;
        println!(
            "| {label} | {} | {} | {:.1} µs |",
            ms(exact_p50),
            ms(constrained_p50),
            (constrained_p50.as_secs_f64() - exact_p50.as_secs_f64()) * 1e6
        );
    }
    Ok(())
}

async fn timed_call(
    server: &mut BenchServer,
    image: &str,
    tag: &str,
    input: &[u8],
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    server.call_tagged(image, tag, input).await?;
    Ok(started.elapsed())
}

fn median(
    runs: usize,
    mut measure: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let mut samples = (0..runs)
        .map(|_| measure())
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(percentiles(&mut samples).0)
}

/// Whole `krm-runner fn` and `cat` processes timed per size and function, each.
const PROCESS_RUNS: usize = 21;

/// `count` one-container Deployments, as a YAML stream.
pub(crate) fn deployments(count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  labels:\n    app: app-{i}\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n      labels:\n        app: app-{i}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.25\n        ports:\n        - containerPort: 80\n---\n"
            )
        })
        .collect()
}

pub(crate) fn indent_items(stream: &str) -> String {
    let mut out = String::with_capacity(stream.len() * 2);
    for document in stream.split("---\n").filter(|d| !d.trim().is_empty()) {
        let mut first = true;
        for line in document.lines() {
            out.push_str(if first { "- " } else { "  " });
            out.push_str(line);
            out.push('\n');
            first = false;
        }
    }
    out
}

/// Runs `command` with `input` on stdin and returns its stdout.
fn spawn_with_input(mut command: Command, input: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    Ok(output.stdout)
}

fn resource_list_of(bytes: usize) -> Vec<u8> {
    let mut text =
        String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    let mut index = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: bench-{index}\n  data:\n    key: value\n"
        ));
        index += 1;
    }
    text.into_bytes()
}

pub(crate) fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

pub(crate) fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

fn resident_mib(pid: u32) -> anyhow::Result<f64> {
    let kib = status_kib(pid, "VmRSS:").context("VmRSS in /proc/PID/status")?;
    Ok(kib as f64 / 1024.0)
}

/// A `kB` figure of `/proc/PID/status` (`field` with its colon, e.g. `VmRSS:`).
pub(crate) fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}
