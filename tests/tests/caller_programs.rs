//! Property tests of the surfaces that take a caller's program or file: generated yq programs,
//! CEL expressions, where-filter patterns, Starlark scripts, Properties files and ConfigHub
//! request bodies, sent to a real runner over HTTP and gRPC. Whatever arrives, each call is
//! answered within a bound, with a status a client can act on and a bounded message; the
//! runner keeps serving, and afterwards its workers are back to their idle pools.
//!
//! The generators mix well-formed pieces (including the programs that once aborted the runner
//! or ran on after the deadline) with byte-level mutations. The runner runs under a hard
//! address-space cap of its own and its workers under a small one, so a program that reached
//! the runner's own process again would fail the test instead of taking the machine's memory.
//!
//! `cargo test` runs [`CASES`] cases per surface; `PROPTEST_CASES=1000 cargo test --workspace
//! --test caller_programs` runs a longer search.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Launch, Server, call_with_remote_deadline, children_of, free_port, http_exchange,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tonic::Code;

/// The runner's own address-space cap: far above what it needs, far below a runaway's ask.
const RUNNER_MEMORY: u64 = 8 << 30;

/// Cases per surface in a plain `cargo test`; `PROPTEST_CASES` overrides it.
const CASES: u32 = 48;

/// An error message longer than this quotes the input instead of naming the fault.
const MESSAGE_LIMIT: usize = 8 * 1024;

/// Each call's deadline, and the longest a program may keep its worker.
const DEADLINE_SECONDS: u64 = 2;

const UNIT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  labels: {app: web}\ndata:\n  a: '1'\n  b: two\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n";

/// A runner with workers whose limits a runaway reaches fast.
fn serve() -> (Server, u16) {
    let http = free_port();
    let server = Server::launch(
        &format!(
            "confighub_listen: \"127.0.0.1:{http}\"\nworkers:\n  memory_limit_mib: 512\n  cpu_seconds_per_call: {DEADLINE_SECONDS}\n"
        ),
        &[],
        &Launch {
            memory_limit: Some(RUNNER_MEMORY),
            ..Launch::default()
        },
    );
    (server, http)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(CASES),
        failure_persistence: None,
        ..Config::default()
    })
}

/// `pieces` joined by generated operators, sometimes grouped (where `grouped`), then mutated
/// byte by byte.
fn program(
    pieces: &'static [&'static str],
    joiners: &'static [&'static str],
    grouped: bool,
) -> impl Strategy<Value = String> {
    let joined = (
        prop::collection::vec(prop::sample::select(pieces), 1..5),
        prop::collection::vec(prop::sample::select(joiners), 4),
        0..if grouped { 3u8 } else { 1 },
    )
        .prop_map(|(pieces, joiners, grouping)| {
            let mut text = pieces[0].to_owned();
            for (piece, joiner) in pieces[1..].iter().zip(joiners) {
                text.push_str(joiner);
                text.push_str(piece);
            }
            match grouping {
                0 => text,
                1 => format!("[{text}]"),
                _ => format!("({text})"),
            }
        });
    (
        joined,
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 0..3),
    )
        .prop_map(|(text, edits)| mutate(text, &edits))
}

/// Applies (position, byte, operation) edits: 0 replaces, 1 inserts, 2 deletes; printable
/// ASCII only, so the result stays a string a JSON body can carry.
fn mutate(text: String, edits: &[(prop::sample::Index, u8, u8)]) -> String {
    let mut bytes = text.into_bytes();
    for (position, byte, operation) in edits {
        let byte = b' ' + byte % 95;
        if bytes.is_empty() {
            bytes.push(byte);
            continue;
        }
        let at = position.index(bytes.len());
        match operation {
            0 => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            _ => {
                bytes.remove(at);
            }
        }
    }
    String::from_utf8(bytes).expect("ASCII edits of ASCII")
}

