//! Code a caller sends (yq programs, CEL expressions, Starlark scripts, an isolated plugin's
//! call) runs in worker processes: a program that exhausts memory, loops or crashes ends its
//! worker, never the runner; the call is answered naming the limit, the worker is replaced,
//! and none is left behind.
//!
//! The runner runs under a hard address-space cap of its own ([`RUNNER_MEMORY`]): a regression
//! that brought a program back into its process would abort it, failing the test, instead of
//! taking the machine's memory.

use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;
use krm_runner_tests::{
    Launch, Server, assert_deadline_answer, build_dir, call_with_remote_deadline, children_of,
    free_port, http_exchange, process_alive, resident_kib, scratch, wait_gone,
};
use serde_json::json;
use tonic::Code;

/// The runner's own address-space cap: far above what it needs, far below a runaway's ask.
const RUNNER_MEMORY: u64 = 8 << 30;

const UNIT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: '1'\n";

fn serve(extra: &str) -> (Server, u16) {
    let http = free_port();
    let server = Server::launch(
        &format!("confighub_listen: \"127.0.0.1:{http}\"\n{extra}"),
        &[],
        &Launch {
            memory_limit: Some(RUNNER_MEMORY),
            ..Launch::default()
        },
    );
    (server, http)
}

/// The runner's worker processes (its children started as `__worker`), with their state.
fn workers(server: &Server) -> Vec<(i32, char)> {
    children_of(server.pid() as i32)
        .into_iter()
        .filter(|child| {
            std::fs::read(format!("/proc/{}/cmdline", child.pid))
                .is_ok_and(|line| line.split(|&b| b == 0).any(|arg| arg == b"__worker"))
        })
        .map(|child| (child.pid, child.state))
        .collect()
}

/// Waits until the runner has exactly `count` workers, none a zombie; the workers.
fn settle(server: &Server, count: usize) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let found = workers(server);
        if found.len() == count && found.iter().all(|(_, state)| *state != 'Z') {
            return found.into_iter().map(|(pid, _)| pid).collect();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "expected {count} live workers, found {found:?}; stderr:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn executor(server: &Server) -> FunctionExecutorClient<tonic::transport::Channel> {
    FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap()
}

/// A sequence that needs no worker's limit: served.
async fn still_served(client: &mut FunctionExecutorClient<tonic::transport::Channel>) {
    let response = client
        .invoke(pb::InvokeRequest::kubernetes(
            UNIT,
            vec![pb::Invocation::positional("yq", &[".metadata.name"])],
        ))
        .await
        .expect("the runner still serves")
        .into_inner();
    assert!(response.success, "{:?}", response.error_messages);
    assert!(
        response.output_json.contains("web"),
        "{}",
        response.output_json
    );
}

fn starlark_list(source: &str) -> Vec<u8> {
    let source: String = source.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: prog\n  source: |\n{source}"
    )
    .into_bytes()
}

/// Faults 1 and 2 of the issue: each of these aborted the whole runner, or grew it past 4 GB.
#[tokio::test(flavor = "multi_thread")]
async fn yq_programs_that_exhaust_memory_end_only_their_worker() {
    let (server, _) = serve("");
    let mut client = executor(&server).await;
    let nine_levels = ["(1,1,1,1,1,1,1,1,1,1)"; 9].join(" | ");
    for program in [
        r#"(((("x" * 1000) * 1000) * 1000) * 1000) | length"#.to_owned(),
        format!("[{nine_levels}] | length"),
    ] {
        let status = client
            .invoke(pb::InvokeRequest::kubernetes(
                UNIT,
                vec![pb::Invocation::positional("yq", &[&program])],
            ))
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{program}: {status:?}"
        );
        assert!(
            status
                .message()
                .contains("more memory than a worker's limit of 1024 MiB"),
            "{program}: {}",
            status.message()
        );
        still_served(&mut client).await;
    }
    assert!(
        resident_kib(server.pid() as i32) < 512 * 1024,
        "the runner itself stayed small"
    );
}

/// Fault 10: a Starlark script asking for gigabytes in one step, through EvaluateFunction.
/// A set's storage (as a dict's) lives outside the interpreter's arena, in maps that once wrote
/// through the null pointer of the failed allocation and died of SIGSEGV (or SIGABRT in a debug
/// build).
#[tokio::test(flavor = "multi_thread")]
async fn a_starlark_script_that_exhausts_memory_ends_only_its_worker() {
    let (server, _) = serve("");
    for source in [
        "x = list(range(100000000))\n",
        "x = tuple(range(100000000))\n",
        "x = set(range(30000000))\n",
    ] {
        let status = server
            .call("starlark", &starlark_list(source))
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{source}: {status:?}"
        );
        assert!(
            status
                .message()
                .contains("more memory than a worker's limit of 1024 MiB (memory allocation of "),
            "{source}: {}",
            status.message()
        );
        let (_, evaluator) = server
            .call("starlark", &starlark_list("x = 1\n"))
            .await
            .expect("the runner still serves");
        assert_eq!(evaluator, "starlark");
    }
}

