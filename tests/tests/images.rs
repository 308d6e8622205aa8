//! The deploy images, built the way an operator builds them and run the way
//! deploy/kubernetes/runner.yaml runs them: the runner image (deploy/build-runner-image.sh, from
//! this build's runner and plugins) answers EvaluateFunction over gRPC on its published port and
//! passes the manifest's readiness probe; the wrapper-server image
//! (deploy/Containerfile.wrapper-server) installs its binaries into a volume, from which they
//! serve a function in another image, as in a function pod.
//!
//! Needs podman and runc (tests/run.sh installs them): skipped loudly without them, a failure
//! under CI=true.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use krm_kube_standin::fixture::require_podman;
use krm_kube_standin::node::allocate_ip;
use krm_kube_standin::podman::Podman;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use krm_runner_tests::{build_dir, run_cli, runner_binary, static_wrapper_server_context};
use serde_json::Value;

const SET_NAMESPACE: &str = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1";
/// Where function pods mount the wrapper server's volume (deploy/kubernetes/pod-template.yaml).
const TOOLS: &str = "/wrapper-server-tools";
const WRAPPER_PORT: u16 = 9446;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
}

/// What deploy/kubernetes/runner.yaml expects of the images.
struct Manifest {
    runner_image: String,
    runner_args: Vec<String>,
    wrapper_image: String,
    /// `runAsUser:runAsGroup`.
    user: String,
    port: u16,
    readiness_probe: Vec<String>,
}

impl Manifest {
    fn read() -> Self {
        let text = std::fs::read_to_string(repo().join("deploy/kubernetes/runner.yaml"))
            .expect("read runner.yaml");
        let deployment = text
            .split("\n---\n")
            .map(|document| yaml_serde::from_str::<Value>(document).expect("YAML"))
            .find(|document| document["kind"] == "Deployment")
            .expect("a Deployment in runner.yaml");
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let text = |value: &Value| value.as_str().expect("a string").to_owned();
        let texts = |value: &Value| -> Vec<String> {
            value.as_array().expect("a list").iter().map(text).collect()
        };
        let wrapper_image = container["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|variable| variable["name"] == "WRAPPER_SERVER_IMAGE")
            .map(|variable| text(&variable["value"]))
            .expect("WRAPPER_SERVER_IMAGE");
        Self {
            runner_image: text(&container["image"]),
            runner_args: texts(&container["args"]),
            wrapper_image,
            user: format!(
                "{}:{}",
                pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
            ),
            port: container["ports"][0]["containerPort"]
                .as_u64()
                .and_then(|port| u16::try_from(port).ok())
                .expect("containerPort"),
            readiness_probe: texts(&container["readinessProbe"]["exec"]["command"]),
        }
    }
}

/// A private podman environment whose containers and images are all removed when dropped,
/// pass or fail. Registered, so that if this process dies, the next stand-in removes them.
struct Images {
    podman: Podman,
    record: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl Images {
    fn new() -> Self {
        // Short: podman refuses a run root longer than 50 characters.
        let dir = tempfile::Builder::new().prefix("ki").tempdir().unwrap();
        let podman = Podman::new(&dir.path().join("pm")).expect("podman environment");
        let record = podman.register(&format!("images-test-{}", std::process::id()));
        Self {
            podman,
            record,
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> String {
        self.podman
            .run_blocking(args)
            .unwrap_or_else(|error| panic!("{error:#}"))
    }

    fn output(&self, args: &[&str]) -> Output {
        self.podman
            .std_command()
            .args(args)
            .output()
            .expect("run podman")
    }

    fn logs(&self, container: &str) -> String {
        let output = self.output(&["logs", container]);
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    }

    /// Runs the container's probe command until it exits 0, as the kubelet would.
    fn wait_until_ready(&self, container: &str, probe: &[String]) {
        let started = Instant::now();
        let mut exec = vec!["exec", container];
        exec.extend(probe.iter().map(String::as_str));
        loop {
            let output = self.output(&exec);
            if output.status.success() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{container} not ready within 60 s: {probe:?} said {}\ncontainer log:\n{}",
                String::from_utf8_lossy(&output.stderr),
                self.logs(container)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let _ = self
            .podman
            .run_blocking(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.podman.run_blocking(&["rmi", "--all", "--force"]);
        if let Some(record) = &self.record {
            Podman::unregister(record);
        }
    }
}

/// A ResourceList of two ConfigMaps, with set-namespace's functionConfig.
fn set_namespace_input() -> Vec<u8> {
    b"apiVersion: config.kubernetes.io/v1\n\
kind: ResourceList\n\
items:\n\
- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: one\n  data:\n    key: value\n\
- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: two\n    namespace: old\n\
functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: shipped\n"
        .to_vec()
}

/// EvaluateFunction over gRPC; returns the output and the `x-krm-evaluator` header.
fn evaluate(address: &str, image: &str, input: &[u8]) -> (Vec<u8>, String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let call = async {
        let mut client = FunctionEvaluatorClient::connect(format!("http://{address}"))
            .await
            .unwrap_or_else(|error| panic!("connect to {address}: {error}"));
        let response = client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: input.to_vec(),
                image: image.to_owned(),
                tag: String::new(),
            })
            .await
            .unwrap_or_else(|status| panic!("EvaluateFunction at {address}: {status:?}"));
        let evaluator = response
            .metadata()
            .get("x-krm-evaluator")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (response.into_inner().resource_list, evaluator)
    };
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), call).await })
        .unwrap_or_else(|_| panic!("EvaluateFunction at {address} took over 60 s"))
}