const YQ_PIECES: &[&str] = &[
    ".",
    ".metadata.name",
    ".data",
    ".spec.replicas",
    "..",
    ".[]",
    "keys",
    "length",
    "to_entries",
    "map(.)",
    "select(.kind == \"ConfigMap\")",
    "\"x\" * 1000",
    "(1,1,1,1,1,1,1,1,1,1)",
    "empty",
    "tostring",
    "ascii_downcase",
    "test(\"a+\")",
    "[range(10)]",
    "limit(3; .[])",
    "group_by(.)",
    "@base64",
    "error(\"boom\")",
    "try error(\"x\") catch .",
    "if . then 1 else 2 end",
    ". as $x | $x",
    "{a: .}",
    ".a = 1",
    "add",
    "input",
    "env",
    "[paths]",
    "tojson",
    "fromjson",
    "def f: f; f",
    "recurse(.[])",
    "reduce .[] as $x (0; . + $x)",
    "$ENV",
    "splits(\"a\")",
    // Once these aborted the runner, grew it past 4 GB, or ran on for 44 s past the deadline.
    "((((\"x\" * 1000) * 1000) * 1000) * 1000)",
    "[(1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | (1,1,1,1,1,1,1,1,1,1) | empty]",
];

const CEL_PIECES: &[&str] = &[
    "true",
    "r.kind",
    "r.kind == 'Deployment'",
    "r.metadata.name",
    "size(r.data)",
    "has(r.spec)",
    "r.spec.replicas >= 2",
    "r.data.all(k, r.data.exists(j, j == k))",
    "[1, 2, 3].map(x, x * 2)",
    "r.metadata.name.matches('a+b*')",
    "1 / 0",
    "int('x')",
    "'a' + 'b'",
    "r.missing.field",
    "[[1]].all(x, x.all(y, [y].exists(z, z == y)))",
    "r",
    "{'a': 1}['b']",
    "r.metadata.labels.app.startsWith('w')",
    "dyn(r).spec",
    "r.list.all(x, r.list.exists(y, y == x))",
];

const WHERE_PIECES: &[&str] = &[
    "metadata.name = 'web'",
    "metadata.name LIKE 'w%'",
    "metadata.name LIKE '%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%b'",
    "metadata.name LIKE '_e_'",
    "spec.replicas > 1",
    "spec.replicas >= 'x'",
    "metadata.name IN ('a', 'web')",
    "ConfigHub.ResourceName = 'web'",
    "kind != 'Service'",
    "data.a ~ '^[0-9]+$'",
    "spec.template.spec.containers.*.image LIKE 'nginx%'",
];

const STARLARK_PIECES: &[&str] = &[
    "x = 1",
    "for r in ctx.resource_list['items']:\n  r['metadata']['name'] = 'b'",
    "x = list(range(100000000))",
    "for i in range(1000000000):\n  x = [i] * 10",
    "s = 'x' * 200000000\nn = 0\nfor i in range(100000):\n  n += s.count('y')",
    "x = 'x' * 100000000",
    "x = {}\nfor i in range(1000):\n  x[str(i)] = i",
    "def f(n):\n  return f(n + 1)\nf(0)",
    "fail('boom')",
    "x = [i for i in range(10)]",
    "while True:\n  pass",
    "x = 1 // 0",
    "load('@x', 'y')",
    "ctx.resource_list['items'] = []",
    "x = set(range(30000000))",
    "x = sorted([3, 1, 2])",
    "x = json.decode('[1')",
];

/// One ConfigHub request over HTTP; the status and body after checking the answer is one a
/// client can act on, with a bounded message.
fn invoke(port: u16, route: &str, body: &[u8]) -> (u16, String) {
    let started = Instant::now();
    let (status, answer) = http_exchange(
        port,
        "POST",
        route,
        &format!("X-Krm-Timeout: {DEADLINE_SECONDS}\r\n"),
        body,
    );
    // A deadline of two seconds answers within a few, however loaded the machine.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(
        matches!(status, 200 | 400 | 408 | 413 | 429 | 504),
        "status {status}: {answer}"
    );
    if status != 200 {
        assert!(answer.len() <= MESSAGE_LIMIT, "{status}: {answer}");
    } else {
        let response: Value = serde_json::from_str(&answer).expect("a JSON response");
        for message in response["ErrorMessages"].as_array().into_iter().flatten() {
            let message = message.as_str().unwrap_or_default();
            assert!(message.len() <= MESSAGE_LIMIT, "{message}");
        }
    }
    (status, answer)
}