/// Faults 3, 4 and 11: programs that keep a core busy stop when the caller's deadline passes,
/// over HTTP (`X-Krm-Timeout`) and gRPC (`grpc-timeout`): their worker is killed, not left
/// running.
#[tokio::test(flavor = "multi_thread")]
async fn work_stops_when_the_callers_deadline_passes() {
    let (server, http) = serve("");
    // One idle worker per pool: confighub, starlark, typed functions.
    let before = settle(&server, 3);

    // A billion steps yielding nothing: no result or size check ever runs.
    let nothing = format!("[{} | empty]", ["(1,1,1,1,1,1,1,1,1,1)"; 9].join(" | "));
    let body = json!({
        "ToolchainType": "Kubernetes/YAML",
        "ConfigData": base64(UNIT),
        "FunctionInvocations": [{"FunctionName": "yq", "Arguments": [{"Value": nothing}]}],
    })
    .to_string();
    let started = Instant::now();
    let (status, answer) = http_exchange(
        http,
        "POST",
        "/function/kubernetes",
        "X-Krm-Timeout: 1\r\n",
        body.as_bytes(),
    );
    assert_eq!(status, 504, "{answer}");
    assert!(
        answer.contains("exceeded the caller's deadline"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_worker_replaced(&server, &before);

    // CEL comprehensions nested over a long list, through gRPC with a deadline.
    let items: Vec<String> = (0..12_000).map(|i| format!("  - {i}\n")).collect();
    let unit = format!("{UNIT}  list: x\nlist:\n{}", items.concat());
    let before = settle(&server, 3);
    let mut client = executor(&server).await;
    let mut call = tonic::Request::new(pb::InvokeRequest::kubernetes(
        &unit,
        vec![pb::Invocation::positional(
            "cel-validate",
            &["r.list.all(x, r.list.exists(y, y == x))"],
        )],
    ));
    call.set_timeout(Duration::from_millis(800));
    let Err(status) = client.invoke(call).await else {
        panic!("72 million comparisons do not finish within the deadline");
    };
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );
    assert_worker_replaced(&server, &before);
    still_served(&mut client).await;

    // A Starlark loop over a 200 MB string, through EvaluateFunction with a deadline.
    let before = settle(&server, 3);
    let status = call_with_remote_deadline(
        &server.endpoint(),
        EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: starlark_list(
                "s = \"x\" * 200000000\nn = 0\nfor i in range(100000):\n  n += s.count(\"y\")\n",
            ),
            image: "starlark".into(),
        },
        "1S",
    )
    .await
    .unwrap_err();
    assert_deadline_answer(&status);
    assert_worker_replaced(&server, &before);
}

