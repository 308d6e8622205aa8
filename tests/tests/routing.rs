//! FunctionConfig routing through the real runner: FunctionConfig files on disk, the real
//! builtin, starlark and exec plugins, and the testkit plugin standing in for the pod evaluator (it
//! answers any call a FunctionConfig routes to it and logs the route it was given, so the
//! tests see the per-image pod settings the runner passes on). The cluster source runs against
//! the Kubernetes API stand-in, driven with the real `kubectl`.

use std::path::Path;
use std::time::{Duration, Instant};

use krm_runner_tests::{Server, have_tool, run_cli, scratch, script};

const PODS: &str = "pods";

/// A runner whose FunctionConfigs come from `functions_dir/../fc`, re-read every 100 ms.
fn routing_config(dir: &Path) -> String {
    format!(
        r#"serve: default
evaluators:
  builtin: {{plugin: builtin}}
  exec: {{plugin: exec}}
  {PODS}: {{plugin: testkit}}
  default: {{plugin: multi, config: {{chain: [builtin, exec]}}}}
function_configs:
  paths: ["{fc}"]
  reload_interval_seconds: 0.1
  functions_dir: "{bin}"
  executors: {{goExecutor: builtin, binaryExecutor: exec, podExecutor: {PODS}}}
"#,
        fc = dir.join("fc").display(),
        bin = dir.join("bin").display(),
    )
}

fn write_function_configs(dir: &Path, file: &str, yaml: &str) {
    std::fs::create_dir_all(dir.join("fc")).unwrap();
    // Write then rename, as a ConfigMap update does, so the runner never reads half a file.
    let staged = dir.join(format!(".{file}.tmp"));
    std::fs::write(&staged, yaml).unwrap();
    std::fs::rename(&staged, dir.join("fc").join(file)).unwrap();
}

/// A binary in `dir/bin` that echoes its input and says `marker` on stderr.
fn marker_binary(dir: &Path) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    script(&dir.join("bin"), "marker", "cat\necho marker >&2");
}

const SET_NAMESPACE: &str = r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-namespace}
spec:
  image: set-namespace
  prefixes: [example.com/fns]
  goExecutor: {tags: [v1]}
  binaryExecutor: {tags: [v1, v2], path: marker}
  podExecutor:
    timeToLive: 5m
    maxParallelExecutions: 3
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-labels}
spec:
  image: set-labels
  prefixes: [example.com/fns]
  binaryExecutor: {tags: [v1], path: /nonexistent/set-labels}
  podExecutor: {tags: [v1]}
"#;

/// A folder with the marker binary and [`SET_NAMESPACE`] as its FunctionConfigs.
fn with_set_namespace_configs() -> tempfile::TempDir {
    let dir = scratch();
    marker_binary(dir.path());
    write_function_configs(dir.path(), "fns.yaml", SET_NAMESPACE);
    dir
}

