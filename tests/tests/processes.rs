//! Process discipline through the real runner: a function's processes, escaped ones included,
//! never outlive its call or the runner, and the runner never piles up zombies (as a subreaper,
//! or as PID 1 in its own PID namespace).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Launch, Server, children_of, exec_chain_config, have_tool, read_pids, resource_list, run_cli,
    scratch, script, wait_gone,
};

/// `exec` serving each (image, script) pair, behind a multi over `exec`.
fn config(functions: &[(&str, &std::path::Path)], extra: &str) -> String {
    exec_chain_config(functions, "exec", extra)
}

/// Shell lines that start processes escaping the function's process group and append their
/// pids to `pids`: a `setsid` child that has a child of its own, and a double-forked daemon.
/// They block until every pid is written, so none is missed.
fn escapees(pids: &Path) -> String {
    let pids = pids.display();
    format!(
        "setsid sh -c 'sleep 1000 & echo $$ $! >> {pids}; wait' </dev/null >/dev/null 2>&1 &\n\
         sh -c 'setsid sh -c \"echo \\$\\$ >> {pids}; exec sleep 1000\" </dev/null >/dev/null 2>&1 &' &\n\
         while [ \"$(wc -w < {pids} 2>/dev/null)\" != 3 ]; do sleep 0.01; done\n"
    )
}

/// A configuration serving `example.com/escapes:v1` with a function in `dir` that starts the
/// [`escapees`] and echoes its input; the file their pids go to, and the configuration.
fn escaping_function(dir: &Path) -> (PathBuf, String) {
    let pids_file = dir.join("pids");
    let function = script(dir, "escapes", &format!("{}cat", escapees(&pids_file)));
    (
        pids_file,
        config(&[("example.com/escapes:v1", &function)], ""),
    )
}

/// Children of `parent` that are zombies.
fn zombies_of(parent: i32) -> Vec<i32> {
    children_of(parent)
        .into_iter()
        .filter(|child| child.state == 'Z')
        .map(|child| child.pid)
        .collect()
}

/// Waits up to `limit` for `parent` to have no zombie children; returns those left.
fn wait_no_zombies(parent: i32, limit: Duration) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let zombies = zombies_of(parent);
        if zombies.is_empty() || started.elapsed() > limit {
            return zombies;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_that_leave_the_process_group_die_with_the_call() {
    let dir = scratch();
    let (pids_file, config) = escaping_function(dir.path());
    let server = Server::start(&config, &[]);
    let input = resource_list(&["a"]);
    let (response, _) = server
        .call("example.com/escapes:v1", &input)
        .await
        .expect("the function succeeds");
    assert_eq!(response.resource_list, input);
    let pids = read_pids(&pids_file, 3, Duration::from_secs(5));
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "escaped processes {alive:?} of {pids:?} survived the call"
    );
    let zombies = wait_no_zombies(server.pid() as i32, Duration::from_secs(5));
    assert!(zombies.is_empty(), "the runner left zombies: {zombies:?}");
    assert!(server.health_check().await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escapee_holding_the_output_pipe_fails_the_call_and_dies() {
    let dir = scratch();
    let pids_file = dir.path().join("pids");
    let function = script(
        dir.path(),
        "holds",
        // The function waits until the escapee is in its own session: under load it may not
        // have run yet when `cat` is done, and would die with the function's group.
        &format!(
            "setsid sh -c 'echo $$ > {pids}; exec sleep 1000' &\n\
             while [ ! -s {pids} ]; do sleep 0.01; done\ncat",
            pids = pids_file.display()
        ),
    );
    let server = Server::start(&config(&[("example.com/holds:v1", &function)], ""), &[]);
    let status = server
        .call("example.com/holds:v1", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert!(
        status.message().contains("held open"),
        "{}",
        status.message()
    );
    let pids = read_pids(&pids_file, 1, Duration::from_secs(5));
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(alive.is_empty(), "{alive:?} survived the call");
}

/// An escapee belongs to a call in flight when it starts; the sweep after another call ends
/// must leave it alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_calls_escapees_outlive_other_calls() {
    let dir = scratch();
    let pids_file = dir.path().join("pids");
    let started_file = dir.path().join("started");
    // Fails unless its escapees are still there after the other calls have ended.
    let long = script(
        dir.path(),
        "long",
        &format!(
            "{}touch {}\nsleep 1.5\n\
             for pid in $(cat {}); do grep -qv ') Z' /proc/$pid/stat || exit 7; done\ncat",
            escapees(&pids_file),
            started_file.display(),
            pids_file.display()
        ),
    );
    let short = script(
        dir.path(),
        "short",
        "setsid sleep 1000 </dev/null >/dev/null 2>&1 &\ncat",
    );
    let server = Server::start(
        &config(
            &[
                ("example.com/long:v1", &long),
                ("example.com/short:v1", &short),
            ],
            "",
        ),
        &[],
    );
    let mut client = server.client().await;
    let long_call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                tag: String::new(),
                resource_list: resource_list(&["a"]),
                image: "example.com/long:v1".into(),
            })
            .await
    });
    let started = Instant::now();
    while !started_file.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "long call never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..3 {
        server
            .call("example.com/short:v1", &resource_list(&["b"]))
            .await
            .expect("short call");
    }
    long_call
        .await
        .unwrap()
        .expect("the long call's escapees were left alone while it ran");
    let pids = read_pids(&pids_file, 3, Duration::from_secs(5));
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(alive.is_empty(), "{alive:?} survived the long call");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_kills_every_function_process_before_exiting() {
    let dir = scratch();
    let pids_file = dir.path().join("pids");
    let function = script(
        dir.path(),
        "hangs",
        &format!(
            "{}sleep 1000 &\necho $$ $! >> {}\nsleep 1000",
            escapees(&pids_file),
            pids_file.display()
        ),
    );
    let mut server = Server::start(
        &config(
            &[("example.com/hangs:v1", &function)],
            "shutdown_grace_seconds: 60\n",
        ),
        &[],
    );
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                tag: String::new(),
                resource_list: resource_list(&["a"]),
                image: "example.com/hangs:v1".into(),
            })
            .await
    });
    let pids = read_pids(&pids_file, 5, Duration::from_secs(10));
    server.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal(libc::SIGTERM);
    let status = tokio::task::spawn_blocking(move || {
        let status = server.wait_exit(Duration::from_secs(10));
        (status, server)
    })
    .await
    .unwrap();
    let (status, server) = status;
    let status = status.unwrap_or_else(|| panic!("runner still running: {}", server.stderr()));
    assert_eq!(status.code(), Some(1), "{}", server.stderr());
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "function processes {alive:?} of {pids:?} outlived the runner"
    );
    let _ = call.await;
}

