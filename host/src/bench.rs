//! `krm-runner bench`: the foundation's performance targets, measured in one run.
//!
//! - `abi`: one call through the plugin boundary (the `testkit` plugin's echo, called directly
//!   and through `multi`), target < 1 µs;
//! - `grpc`: EvaluateFunction over loopback to a `krm-runner serve` child running `/bin/cat`
//!   through `exec`, against spawning `/bin/cat` directly, same input, same run; target < 1 ms
//!   added at p50 for a 1 KiB ResourceList;
//! - `rss`: resident memory of that idle server with its plugins loaded, target < 30 MiB.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use krm_plugin_api::host::HostCallContext;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;

use crate::config::{Config, EvaluatorConfig};
use crate::runtime::Runtime;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Calls per measurement.
    #[arg(long, default_value_t = 2000)]
    pub calls: usize,
    /// Size of the ResourceList sent in the gRPC measurement.
    #[arg(long, default_value_t = 1024)]
    pub payload_bytes: usize,
    /// Which measurements: abi, grpc, rss (comma-separated).
    #[arg(long, default_value = "abi,grpc,rss", value_delimiter = ',')]
    pub only: Vec<String>,
}

pub async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    let wants = |name: &str| args.only.iter().any(|s| s == name);
    println!(
        "krm-runner bench: {} calls per measurement, {} cores",
        args.calls,
        cores()
    );
    if wants("abi") {
        abi(base, args.calls.max(100) * 100)?;
    }
    if wants("grpc") || wants("rss") {
        grpc_and_rss(base, args, wants("grpc"), wants("rss")).await?;
    }
    Ok(())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn abi(base: &Config, calls: usize) -> anyhow::Result<()> {
    let mut config = base.clone();
    config.evaluators.clear();
    config.disabled.clear();
    config.evaluators.insert(
        "echo".into(),
        EvaluatorConfig {
            plugin: "testkit".into(),
            config: serde_json::json!({}),
        },
    );
    config.evaluators.insert(
        "default".into(),
        EvaluatorConfig {
            plugin: "multi".into(),
            config: serde_json::json!({"chain": ["echo"]}),
        },
    );
    config.serve = "default".into();
    let runtime = Runtime::start(&config).map_err(|problems| {
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
            instance.evaluate(&context, "testkit/echo", b"").ok();
        }
        let started = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(instance.evaluate(&context, "testkit/echo", b"")).ok();
        }
        let per_call = started.elapsed().as_nanos() as f64 / calls as f64;
        println!("| {label} | {per_call:.0} |");
    }
    Ok(())
}

async fn grpc_and_rss(
    base: &Config,
    args: &BenchArgs,
    grpc: bool,
    rss: bool,
) -> anyhow::Result<()> {
    let cat = PathBuf::from("/bin/cat");
    if !cat.exists() {
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
            "listen: 127.0.0.1:{port}\nlog_level: warn\nplugin_dirs: {plugin_dirs}\nevaluators:\n  exec:\n    plugin: exec\n    config:\n      functions:\n        - {{image: bench/cat, path: /bin/cat}}\n  default:\n    plugin: multi\n    config: {{chain: [exec]}}\n"
        ),
    )?;
    let mut server = Command::new(std::env::current_exe()?)
        .arg("--config-file")
        .arg(&config_file)
        .arg("serve")
        .stdin(Stdio::null())
        .spawn()
        .context("starting krm-runner serve")?;
    let outcome = measure_server(&mut server, port, args, grpc, rss).await;
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn measure_server(
    server: &mut std::process::Child,
    port: u16,
    args: &BenchArgs,
    grpc: bool,
    rss: bool,
) -> anyhow::Result<()> {
    let endpoint = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let mut client = loop {
        match FunctionEvaluatorClient::connect(endpoint.clone()).await {
            Ok(client) => break client,
            Err(_) if started.elapsed() < Duration::from_secs(20) => {
                if let Some(status) = server.try_wait()? {
                    bail!("krm-runner serve exited early: {status}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => bail!("cannot reach krm-runner serve: {error}"),
        }
    };
    if rss {
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!("\n## Idle runner memory (exec + multi plugins loaded, no call yet)");
        println!("| measure | value |\n|---|---|");
        println!("| VmRSS | {:.1} MiB |", resident_mib(server.id())?);
    }
    if !grpc {
        return Ok(());
    }
    let payload = resource_list_of(args.payload_bytes);
    let request = || EvaluateFunctionRequest {
        resource_list: payload.clone(),
        image: "bench/cat".into(),
    };
    for _ in 0..50 {
        client.evaluate_function(request()).await?;
    }
    let mut over_grpc = Vec::with_capacity(args.calls);
    let wall = Instant::now();
    for _ in 0..args.calls {
        let started = Instant::now();
        let response = client.evaluate_function(request()).await?;
        over_grpc.push(started.elapsed());
        if response.get_ref().resource_list != payload {
            bail!("the runner returned something other than its input");
        }
    }
    let grpc_rate = args.calls as f64 / wall.elapsed().as_secs_f64();

    let mut direct = Vec::with_capacity(args.calls);
    let wall = Instant::now();
    for _ in 0..args.calls {
        let started = Instant::now();
        let output = spawn_cat(&payload)?;
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
        "| gRPC -> multi -> exec -> /bin/cat | {} | {} | {grpc_rate:.0} |",
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

fn spawn_cat(input: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut child = Command::new("/bin/cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

fn resident_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("VmRSS in /proc/PID/status")?;
    Ok(kib / 1024.0)
}