fn namespace_input() -> Vec<u8> {
    b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: fn-config}
  data: {namespace: routed}
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
"
    .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn executors_are_tried_in_the_pip_order_for_their_tags() {
    let dir = with_set_namespace_configs();
    let server = Server::start(&routing_config(dir.path()), &[]);

    // v1 is in goExecutor.tags: the builtin runs it, though it would not answer this
    // registry on its own.
    let (response, evaluator) = server
        .call("example.com/fns/set-namespace:v1", &namespace_input())
        .await
        .expect("goExecutor call");
    assert_eq!(evaluator, "builtin");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("namespace: routed"), "{output}");

    // v2 only in binaryExecutor.tags: the binary, relative to functions_dir.
    let (response, evaluator) = server
        .call("example.com/fns/set-namespace:v2", &namespace_input())
        .await
        .expect("binaryExecutor call");
    assert_eq!(evaluator, "exec");
    assert_eq!(String::from_utf8_lossy(&response.log).trim(), "marker");

    // v3: podExecutor lists no tags, so it takes every other tag, with its settings.
    let (response, evaluator) = server
        .call("example.com/fns/set-namespace:v3", &namespace_input())
        .await
        .expect("podExecutor call");
    assert_eq!(evaluator, PODS);
    let log = String::from_utf8(response.log).unwrap();
    assert!(log.contains(r#""executor":"podExecutor""#), "{log}");
    assert!(log.contains(r#""timeToLive":"5m""#), "{log}");
    assert!(log.contains(r#""maxParallelExecutions":3"#), "{log}");
    assert!(log.contains("FunctionConfig set-namespace ("), "{log}");

    // A repository the FunctionConfig does not list, and a digest reference: no
    // FunctionConfig applies, and the served chain (builtin, exec) declines both.
    for image in [
        "other.example/fns/set-namespace:v1",
        "example.com/fns/set-namespace@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let status = server
            .call(image, &namespace_input())
            .await
            .expect_err(image);
        assert_eq!(status.code(), tonic::Code::NotFound, "{image}: {status:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_binary_falls_through_to_pods() {
    let dir = with_set_namespace_configs();
    let server = Server::start(&routing_config(dir.path()), &[]);
    let (response, evaluator) = server
        .call(
            "example.com/fns/set-labels:v1",
            &krm_runner_tests::resource_list(&["a"]),
        )
        .await
        .expect("call");
    assert_eq!(evaluator, PODS);
    assert!(String::from_utf8_lossy(&response.log).contains("podExecutor"));

    let resolved = run_cli(
        &[
            "--config-file",
            &write_config(dir.path()),
            "functions",
            "--resolve",
            "example.com/fns/set-labels:v1",
        ],
        &[],
        b"",
    );
    let text = String::from_utf8_lossy(&resolved.stdout);
    assert!(resolved.status.success(), "{resolved:?}");
    assert!(
        text.contains("matched:         FunctionConfig set-labels ("),
        "{text}"
    );
    assert!(
        text.contains("binaryExecutor:  skipped: /nonexistent/set-labels: binary /nonexistent/set-labels is missing or not executable"),
        "{text}"
    );
    assert!(
        text.contains("podExecutor:     serves: the image in pods on evaluator \"pods\""),
        "{text}"
    );
    assert!(
        text.contains("goExecutor:      skipped: not configured"),
        "{text}"
    );
}

fn write_config(dir: &Path) -> String {
    let path = dir.join("runner.yaml");
    std::fs::write(&path, routing_config(dir)).unwrap();
    path.display().to_string()
}

#[test]
fn resolve_explains_unmatched_images_and_tags() {
    let dir = with_set_namespace_configs();
    let config = write_config(dir.path());
    let resolve = |image: &str| {
        let output = run_cli(
            &["--config-file", &config, "functions", "--resolve", image],
            &[],
            b"",
        );
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let text = resolve("example.com/fns/set-labels:v9");
    assert!(
        text.contains(r#"podExecutor:     skipped: tag "v9" not among ["v1"]"#),
        "{text}"
    );
    assert!(
        text.contains(r#"serves:          the served chain "default""#),
        "{text}"
    );
    let text = resolve("example.com/fns/set-namespace:v1");
    assert!(
        text.contains(
            r#"goExecutor:      serves: built-in function set-namespace on evaluator "builtin""#
        ),
        "{text}"
    );
    assert!(
        text.contains("binaryExecutor:  next if declined: "),
        "{text}"
    );
    let text = resolve("other.example/fns/set-namespace:v1");
    assert!(
        text.contains(r#"does not list repository "other.example/fns""#),
        "{text}"
    );
}

/// A runner whose goExecutor is the embedded default's in-process instances, `builtin` then
/// `starlark`, with FunctionConfigs for starlark and for a function neither implements.
fn in_process_config(dir: &Path) -> String {
    write_function_configs(
        dir,
        "fns.yaml",
        r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: starlark}
spec:
  image: starlark
  prefixes: [example.com/fns]
  goExecutor: {tags: [v1]}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: mystery}
spec:
  image: mystery
  prefixes: [example.com/fns]
  goExecutor: {tags: [v1]}
"#,
    );
    let path = dir.join("runner.yaml");
    std::fs::write(
        &path,
        format!(
            "function_configs:\n  paths: [\"{}\"]\n  executors: {{podExecutor: \"\"}}\n",
            dir.join("fc").display()
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn go_executor_ids_run_on_the_first_in_process_instance_implementing_them() {
    let dir = scratch();
    let config = in_process_config(dir.path());
    let cli = |args: &[&str]| {
        let args: Vec<&str> = ["--config-file", config.as_str()]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let output = run_cli(&args, &[], b"");
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
        )
    };

    let (code, text) = cli(&["functions", "--resolve", "example.com/fns/starlark:v1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(
            r#"goExecutor:      serves: built-in function starlark on evaluator "starlark""#
        ),
        "{text}"
    );
    let (code, text) = cli(&["functions", "--resolve", "example.com/fns/mystery:v1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(r#"no function "mystery" is compiled into evaluators "builtin", "confighub", "starlark""#),
        "{text}"
    );
    // The ahead-of-time round: the starlark entry is ready, the other names what is missing.
    let (code, text) = cli(&["functions", "--status"]);
    assert_eq!(code, Some(1), "{text}");
    let row = |image: &str| {
        text.lines()
            .find(|line| line.starts_with(image))
            .unwrap_or_else(|| panic!("no row for {image}:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("example.com/fns/starlark ")[1..6],
        ["goExecutor", "v1", "v1", "-", "Ready"],
        "{text}"
    );
    assert_eq!(
        row("example.com/fns/mystery ")[1..6],
        ["goExecutor", "v1", "-", "-", "Failed"],
        "{text}"
    );
    assert!(
        text.contains(r#"no built-in function "mystery" is compiled in"#),
        "{text}"
    );

    // A call: v1 is no tag the starlark plugin answers to on its own, nor this registry.
    let server = Server::start(&std::fs::read_to_string(&config).unwrap(), &[]);
    let input = b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: fn-config}
  data:
    source: |
      for r in ctx.resource_list[\"items\"]:
        r[\"metadata\"][\"namespace\"] = \"routed\"
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
";
    let (response, evaluator) = server
        .call("example.com/fns/starlark:v1", input)
        .await
        .expect("goExecutor call");
    assert_eq!(evaluator, "starlark");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("namespace: routed"), "{output}");
}

/// Polls `call` until it is served by `evaluator`, for up to 10 s.
async fn wait_for_evaluator(server: &Server, image: &str, evaluator: &str) {
    let started = Instant::now();
    loop {
        let served = server
            .call(image, &krm_runner_tests::resource_list(&["a"]))
            .await
            .map(|(_, served)| served);
        if served.as_ref().is_ok_and(|served| served == evaluator) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{image} still served by {served:?}, not {evaluator}; stderr:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to 10 s for the runner to log `needle`.
async fn wait_for_log(server: &Server, needle: &str) {
    let started = Instant::now();
    while !server.stderr().contains(needle) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{needle:?} never logged; stderr:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn identity(executor: &str) -> String {
    format!(
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {{name: identity}}\nspec:\n  image: identity\n  prefixes: [example.com/fns]\n  {executor}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_change_reroutes_and_an_invalid_one_changes_nothing() {
    let dir = scratch();
    marker_binary(dir.path());
    write_function_configs(
        dir.path(),
        "identity.yaml",
        &identity("binaryExecutor: {tags: [v1], path: marker}"),
    );
    let server = Server::start(&routing_config(dir.path()), &[]);
    let image = "example.com/fns/identity:v1";
    wait_for_evaluator(&server, image, "exec").await;

    // Rerouted to pods without a restart.
    write_function_configs(
        dir.path(),
        "identity.yaml",
        &identity("podExecutor: {tags: [v1]}"),
    );
    wait_for_evaluator(&server, image, PODS).await;

    // An invalid object (binaryExecutor without tags) is refused whole, with a log line
    // naming the file and the field; routing stays as it was.
    write_function_configs(
        dir.path(),
        "identity.yaml",
        &identity("binaryExecutor: {tags: [], path: marker}"),
    );
    wait_for_log(&server, "keeping the last good routing").await;
    let stderr = server.stderr();
    let refusal = stderr
        .lines()
        .find(|line| line.contains("keeping the last good routing"))
        .unwrap();
    assert!(refusal.contains("identity.yaml"), "{refusal}");
    assert!(refusal.contains("spec.binaryExecutor.tags"), "{refusal}");
    let (_, served) = server
        .call(image, &krm_runner_tests::resource_list(&["a"]))
        .await
        .expect("call after the invalid file");
    assert_eq!(served, PODS);
}

#[test]
fn config_check_reports_invalid_objects_and_conflicts() {
    let dir = with_set_namespace_configs();
    let config = write_config(dir.path());
    let check = |expect_ok: bool| {
        let output = run_cli(&["--config-file", &config, "config", "check"], &[], b"");
        assert_eq!(output.status.success(), expect_ok, "{output:?}");
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (stdout, _) = check(true);
    assert!(stdout.contains("2 FunctionConfigs OK"), "{stdout}");

    // A second object claiming spec.image set-labels, and a broken one.
    write_function_configs(
        dir.path(),
        "more.yaml",
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {name: labels-again}\nspec:\n  image: set-labels\n  podExecutor: {}\n",
    );
    let (_, stderr) = check(false);
    assert!(
        stderr.contains("FunctionConfig labels-again (")
            && stderr.contains("FunctionConfig set-labels (")
            && stderr.contains(r#"both claim spec.image "set-labels""#),
        "{stderr}"
    );
    write_function_configs(
        dir.path(),
        "broken.yaml",
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {name: broken}\nspec:\n  image: broken\n  goExecutor: {tags: [v1]}\n  podExecutor: {timeToLive: 3x}\n  binaryExectuor: {tags: [v1], path: x}\n",
    );
    let (_, stderr) = check(false);
    assert!(stderr.contains("broken.yaml"), "{stderr}");
    assert!(stderr.contains("spec.podExecutor.timeToLive"), "{stderr}");
    assert!(stderr.contains("binaryExectuor"), "{stderr}");

    // The server refuses to start on the same files, listing the problem.
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.podExecutor.timeToLive"));
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_up_waits_for_the_function_configs_and_sends_their_pod_settings() {
    let dir = with_set_namespace_configs();
    let server = Server::start(&routing_config(dir.path()), &[]);
    wait_for_log(&server, "testkit warm-up").await;
    // Only set-labels lists a podExecutor tag; warm-up uses it and the first prefix.
    let stderr = server.stderr();
    let warm_ups: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("testkit warm-up"))
        .collect();
    assert_eq!(warm_ups.len(), 1, "{stderr}");
    assert!(
        warm_ups[0].contains("testkit warm-up example.com/fns/set-labels:v1 "),
        "{stderr}"
    );
    assert!(warm_ups[0].contains("podExecutor"), "{stderr}");
}

// The cluster source needs the stand-in API server and kubectl, nothing else.
mod cluster {
    use super::*;
    use krm_kube_standin::StandIn;
    use std::process::Command;

    const NAMESPACE: &str = "porch-fn-system";

    fn kubectl(standin: &StandIn, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&standin.kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        let input = stdin.unwrap_or_default().to_owned();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn set_binary_tags(standin: &StandIn, tags: &str) {
        let patch = format!(r#"{{"spec":{{"binaryExecutor":{{"tags":{tags}}}}}}}"#);
        kubectl(
            standin,
            &[
                "patch",
                "functionconfigs",
                "identity",
                "-n",
                NAMESPACE,
                "--type=merge",
                "-p",
                &patch,
            ],
            None,
        );
    }

    /// The stand-in with the FunctionConfig CRD and the namespace, beside the `marker` binary.
    fn cluster_with_crd(dir: &Path) -> StandIn {
        marker_binary(dir);
        std::fs::create_dir_all(dir.join("fc")).unwrap();
        let standin = StandIn::start(&dir.join("standin")).expect("stand-in");
        let crd = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("deploy/kubernetes/crds/functionconfigs.yaml");
        kubectl(&standin, &["create", "-f", crd.to_str().unwrap()], None);
        // `kubectl create namespace` speaks protobuf, which the stand-in does not.
        kubectl(
            &standin,
            &["create", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n"
            )),
        );
        standin
    }

    /// A FunctionConfig `name` for `example.com/fns/<name>` running `marker` for `tag`.
    fn create_function_config(standin: &StandIn, name: &str, tag: &str) {
        let object = format!(
            "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  image: {name}\n  prefixes: [example.com/fns]\n  binaryExecutor: {{tags: [{tag}], path: marker}}\n"
        );
        kubectl(standin, &["create", "-f", "-"], Some(&object));
    }

    /// A field of FunctionConfig `name` (a kubectl jsonpath, without braces).
    fn get_field(standin: &StandIn, name: &str, field: &str) -> String {
        kubectl(
            standin,
            &[
                "get",
                "functionconfigs",
                name,
                "-n",
                NAMESPACE,
                "-o",
                &format!("jsonpath={{{field}}}"),
            ],
            None,
        )
    }

    fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < limit, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn cluster_function_configs_route_and_get_finalizer_and_status() {
        if !have_tool("kubectl") {
            return;
        }
        let dir = scratch();
        let standin = cluster_with_crd(dir.path());
        create_function_config(&standin, "identity", "v1");

        let config = format!(
            "{}  cluster: {{enabled: true, namespace: {NAMESPACE}, kubeconfig: \"{}\"}}\n",
            routing_config(dir.path()),
            standin.kubeconfig.display()
        );
        let server = Server::start(&config, &[]);
        let image = "example.com/fns/identity:v1";
        wait_for_evaluator(&server, image, "exec").await;

        let get = |field: &str| get_field(&standin, "identity", field);
        wait_until("finalizer and status", Duration::from_secs(10), || {
            get(".metadata.finalizers")
                .contains("config.porch.kpt.dev/functionconfig-function-runner")
                && get(".status.functionRunnerObservedGeneration") == "1"
        });
        assert_eq!(get(".status.error"), "");
        let ready = r#".status.conditions[?(@.type=="Ready")]"#;
        wait_until("the Ready condition", Duration::from_secs(10), || {
            get(&format!("{ready}.status")) == "True"
        });
        assert_eq!(get(".status.executors[0].resolvedTag"), "v1");
        assert_eq!(get(".status.executors[0].evaluator"), "exec");

        // An update that breaks the object: status and conditions say why, routing forgets it.
        set_binary_tags(&standin, r#"[]"#);
        wait_until("status error", Duration::from_secs(10), || {
            get(".status.error").contains("spec.binaryExecutor.tags")
                && get(".status.functionRunnerObservedGeneration") == "2"
        });
        assert_eq!(get(&format!("{ready}.status")), "False");
        assert_eq!(get(&format!("{ready}.reason")), "Invalid");
        assert_eq!(get(&format!("{ready}.message")), get(".status.error"));
        assert_eq!(get(&format!("{ready}.observedGeneration")), "2");
        assert_eq!(get(".status.executors"), "");
        let status = server
            .call(image, &krm_runner_tests::resource_list(&["a"]))
            .await
            .expect_err("no FunctionConfig any more");
        assert_eq!(status.code(), tonic::Code::NotFound);

        // Fixed again, then deleted: the runner removes its finalizer so the object goes.
        set_binary_tags(&standin, r#"["v1"]"#);
        wait_for_evaluator(&server, image, "exec").await;
        wait_until("Ready again", Duration::from_secs(10), || {
            get(&format!("{ready}.status")) == "True" && get(".status.error").is_empty()
        });
        kubectl(
            &standin,
            &[
                "delete",
                "functionconfigs",
                "identity",
                "-n",
                NAMESPACE,
                "--wait=false",
            ],
            None,
        );
        wait_until("the object to go", Duration::from_secs(10), || {
            kubectl(
                &standin,
                &["get", "functionconfigs", "-n", NAMESPACE, "-o", "name"],
                None,
            )
            .trim()
            .is_empty()
        });
        let status = server
            .call(image, &krm_runner_tests::resource_list(&["a"]))
            .await
            .expect_err("deleted FunctionConfig");
        assert_eq!(status.code(), tonic::Code::NotFound);
    }

    /// A cluster FunctionConfig's wasmExecutor (krm-runner's extension, which the generated CRD
    /// admits) naming a missing module: the status says `ModuleMissing` for its tag, and the
    /// binary after it serves.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_missing_wasm_executor_module_is_a_failed_condition() {
        if !have_tool("kubectl") {
            return;
        }
        let dir = scratch();
        let standin = cluster_with_crd(dir.path());
        let object = format!(
            "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {{name: identity, namespace: {NAMESPACE}}}\nspec:\n  image: identity\n  prefixes: [example.com/fns]\n  wasmExecutor: {{tags: [v1], path: missing.wasm}}\n  binaryExecutor: {{tags: [v1], path: marker}}\n"
        );
        kubectl(&standin, &["create", "-f", "-"], Some(&object));
        let config = format!(
            r#"serve: default
evaluators:
  exec: {{plugin: exec}}
  wasm: {{plugin: wasm, config: {{cache_dir: ""}}}}
  default: {{plugin: multi, config: {{chain: [exec]}}}}
function_configs:
  paths: []
  functions_dir: "{bin}"
  cluster: {{enabled: true, namespace: {NAMESPACE}, kubeconfig: "{kubeconfig}"}}
  executors: {{goExecutor: [], wasmExecutor: wasm, binaryExecutor: exec, podExecutor: ""}}
"#,
            bin = dir.path().join("bin").display(),
            kubeconfig = standin.kubeconfig.display(),
        );
        let server = Server::start(&config, &[]);
        wait_for_evaluator(&server, "example.com/fns/identity:v1", "exec").await;
        let get = |field: &str| get_field(&standin, "identity", field);
        let failed = r#".status.conditions[?(@.type=="Failed")]"#;
        wait_until("the Failed condition", Duration::from_secs(10), || {
            get(&format!("{failed}.status")) == "True"
        });
        assert_eq!(get(&format!("{failed}.reason")), "ModuleMissing");
        let module = dir.path().join("bin/missing.wasm");
        assert!(
            get(&format!("{failed}.message"))
                .contains(&format!("module {} is missing", module.display())),
            "{}",
            get(&format!("{failed}.message"))
        );
        let wasm = r#".status.executors[?(@.executor=="wasmExecutor")]"#;
        assert_eq!(get(&format!("{wasm}.state")), "Failed");
        assert_eq!(get(&format!("{wasm}.evaluator")), "wasm");
        let binary = r#".status.executors[?(@.executor=="binaryExecutor")]"#;
        assert_eq!(get(&format!("{binary}.state")), "Ready");
    }

    /// After the ahead-of-time round, the trust policy's decision about each executor tag is
    /// the `Allowed` condition: True for tags the policy allows, False naming the refused tag,
    /// its rule and reason.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_trust_policy_decision_is_the_allowed_condition() {
        if !have_tool("kubectl") {
            return;
        }
        let dir = scratch();
        let standin = cluster_with_crd(dir.path());
        create_function_config(&standin, "first-major", "v1");
        create_function_config(&standin, "second-major", "v2");
        let config = format!(
            "{}  cluster: {{enabled: true, namespace: {NAMESPACE}, kubeconfig: \"{}\"}}\n\
             policy:\n  default: deny\n  rules:\n  \
             - {{name: first-major, images: [\"example.com/fns/*\"], tags: \"< 2\", action: allow}}\n",
            routing_config(dir.path()),
            standin.kubeconfig.display()
        );
        let server = Server::start(&config, &[]);
        let allowed = r#".status.conditions[?(@.type=="Allowed")]"#;
        let condition = |name: &str| {
            (
                get_field(&standin, name, &format!("{allowed}.status")),
                get_field(&standin, name, &format!("{allowed}.reason")),
                get_field(&standin, name, &format!("{allowed}.message")),
            )
        };
        wait_until("both Allowed conditions", Duration::from_secs(20), || {
            !condition("first-major").0.is_empty() && !condition("second-major").0.is_empty()
        });
        assert_eq!(
            condition("first-major"),
            (
                "True".to_owned(),
                "Allowed".to_owned(),
                r#"binaryExecutor "v1": allowed by rule "first-major": allowed"#.to_owned()
            ),
            "{}",
            server.stderr()
        );
        assert_eq!(
            condition("second-major"),
            (
                "False".to_owned(),
                "Denied".to_owned(),
                r#"binaryExecutor "v2": denied by rule "default": no rule allows it and the policy's default is deny"#
                    .to_owned()
            ),
            "{}",
            server.stderr()
        );
        // Calls are decided as the condition says.
        wait_for_evaluator(&server, "example.com/fns/first-major:v1", "exec").await;
        let status = server
            .call(
                "example.com/fns/second-major:v2",
                &krm_runner_tests::resource_list(&["a"]),
            )
            .await
            .expect_err("refused by the policy");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    }
}

/// A FunctionConfig `many` whose binaryExecutor lists `count` tags and names a binary that
/// does not exist.
fn many_tags(count: usize) -> String {
    let tags: Vec<String> = (0..count).map(|patch| format!("v1.0.{patch}")).collect();
    format!(
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {{name: many}}\n\
         spec:\n  image: many\n  binaryExecutor: {{path: missing, tags: [{}]}}\n",
        tags.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_tag_list_is_refused_and_a_failing_one_logs_a_line_per_executor() {
    let dir = scratch();
    let config = write_config(dir.path());
    write_function_configs(dir.path(), "many.yaml", &many_tags(100_001));
    let refusal = "spec.binaryExecutor.tags: 100001 tags; at most 1000 are accepted";
    let check = run_cli(&["--config-file", &config, "config", "check"], &[], b"");
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{stderr:.2000}");
    assert!(
        stderr.contains("many.yaml") && stderr.contains(refusal),
        "{stderr:.2000}"
    );
    assert!(stderr.lines().count() <= 3, "{stderr:.2000}");
    // The server refuses to start on it, just as briefly.
    let serve = krm_runner_tests::run_cli_within(
        &["--config-file", &config, "serve"],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(serve.status.code(), Some(2), "{stderr:.2000}");
    assert!(stderr.contains(refusal), "{stderr:.2000}");
    assert!(stderr.lines().count() <= 3, "{stderr:.2000}");

    // At the limit it serves; its 1000 tags, all failing (no binary), make one warning.
    write_function_configs(dir.path(), "many.yaml", &many_tags(1000));
    let server = Server::start(&routing_config(dir.path()), &[]);
    wait_for_log(&server, "failed_tags=1000").await;
    let stderr = server.stderr();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("FunctionConfig many"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("BinaryMissing"),
        "{}",
        warnings[0]
    );
}