/// As PID 1 (the runner image), a function that leaves a background child behind must not
/// leave a zombie per call.
#[tokio::test(flavor = "multi_thread")]
async fn as_pid_1_the_runner_reaps_what_functions_leave_behind() {
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    if !have_tool("unshare") {
        return;
    }
    if !root {
        krm_kube_standin::fixture::skip("making the runner PID 1 of a PID namespace needs root");
        return;
    }
    let dir = scratch();
    let function = script(
        dir.path(),
        "leaves",
        "sleep 0.05 &\nsetsid sleep 0.05 </dev/null >/dev/null 2>&1 &\ncat",
    );
    let server = Server::launch(
        &config(&[("example.com/leaves:v1", &function)], ""),
        &[],
        &Launch {
            // --kill-child: killing unshare (the Server's drop) kills the runner too, which
            // would otherwise live on, reparented, as PID 1 of its namespace.
            under: &["unshare", "--pid", "--kill-child", "--mount-proc"],
            ..Launch::default()
        },
    );
    let runner = children_of(server.pid() as i32)
        .first()
        .map(|stat| stat.pid)
        .expect("the runner under unshare");
    for _ in 0..20 {
        server
            .call("example.com/leaves:v1", &resource_list(&["a"]))
            .await
            .expect("call");
    }
    // Every background child has exited by now; as PID 1 the runner inherited them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let zombies = wait_no_zombies(runner, Duration::from_secs(5));
    assert!(
        zombies.is_empty(),
        "{} zombies under the runner as PID 1: {zombies:?}",
        zombies.len()
    );
    assert!(server.health_check().await.is_ok());
    // Stopped here, the runner is reaped by unshare, its parent; killed through unshare (the
    // drop), it would outlive unshare for an instant and be left for this machine's init.
    // SAFETY: plain syscall on the runner's pid, which unshare has not reaped yet.
    unsafe { libc::kill(runner, libc::SIGKILL) };
    let reaped = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{runner}")).exists() && Instant::now() < reaped {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `eval` makes one call and exits: the processes that escaped its function are ended as it
/// exits, without the sweep a server runs while it serves.
#[test]
fn eval_ends_the_processes_that_escape_its_function() {
    let dir = scratch();
    let (pids_file, config_text) = escaping_function(dir.path());
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, config_text).unwrap();
    let input = resource_list(&["a"]);
    let output = run_cli(
        &[
            "--config-file",
            config.to_str().unwrap(),
            "eval",
            "--image",
            "example.com/escapes:v1",
        ],
        &[],
        &input,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout, input);
    let pids = read_pids(&pids_file, 3, Duration::from_secs(5));
    let alive = wait_gone(&pids, Duration::from_secs(2));
    assert!(
        alive.is_empty(),
        "escaped processes {alive:?} of {pids:?} outlived eval"
    );
}