fn body(toolchain: &str, data: &str, function: &str, arguments: &[&str]) -> Vec<u8> {
    json!({
        "ToolchainType": toolchain,
        "UnitSlug": "web",
        "ConfigData": STANDARD.encode(data),
        "FunctionInvocations": [{
            "FunctionName": function,
            "Arguments": arguments.iter().map(|value| json!({"Value": value})).collect::<Vec<_>>(),
        }],
    })
    .to_string()
    .into_bytes()
}

/// The runner answers a plain request, and its workers come back to the idle pools (one each:
/// typed functions, confighub, starlark), none a zombie and none still busy.
fn assert_serving_and_settled(server: &Server, port: u16) {
    let (status, answer) = http_exchange(
        port,
        "POST",
        "/function/kubernetes",
        "",
        &body("Kubernetes/YAML", UNIT, "yq", &[".metadata.name"]),
    );
    assert_eq!(status, 200, "{answer}");
    let started = Instant::now();
    loop {
        let workers: Vec<_> = children_of(server.pid() as i32)
            .into_iter()
            .filter(|child| {
                std::fs::read(format!("/proc/{}/cmdline", child.pid))
                    .is_ok_and(|line| line.split(|&b| b == 0).any(|arg| arg == b"__worker"))
            })
            .collect();
        // Extra workers started for a burst leave after the pools' idle timeout.
        if workers.len() <= 3 + 1 && workers.iter().all(|worker| worker.state == 'S') {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "workers left behind: {:?}\n{}",
            workers
                .iter()
                .map(|worker| (worker.pid, worker.state))
                .collect::<Vec<_>>(),
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn yq_programs() {
    let (server, port) = serve();
    runner()
        .run(
            &program(YQ_PIECES, &[" | ", ", ", " + ", " * ", " // "], true),
            |yq| {
                invoke(
                    port,
                    "/function/kubernetes",
                    &body("Kubernetes/YAML", UNIT, "yq", &[&yq]),
                );
                Ok(())
            },
        )
        .unwrap();
    assert_serving_and_settled(&server, port);
}

#[test]
fn cel_expressions() {
    let (server, port) = serve();
    // A list for comprehensions to run long over.
    let items: String = (0..12_000).map(|i| format!("- {i}\n")).collect();
    let unit =
        format!("{UNIT}---\napiVersion: v1\nkind: List\nmetadata:\n  name: l\nlist:\n{items}");
    runner()
        .run(
            &program(
                CEL_PIECES,
                &[" && ", " || ", " == ", " + ", " ? 1 : "],
                true,
            ),
            |cel| {
                invoke(
                    port,
                    "/function/kubernetes",
                    &body("Kubernetes/YAML", &unit, "cel-validate", &[&cel]),
                );
                Ok(())
            },
        )
        .unwrap();
    assert_serving_and_settled(&server, port);
}

#[test]
fn where_filter_patterns() {
    let (server, port) = serve();
    runner()
        .run(&program(WHERE_PIECES, &[" AND ", " OR "], true), |filter| {
            invoke(
                port,
                "/function/kubernetes",
                &body("Kubernetes/YAML", UNIT, "where-filter", &["*", &filter]),
            );
            Ok(())
        })
        .unwrap();
    assert_serving_and_settled(&server, port);
}

/// Properties files: keys of many segments, escapes, continuations, separators and noise, read
/// and written back through a getter, a setter and `validate`.
#[test]
fn properties_files() {
    let (server, port) = serve();
    let line = prop_oneof![
        "[a-z]{1,3}(\\.[a-z]{1,3}){0,80}[=:] ?[ -~]{0,20}",
        "[#!][ -~]{0,20}",
        "[a-z.]{1,10}=\\\\u[0-9a-fA-F]{4}",
        "[a-z]{1,5}=[a-z]{0,5}\\\\",
        "[ -~]{0,30}",
        Just("=".to_owned()),
    ];
    let file = prop::collection::vec(line, 0..40).prop_map(|lines| lines.join("\n"));
    let path = "[a-z]{1,3}(\\.[a-z*]{1,3}){0,70}";
    runner()
        .run(&(file, path), |(file, path)| {
            for (function, arguments) in [
                ("get-string-path", vec!["*", path.as_str()]),
                ("set-string-path", vec!["*", path.as_str(), "v"]),
                ("validate", vec![]),
            ] {
                invoke(
                    port,
                    "/function/properties",
                    &body("AppConfig/Properties", &file, function, &arguments),
                );
            }
            Ok(())
        })
        .unwrap();
    assert_serving_and_settled(&server, port);
}

/// ConfigHub request bodies: a valid request mutated byte by byte, and JSON of the wrong shape.
#[test]
fn confighub_request_bodies() {
    let (server, port) = serve();
    let valid =
        String::from_utf8(body("Kubernetes/YAML", UNIT, "set-replicas", &["*", "3"])).unwrap();
    let request = prop_oneof![
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8)
            .prop_map(move |edits| mutate(valid.clone(), &edits)),
        Just(r#"{"FunctionInvocations": [{"FunctionName": "yq", "Arguments": null}]}"#.to_owned()),
        Just(format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000))),
        Just(r#"{"ConfigData": "not base64!", "FunctionInvocations": []}"#.to_owned()),
        Just(format!(
            r#"{{"ConfigData": "{}"}}"#,
            STANDARD.encode("a: &a [*a]\n")
        )),
        "[ -~]{0,200}",
    ];
    runner()
        .run(&request, |request| {
            invoke(port, "/function/kubernetes", request.as_bytes());
            Ok(())
        })
        .unwrap();
    assert_serving_and_settled(&server, port);
}

/// Starlark scripts through gRPC `EvaluateFunction`, answered with a Porch status code.
#[test]
fn starlark_scripts() {
    let (server, port) = serve();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    runner()
        .run(&program(STARLARK_PIECES, &["\n"], false), |source| {
            // The indentation indicator keeps a program whose first line was mutated to start
            // with a space a valid block scalar; without it YAML takes that line's indentation
            // for the block's and the request is refused before any program runs.
            let indented: String = source.lines().map(|line| format!("    {line}\n")).collect();
            let resource_list = format!(
                "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: prog\n  source: |2\n{indented}"
            );
            let started = Instant::now();
            let answer = tokio.block_on(call_with_remote_deadline(
                &server.endpoint(),
                EvaluateFunctionRequest {
                    tag: String::new(),
                    resource_list: resource_list.into_bytes(),
                    image: "starlark".into(),
                },
                &format!("{DEADLINE_SECONDS}S"),
            ));
            assert!(started.elapsed() < Duration::from_secs(25), "{source}");
            if let Err(status) = answer {
                // A program that fails is Porch's INTERNAL "function failure"; any other
                // INTERNAL is the runner's own fault.
                let failed_program = status.code() == Code::Internal
                    && status.message().starts_with("starlark: error: function failure");
                assert!(
                    failed_program
                        || matches!(
                            status.code(),
                            Code::DeadlineExceeded | Code::Cancelled | Code::ResourceExhausted
                        ),
                    "{source}: {status:?}"
                );
                assert!(status.message().len() <= MESSAGE_LIMIT, "{source}: {status:?}");
            }
            Ok(())
        })
        .unwrap();
    assert_serving_and_settled(&server, port);
}
