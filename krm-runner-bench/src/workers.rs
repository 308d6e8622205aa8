//! `--only workers`: what running caller programs in worker processes costs (the hop, against
//! the same call in the runner), and what it buys (CPU that stops at the deadline, memory that
//! goes back after a load).

use std::time::{Duration, Instant};

use krm_runner::Config;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;
use tonic::transport::Channel;

use super::{BenchArgs, BenchServer, ms, percentiles, status_kib};

/// The measurements, in the order the docs give them.
pub async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    hop(
        base,
        args,
        "Starlark (EvaluateFunction, a program setting one ConfigMap's namespace)",
        "KRM_RUNNER_EVALUATORS__STARLARK__ISOLATED",
        Call::Starlark,
    )
    .await?;
    hop(
        base,
        args,
        "yq (Invoke, `.metadata.name` of one ConfigMap)",
        "KRM_RUNNER_WORKERS__TYPED_FUNCTIONS",
        Call::Yq,
    )
    .await?;
    cpu_after_deadline(base).await?;
    memory_after_load(base).await
}

/// A small call the hop is measured on.
#[derive(Clone, Copy)]
enum Call {
    Starlark,
    Yq,
}

const UNIT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: v\n";

const STARLARK_PROGRAM: &str = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: ns\n  source: |\n    for r in ctx.resource_list[\"items\"]:\n      r[\"metadata\"][\"namespace\"] = \"prod\"\n";

impl Call {
    async fn once(self, server: &mut BenchServer, executor: &mut Executor) -> anyhow::Result<()> {
        match self {
            Call::Starlark => {
                server.call("starlark", STARLARK_PROGRAM.as_bytes()).await?;
            }
            Call::Yq => {
                let response = executor
                    .invoke(pb::InvokeRequest::kubernetes(
                        UNIT,
                        vec![pb::Invocation::positional("yq", &[".metadata.name"])],
                    ))
                    .await?
                    .into_inner();
                anyhow::ensure!(response.success, "yq failed: {:?}", response.error_messages);
            }
        }
        Ok(())
    }
}

type Executor = FunctionExecutorClient<Channel>;

async fn executor(server: &BenchServer) -> anyhow::Result<Executor> {
    Ok(FunctionExecutorClient::connect(server.endpoint.clone())
        .await?
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

/// `call` through a runner that sends it to a worker (the default) and through one where
/// `in_runner_setting` is `false`, calls alternating.
async fn hop(
    base: &Config,
    args: &BenchArgs,
    what: &str,
    in_runner_setting: &str,
    call: Call,
) -> anyhow::Result<()> {
    let in_worker = BenchServer::start(base, &[]).await?;
    let in_runner = match BenchServer::start(base, &[(in_runner_setting, "false".to_owned())]).await
    {
        Ok(server) => server,
        Err(error) => {
            in_worker.stop();
            return Err(error);
        }
    };
    let mut servers = [
        ("in a worker (the default)", in_worker, Vec::new()),
        ("in the runner's process", in_runner, Vec::new()),
    ];
    let outcome = async {
        let mut executors = Vec::new();
        for (_, server, _) in &servers {
            executors.push(executor(server).await?);
        }
        for _ in 0..50 {
            for ((_, server, _), executor) in servers.iter_mut().zip(&mut executors) {
                call.once(server, executor).await?;
            }
        }
        for _ in 0..args.calls {
            for ((_, server, times), executor) in servers.iter_mut().zip(&mut executors) {
                let started = Instant::now();
                call.once(server, executor).await?;
                times.push(started.elapsed());
            }
        }
        println!(
            "\n## Worker hop: {what} ({} calls each, alternating, over gRPC)",
            args.calls
        );
        println!("| runs | p50 | p99 |\n|---|---|---|");
        let mut p50s = Vec::new();
        for (label, _, times) in &mut servers {
            let (p50, p99) = percentiles(times);
            p50s.push(p50);
            println!("| {label} | {} | {} |", ms(p50), ms(p99));
        }
        println!(
            "| added by the worker at p50 (target 0.3 ms) | {} | |",
            ms(p50s[0].saturating_sub(p50s[1]))
        );
        anyhow::Ok(())
    }
    .await;
    for (_, server, _) in servers {
        server.stop();
    }
    outcome
}

/// Runaway programs answered at a 1 s deadline: how long the worker that ran each lives on
/// after the answer, and the CPU the runner and its workers use from 100 ms to 1.1 s after it.
async fn cpu_after_deadline(base: &Config) -> anyhow::Result<()> {
    let mut server = BenchServer::start(base, &[]).await?;
    let outcome = async {
        let mut executor = executor(&server).await?;
        println!("\n## CPU after the deadline (a runaway program, the caller's deadline 1 s)");
        println!(
            "| program | answered after | its worker stopped after the answer | CPU from +100 ms to +1.1 s (runner and workers) |\n|---|---|---|---|"
        );
        let nothing = format!("[{} | empty]", ["(1,1,1,1,1,1,1,1,1,1)"; 9].join(" | "));
        let starlark = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: spin\n  source: |\n    s = \"x\" * 200000000\n    n = 0\n    for i in range(100000):\n      n += s.count(\"y\")\n";
        for program in ["yq: a billion steps yielding nothing", "starlark: counting in a 200 MB string"] {
            settle().await;
            let before = tree(server.child.id());
            let started = Instant::now();
            if program.starts_with("yq") {
                let mut request = tonic::Request::new(pb::InvokeRequest::kubernetes(UNIT, vec![pb::Invocation::positional("yq", &[&nothing])]));
                request.set_timeout(Duration::from_secs(1));
                anyhow::ensure!(executor.invoke(request).await.is_err(), "{program} finished");
            } else {
                let mut request = tonic::Request::new(EvaluateFunctionRequest {
                    resource_list: starlark.as_bytes().to_vec(),
                    image: "starlark".into(),
                    tag: String::new(),
                });
                request.set_timeout(Duration::from_secs(1));
                anyhow::ensure!(
                    server.client.evaluate_function(request).await.is_err(),
                    "{program} finished"
                );
            }
            let answered = started.elapsed();
            let answer = Instant::now();
            // The worker that ran the program: the one that gained the most CPU during the call.
            let during = tree(server.child.id());
            let busy = during
                .iter()
                .filter(|(pid, _)| *pid != server.child.id())
                .max_by_key(|(pid, ticks)| {
                    ticks - before.iter().find(|(p, _)| p == pid).map_or(0, |(_, t)| *t)
                })
                .map(|(pid, _)| *pid);
            let stopped = match busy {
                Some(pid) => stopped_after(pid, answer).await,
                None => "no worker ran it".to_owned(),
            };
            tokio::time::sleep(Duration::from_millis(100).saturating_sub(answer.elapsed())).await;
            let from = tree(server.child.id());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let to = tree(server.child.id());
            let used: u64 = to
                .iter()
                .map(|(pid, ticks)| {
                    ticks - from.iter().find(|(p, _)| p == pid).map_or(0, |(_, t)| *t)
                })
                .sum();
            println!(
                "| {program} | {} | {stopped} | {} ms |",
                ms(answered),
                used * 1000 / ticks_per_second()
            );
        }
        anyhow::Ok(())
    }
    .await;
    server.stop();
    outcome
}

/// The runner's resident memory (and its workers') at start, right after ten 5 MB `Invoke`
/// sequences at once, and 30 s later.
async fn memory_after_load(base: &Config) -> anyhow::Result<()> {
    let server = BenchServer::start(base, &[]).await?;
    let outcome = async {
        settle().await;
        let runner = server.child.id();
        let at_start = (rss_kib(runner), tree_rss_kib(runner));
        let one: String = (0..64)
            .map(|i| format!("  k{i}: '{}'\n", "v".repeat(60)))
            .collect();
        let unit: String = (0..1_150)
            .map(|i| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\ndata:\n{one}---\n"
                )
            })
            .collect();
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let endpoint = server.endpoint.clone();
                let unit = unit.clone();
                tokio::spawn(async move {
                    let mut client = FunctionExecutorClient::connect(endpoint)
                        .await?
                        .max_decoding_message_size(64 << 20)
                        .max_encoding_message_size(64 << 20);
                    let response = client
                        .invoke(pb::InvokeRequest::kubernetes(
                            &unit,
                            vec![pb::Invocation::positional("set-label", &["tier", "web"])],
                        ))
                        .await?
                        .into_inner();
                    anyhow::ensure!(response.success, "{:?}", response.error_messages);
                    anyhow::Ok(())
                })
            })
            .collect();
        for call in calls {
            call.await??;
        }
        let after = (rss_kib(runner), tree_rss_kib(runner));
        let peak = peak_kib(runner);
        tokio::time::sleep(Duration::from_secs(30)).await;
        let later = (rss_kib(runner), tree_rss_kib(runner));
        println!(
            "\n## Memory after a load (ten {:.1} MB set-label sequences at once over Invoke)",
            unit.len() as f64 / 1e6
        );
        println!("| when | runner | runner and workers |\n|---|---|---|");
        for (when, (own, all)) in [
            ("at start", at_start),
            ("right after", after),
            ("30 s later (target: within 2x of start)", later),
        ] {
            println!("| {when} | {} | {} |", mib(own), mib(all));
        }
        println!("| runner's peak (VmHWM) | {} | |", mib(peak));
        anyhow::Ok(())
    }
    .await;
    server.stop();
    outcome
}