/// One of `before` (the workers when a call started) is gone, killed with its call, and the
/// pool is back to as many live workers.
fn assert_worker_replaced(server: &Server, before: &[i32]) {
    let started = Instant::now();
    while before.iter().all(|pid| process_alive(*pid)) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no worker was killed with its call: {before:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    settle(server, before.len());
}

/// A worker killed from outside mid-call, an isolated plugin that aborts, and a pool whose
/// workers cannot start: each call is answered, naming what happened, and the runner serves on.
#[tokio::test(flavor = "multi_thread")]
async fn dead_and_unstartable_workers_fail_one_call_each() {
    let dir = scratch();
    let plugin = dir.path().join("libkrm_plugin_testkit_copy.so");
    std::fs::copy(build_dir().join("libkrm_plugin_testkit.so"), &plugin).unwrap();
    let (server, _) = serve(&format!(
        "evaluators:\n  kit:\n    plugin: {}\n    isolated: true\n  default:\n    plugin: multi\n    config: {{chain: [builtin, starlark, exec, kit]}}\n",
        plugin.display()
    ));

    // An abort, which no unwinding contains, ends only the worker.
    let status = server.call("testkit/abort", b"{}").await.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains("evaluator kit")
            && status.message().contains("killed by signal 6 (SIGABRT)"),
        "{}",
        status.message()
    );
    server.call("testkit/echo", b"{}").await.expect("served");

    // A worker killed from outside while it runs a call.
    let endless = starlark_list("for i in range(1000000000):\n  x = [i] * 10\n");
    let caller = {
        let endpoint = server.endpoint();
        tokio::spawn(async move {
            call_with_remote_deadline(
                &endpoint,
                EvaluateFunctionRequest {
                    tag: String::new(),
                    resource_list: endless,
                    image: "starlark".into(),
                },
                "60S",
            )
            .await
        })
    };
    let busy = busy_worker(&server);
    // SAFETY: plain syscall on a process this test found as the runner's worker.
    unsafe { libc::kill(busy, libc::SIGKILL) };
    let status = caller.await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains("killed by signal 9"),
        "{}",
        status.message()
    );
    server
        .call("starlark", &starlark_list("x = 1\n"))
        .await
        .expect("a new worker serves");

    // The plugin file goes away: its workers cannot start, and the runner says so per call.
    std::fs::remove_file(&plugin).unwrap();
    let killed: Vec<i32> = workers(&server).into_iter().map(|(pid, _)| pid).collect();
    for pid in &killed {
        // SAFETY: as above.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    // Dead before the call, so that none is handed out in the instant before its signal lands.
    assert_eq!(
        wait_gone(&killed, Duration::from_secs(10)),
        Vec::<i32>::new()
    );
    let status = server.call("testkit/echo", b"{}").await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("no worker of kit could start")
            && status.message().contains("libkrm_plugin_testkit_copy.so"),
        "{}",
        status.message()
    );
    let (_, evaluator) = server
        .call("krm-runner/identity", b"{\"items\": []}")
        .await
        .expect("the other evaluators serve on");
    assert_eq!(evaluator, "exec");
}

/// The worker using CPU time, while a call keeps one busy.
fn busy_worker(server: &Server) -> i32 {
    let started = Instant::now();
    loop {
        let ticks: Vec<(i32, u64)> = workers(server)
            .iter()
            .filter_map(|(pid, _)| Some((*pid, krm_runner_tests::process_stat(*pid)?.cpu_ticks)))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        for (pid, before) in ticks {
            let now = krm_runner_tests::process_stat(pid).map_or(0, |stat| stat.cpu_ticks);
            if now > before + 5 {
                return pid;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no worker got busy"
        );
    }
}

/// A flood of calls that each kill their worker, more at once than the pool has workers:
/// every one is answered, and afterwards the pools are back to their idle workers, none left
/// dying or unreaped, and the runner's own memory is where it started.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_killing_calls_leaves_the_pools_as_they_were() {
    let (server, _) = serve("workers:\n  max: 2\n");
    settle(&server, 3);
    let resident_before = resident_kib(server.pid() as i32);
    let mut calls = Vec::new();
    for _ in 0..8 {
        let endpoint = server.endpoint();
        calls.push(tokio::spawn(async move {
            call_with_remote_deadline(
                &endpoint,
                EvaluateFunctionRequest {
                    tag: String::new(),
                    resource_list: starlark_list("x = list(range(100000000))\n"),
                    image: "starlark".into(),
                },
                "60S",
            )
            .await
        }));
    }
    for call in calls {
        let status = call.await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    }
    server
        .call("starlark", &starlark_list("x = 1\n"))
        .await
        .expect("served after the flood");
    // Each worker either died of its call and was replaced, or (the interpreter's arena
    // reporting the failed allocation) survived it: either way three, none left dying.
    settle(&server, 3);
    assert!(
        resident_kib(server.pid() as i32) < resident_before + 64 * 1024,
        "the runner's memory grew: {resident_before} KiB -> {} KiB",
        resident_kib(server.pid() as i32)
    );
}