fn timed<T>(what: &str, step: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = step();
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    result
}

#[test]
fn runner_and_wrapper_server_images_build_and_serve() {
    if !require_podman("deploy images") {
        return;
    }
    let manifest = Manifest::read();
    runner_binary(); // fails clearly when the workspace was not built
    let images = Images::new();

    let wrapper_context = timed("static wrapper-server build", static_wrapper_server_context);
    let containerfile = repo().join("deploy/Containerfile.wrapper-server");
    timed("wrapper-server image build", || {
        images.run(&[
            "build",
            "--network",
            "none",
            "-f",
            containerfile.to_str().unwrap(),
            "-t",
            &manifest.wrapper_image,
            wrapper_context.to_str().unwrap(),
        ])
    });

    // The operator's script, with this build's runner and plugins and the private podman.
    let podman = images.podman.std_command();
    let output = timed("runner image build (build-runner-image.sh)", || {
        Command::new("sh")
            .arg(repo().join("deploy/build-runner-image.sh"))
            .arg("--build-dir")
            .arg(build_dir())
            .arg("--")
            .args(podman.get_args())
            .envs(
                podman
                    .get_envs()
                    .filter_map(|(key, value)| Some((key, value?))),
            )
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .expect("run build-runner-image.sh")
    });
    assert!(
        output.status.success(),
        "build-runner-image.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tag = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        tag.lines().last(),
        Some(manifest.runner_image.as_str()),
        "the script's default tag is the manifest's image"
    );
    for image in [&manifest.runner_image, &manifest.wrapper_image] {
        let size = images.run(&["image", "inspect", "--format", "{{.Size}}", image]);
        eprintln!("{image}: {} bytes", size.trim());
    }
    let user = images.run(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &manifest.runner_image,
    ]);
    assert_eq!(
        user.trim(),
        manifest.user,
        "image USER vs runAsUser:runAsGroup"
    );

    // The runner, as the Deployment runs it, published on its own loopback address.
    let runner_ip = allocate_ip().expect("a free 127.0.0.N");
    let runner_address = format!("{}:{}", runner_ip.addr(), manifest.port);
    let publish = format!("{runner_address}:{}", manifest.port);
    let hardened = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"];
    let mut run = vec!["run", "-d", "--name", "runner", "-p", &publish];
    run.extend(hardened);
    run.push(&manifest.runner_image);
    run.extend(manifest.runner_args.iter().map(String::as_str));
    images.run(&run);
    timed("runner container ready", || {
        images.wait_until_ready("runner", &manifest.readiness_probe)
    });
    // The shipped FunctionConfigs are in the image, where the runner looks beside its plugins.
    let logs = images.logs("runner");
    assert!(
        !logs.contains("no FunctionConfigs are installed"),
        "the image lacks the shipped FunctionConfigs: {logs}"
    );

    let input = set_namespace_input();
    // The same build's runner on the host, being the function, gives the expected answer.
    let host = run_cli(&["fn", "set-namespace"], &[], &input);
    assert!(host.status.success(), "{host:?}");
    let expected = String::from_utf8(host.stdout).unwrap();
    for name in ["one", "two"] {
        assert!(
            expected.contains(&format!("    name: {name}\n    namespace: shipped\n")),
            "{expected}"
        );
    }
    let (output, evaluator) = evaluate(&runner_address, SET_NAMESPACE, &input);
    assert_eq!(String::from_utf8(output).unwrap(), expected);
    assert_eq!(evaluator, "builtin");

    // The probe is honest: nothing listens on port 1.
    let mut probe_nothing = vec!["exec", "runner"];
    probe_nothing.extend(manifest.readiness_probe.iter().map(String::as_str));
    *probe_nothing.last_mut().unwrap() = "localhost:1";
    let refused = images.output(&probe_nothing);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "connection failure expected: {refused:?}"
    );

    // The init container's job: install the wrapper server and probe into the shared volume,
    // which belongs to the function container's user (here the runner image's).
    let tools = images.dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let (uid, gid) = manifest.user.split_once(':').unwrap();
    std::os::unix::fs::chown(&tools, uid.parse().ok(), gid.parse().ok()).unwrap();
    let volume = format!("{}:{TOOLS}", tools.display());
    let mut install = vec!["run", "--rm", "-v", &volume];
    install.extend(hardened);
    install.push(&manifest.wrapper_image);
    images.run(&install);
    for binary in ["wrapper-server", "grpc-health-probe"] {
        let installed = tools.join(binary);
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(wrapper_context.join(binary)).unwrap(),
            "{binary} installed byte for byte"
        );
        let mode = std::fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o555, "{binary} mode");
    }

    // The function container: another image (the runner's, being set-namespace) running the
    // installed wrapper server, ready by the installed probe, as in a function pod.
    let function_ip = allocate_ip().expect("a free 127.0.0.N");
    let function_address = format!("{}:{WRAPPER_PORT}", function_ip.addr());
    let publish = format!("{function_address}:{WRAPPER_PORT}");
    let read_only_volume = format!("{volume}:ro");
    let entrypoint = format!("{TOOLS}/wrapper-server");
    let port = WRAPPER_PORT.to_string();
    let mut run = vec![
        "run",
        "-d",
        "--name",
        "function",
        "-p",
        &publish,
        "-v",
        &read_only_volume,
        "--entrypoint",
        &entrypoint,
    ];
    run.extend(hardened);
    run.extend([
        manifest.runner_image.as_str(),
        "--port",
        &port,
        "--",
        "/home/nonroot/krm-runner",
        "fn",
        "set-namespace",
    ]);
    images.run(&run);
    let probe_address = format!("localhost:{WRAPPER_PORT}");
    let probe = [
        format!("{TOOLS}/grpc-health-probe"),
        "-addr".into(),
        probe_address,
    ];
    timed("function container ready", || {
        images.wait_until_ready("function", &probe)
    });
    let (output, _) = evaluate(&function_address, SET_NAMESPACE, &input);
    assert_eq!(String::from_utf8(output).unwrap(), expected);
}