/// How long after `answer` the worker `pid` stopped working: it ended, or its CPU time stopped
/// growing (unchanged over 30 ms; the clock counts in ticks of 10 ms).
async fn stopped_after(pid: u32, answer: Instant) -> String {
    let ticks = |pid: u32| {
        processes()
            .into_iter()
            .find(|(p, _)| *p == pid)
            .map(|(_, fields)| cpu_ticks(&fields))
    };
    let mut last = ticks(pid);
    let mut still_since: Option<Duration> = None;
    while answer.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = ticks(pid);
        match now {
            None => return format!("{} (ended)", ms(still_since.unwrap_or(answer.elapsed()))),
            Some(_) if now == last => {
                let since = *still_since.get_or_insert(answer.elapsed());
                if answer.elapsed() - since >= Duration::from_millis(30) {
                    return format!("{} (idle)", ms(since));
                }
            }
            Some(_) => still_since = None,
        }
        last = now;
    }
    "still working after 5 s".to_owned()
}

/// Lets a runner's workers start (or be replaced) before a measurement.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `(pid, user + system CPU ticks)` of `runner` and its children.
fn tree(runner: u32) -> Vec<(u32, u64)> {
    let mut found: Vec<(u32, u64)> = Vec::new();
    for (pid, fields) in processes() {
        if pid == runner || parent(&fields) == Some(runner) {
            found.push((pid, cpu_ticks(&fields)));
        }
    }
    found
}

/// Each process's `/proc/PID/stat` fields after the command name.
fn processes() -> Vec<(u32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let after_name = &stat[stat.rfind(')')? + 1..];
            Some((
                pid,
                after_name.split_whitespace().map(str::to_owned).collect(),
            ))
        })
        .collect()
}

/// Field 4 (`ppid`), the second after the name.
fn parent(fields: &[String]) -> Option<u32> {
    fields.get(1)?.parse().ok()
}

/// Fields 14 and 15 (`utime`, `stime`).
fn cpu_ticks(fields: &[String]) -> u64 {
    let field = |at: usize| -> u64 { fields.get(at).and_then(|f| f.parse().ok()).unwrap_or(0) };
    field(11) + field(12)
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is handed over.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).unwrap_or(100).max(1)
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:").unwrap_or(0)
}

fn peak_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:").unwrap_or(0)
}

/// The runner's resident memory and its workers'.
fn tree_rss_kib(runner: u32) -> u64 {
    tree(runner).iter().map(|(pid, _)| rss_kib(*pid)).sum()
}