/// Fault 13: HTTP clients that hang up while their sequence runs (or waits for a worker) give
/// their place back at once: their workers are killed, and with every one of the HTTP
/// listener's places taken by such clients, the next request is served, not refused as busy
/// after waiting [`RECEIVE_LIMIT`](krm_runner_proto::serving::RECEIVE_LIMIT).
#[test]
fn http_clients_that_hang_up_free_their_place_and_their_worker() {
    use std::io::Write;
    let (server, http) = serve("");
    settle(&server, 3);
    // A billion steps yielding nothing: it would run for minutes, no deadline given.
    let endless = format!("[{} | empty]", ["(1,1,1,1,1,1,1,1,1,1)"; 9].join(" | "));
    let places = krm_runner_proto::serving::IN_FLIGHT_MESSAGES;
    let clients: Vec<std::net::TcpStream> = (0..places)
        .map(|client| {
            // Each its own unit, so that the result cache does not make them one run.
            let body = json!({
                "ToolchainType": "Kubernetes/YAML",
                "UnitSlug": format!("web-{client}"),
                "ConfigData": base64(UNIT),
                "FunctionInvocations": [{"FunctionName": "yq", "Arguments": [{"Value": endless}]}],
            })
            .to_string();
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", http)).unwrap();
            write!(
                stream,
                "POST /function/kubernetes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            stream
        })
        .collect();
    // The pool's workers all busy with them (the others wait for a worker), then they go.
    let typed_workers = 4;
    let started = Instant::now();
    while busy_workers(&server) < typed_workers {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the endless programs never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(clients);

    let (status, answer) = http_exchange(
        http,
        "POST",
        "/function/kubernetes",
        "",
        json!({
            "ToolchainType": "Kubernetes/YAML",
            "ConfigData": base64(UNIT),
            "FunctionInvocations": [{"FunctionName": "yq", "Arguments": [{"Value": ".metadata.name"}]}],
        })
        .to_string()
        .as_bytes(),
    );
    // With the departed clients' places still held, this would wait for one and be refused.
    assert_eq!(status, 200, "{answer}");
    // Their workers were killed, not left running their programs.
    let started = Instant::now();
    while busy_workers(&server) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "workers still run the departed clients' programs"
        );
    }
    settle(&server, 3);
}

/// How many of the runner's workers use CPU over 300 ms (at least 30 ms of it: a busy one on
/// a machine shared with the other tests still gets far more).
fn busy_workers(server: &Server) -> usize {
    let ticks = |pid: i32| krm_runner_tests::process_stat(pid).map_or(0, |stat| stat.cpu_ticks);
    let before: Vec<(i32, u64)> = workers(server)
        .iter()
        .map(|(pid, _)| (*pid, ticks(*pid)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    before
        .into_iter()
        .filter(|(pid, ticks_before)| ticks(*pid) >= *ticks_before + 3)
        .count()
}

/// Faults 8 and 9: ten sequences over 5 MB units at once over gRPC `Invoke` run in the
/// workers, so the runner's own peak stays a fraction of what they need together, and its
/// resident memory comes back to within twice its start-up size within 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn large_sequences_at_once_leave_the_runner_small() {
    // Without the result cache: the ten identical requests would run once (single flight) and
    // their 6 MB answer stay in the cache's memory, which is not what this measures.
    let (server, _) = serve("cache: {enabled: false}\n");
    settle(&server, 3);
    let runner = server.pid() as i32;
    let at_start = resident_kib(runner);
    let one: String = (0..64)
        .map(|i| format!("  k{i}: '{}'\n", "v".repeat(60)))
        .collect();
    let unit: String = (0..1_150)
        .map(|i| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\ndata:\n{one}---\n")
        })
        .collect();
    assert!(
        unit.len() > 5_000_000 && unit.len() < 6_000_000,
        "{}",
        unit.len()
    );
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let endpoint = server.endpoint();
            let unit = unit.clone();
            tokio::spawn(async move {
                let mut client = FunctionExecutorClient::connect(endpoint)
                    .await
                    .unwrap()
                    .max_decoding_message_size(64 << 20);
                // A deadline well past the queue's 30 s default: ten 5 MB sequences take
                // their turns on four workers, slowly on a loaded machine, and what this test
                // measures is memory, not waiting.
                let mut request = tonic::Request::new(pb::InvokeRequest::kubernetes(
                    &unit,
                    vec![pb::Invocation::positional("set-label", &["tier", "web"])],
                ));
                request.set_timeout(Duration::from_secs(600));
                client.invoke(request).await
            })
        })
        .collect();
    for call in calls {
        let response = call.await.unwrap().expect("answered").into_inner();
        assert!(response.success, "{:?}", response.error_messages);
        assert!(response.config_data.len() > unit.len());
    }
    // The runner only passes the units on: about 130 MB at its peak here, where running the
    // ten sequences itself takes it near 600 MB (and 4.3 GB on heavier functions).
    let peak = peak_kib(runner);
    assert!(peak < 384 * 1024, "the runner peaked at {peak} KiB");
    let started = Instant::now();
    while resident_kib(runner) > 2 * at_start {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the runner holds {} KiB 30 s after the calls; {at_start} KiB at start",
            resident_kib(runner)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The most memory a process has had resident, in KiB.
fn peak_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// SIGTERM: the runner stops its workers with itself.
#[test]
fn workers_end_with_the_runner() {
    let (server, _) = serve("");
    let pids = settle(&server, 3);
    let status = server.terminate();
    assert!(status.success(), "{status}");
    assert_eq!(wait_gone(&pids, Duration::from_secs(10)), Vec::<i32>::new());
}

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
