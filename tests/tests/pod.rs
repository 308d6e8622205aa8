//! The pod evaluator end to end: the real runner with the real `pod` plugin, against the
//! test-only Kubernetes API stand-in whose node runs every pod with podman (each pod on its own
//! 127.0.0.N address), pulling images from a local docker-registry. Why: whether pods are
//! created, reused and replaced can only be seen against a cluster, and none can run here.
//!
//! Needs podman, runc, docker-registry and busybox-static (tests/run.sh installs them): skipped
//! loudly without them, a failure under CI=true.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use krm_kube_standin::fixture::{Cluster, require_podman};
use krm_kube_standin::image::ScratchImage;
use krm_runner_tests::{Server, resource_list};
use tonic::Code;

const NAMESPACE: &str = "fns";

/// The static wrapper-server binaries, built by the crate's own script.
fn wrapper_binaries() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new("sh")
        .arg(repo.join("plugins/pod/wrapper-server/build-static.sh"))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("run build-static.sh");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("context dir").trim())
}

fn wrapper_image(context: &Path) -> ScratchImage {
    ScratchImage {
        files: vec![
            (
                context.join("wrapper-server"),
                "/home/nonroot/wrapper-server/wrapper-server".into(),
            ),
            (
                context.join("grpc-health-probe"),
                "/home/nonroot/wrapper-server/grpc-health-probe".into(),
            ),
        ],
        symlinks: Vec::new(),
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        user: None,
        workdir: None,
    }
}

/// A function image with no shell of its own in use: busybox `cat`, the identity function.
fn function_image(entrypoint: &[&str]) -> ScratchImage {
    ScratchImage {
        entrypoint: entrypoint.iter().map(|s| (*s).to_owned()).collect(),
        cmd: Vec::new(),
        ..ScratchImage::busybox()
    }
}

fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cluster.standin.kubeconfig)
        .args(args)
        .output()
        .expect("kubectl");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn names(cluster: &Cluster, kind: &str) -> Vec<String> {
    kubectl(cluster, &["get", kind, "-n", NAMESPACE, "-o", "name"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn runner_config(cluster: &Cluster, wrapper: &str, extra: &str) -> String {
    format!(
        "evaluators:\n  pod:\n    plugin: pod\n    config:\n      kubeconfig: \"{}\"\n      pod_namespace: {NAMESPACE}\n      wrapper_server_image: \"{wrapper}\"\n      plain_http_registries: [\"{}\"]\n      connect_via: pod_ip\n      owner: runner-a\n      readiness_timeout: 90s\n{extra}  default:\n    plugin: multi\n    config: {{chain: [pod]}}\n",
        cluster.standin.kubeconfig.display(),
        cluster.registry.host
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn cold_call_creates_a_pod_warm_call_reuses_it_and_a_deleted_pod_is_replaced() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let (cluster, wrapper) = (&world.cluster, &world.wrapper);
    let function = cluster
        .push(&function_image(&["/bin/cat"]), "krm/identity:v1")
        .expect("function image");

    let server = Server::start(&runner_config(cluster, wrapper, ""), &[]);
    let input = resource_list(&["cold"]);
    let mut request = tonic::Request::new(krm_runner_proto::evaluator::EvaluateFunctionRequest {
        resource_list: input.clone(),
        image: function.clone(),
    });
    request.set_timeout(Duration::from_secs(120));
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .unwrap_or_else(|status| {
            panic!(
                "cold call failed: {status:?}\nrunner log:\n{}",
                server.stderr()
            )
        });
    assert_eq!(response.metadata().get("x-krm-evaluator").unwrap(), "pod");
    assert_eq!(response.into_inner().resource_list, input);
    let pods = names(cluster, "pods");
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(names(cluster, "services").len(), 1);

    // Warm: the same pod serves, nothing new is created.
    for _ in 0..3 {
        let (response, evaluator) = server
            .call(&function, &resource_list(&["warm"]))
            .await
            .unwrap();
        assert_eq!(
            (response.resource_list, evaluator.as_str()),
            (resource_list(&["warm"]), "pod")
        );
    }
    assert_eq!(names(cluster, "pods"), pods);

    // Deleted behind the runner's back: the next call gets a new pod.
    kubectl(
        cluster,
        &[
            "delete",
            "-n",
            NAMESPACE,
            &pods[0],
            "--wait=true",
            "--timeout=60s",
        ],
    );
    let (response, _) = server
        .call(&function, &resource_list(&["again"]))
        .await
        .unwrap_or_else(|status| {
            panic!(
                "call after deletion failed: {status:?}\n{}",
                server.stderr()
            )
        });
    assert_eq!(response.resource_list, resource_list(&["again"]));
    let replaced = names(cluster, "pods");
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced, pods);

    // An image the registry does not have fails clearly and leaves nothing behind.
    let missing = format!("{}/krm/missing:v1", cluster.registry.host);
    let status = server
        .call(&missing, &resource_list(&["x"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains("krm/missing"),
        "{}",
        status.message()
    );
    assert_eq!(
        names(cluster, "pods").len(),
        1,
        "no pod for the missing image"
    );
}

/// Everything a pod test needs: the stand-in cluster with its registry, the wrapper image, and
/// the function images pushed.
struct PodWorld {
    cluster: Cluster,
    wrapper: String,
    _dir: tempfile::TempDir,
}

fn pod_world() -> PodWorld {
    // Short: podman refuses a run root longer than 50 characters.
    let dir = tempfile::Builder::new().prefix("kp").tempdir().unwrap();
    let context = wrapper_binaries();
    let cluster = Cluster::start(dir.path()).expect("stand-in cluster");
    let namespace = dir.path().join("namespace.yaml");
    std::fs::write(
        &namespace,
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"),
    )
    .unwrap();
    kubectl(&cluster, &["create", "-f", namespace.to_str().unwrap()]);
    let wrapper = cluster
        .push(&wrapper_image(&context), "krm/wrapper-server:test")
        .expect("wrapper image");
    PodWorld {
        cluster,
        wrapper,
        _dir: dir,
    }
}

async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !check() {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_concurrency_ttl_and_adoption() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    // No shell in this image: only busybox itself, run as `busybox cat`.
    let no_shell = ScratchImage {
        files: vec![(PathBuf::from("/bin/busybox"), "/bin/busybox".into())],
        symlinks: Vec::new(),
        entrypoint: vec!["/bin/busybox".into(), "cat".into()],
        cmd: Vec::new(),
        user: None,
        workdir: None,
    };
    let identity = cluster.push(&no_shell, "krm/no-shell:v1").expect("image");
    let failing = cluster
        .push(
            &function_image(&[
                "/bin/sh",
                "-c",
                "cat >/dev/null; echo 'the function broke' >&2; exit 1",
            ]),
            "krm/failing:v1",
        )
        .expect("image");
    let config = runner_config(
        cluster,
        &world.wrapper,
        "      pod_ttl: 3s\n      scan_interval: 500ms\n",
    );
    let server = Server::start(&config, &[]);

    // A function exiting 1: INTERNAL with Porch's prefix and its stderr.
    let status = server
        .call(&failing, &resource_list(&["x"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status
            .message()
            .starts_with(&format!("unable to evaluate {failing} with pod evaluator")),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("the function broke"),
        "{}",
        status.message()
    );

    // 50 concurrent calls to one image stay within its pod limit (1 by default).
    let mut calls = Vec::new();
    for index in 0..50 {
        let endpoint = server.endpoint();
        let image = identity.clone();
        calls.push(tokio::spawn(async move {
            let mut client =
                krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::connect(endpoint)
                    .await
                    .unwrap();
            let input = resource_list(&[&format!("c{index}")]);
            let response = client
                .evaluate_function(krm_runner_proto::evaluator::EvaluateFunctionRequest {
                    resource_list: input.clone(),
                    image,
                })
                .await
                .expect("concurrent call");
            assert_eq!(response.into_inner().resource_list, input);
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let pods = names(cluster, "pods");
    assert_eq!(
        pods.len(),
        2,
        "one pod per image (failing + no-shell): {pods:?}"
    );

    // A restarted runner adopts its pods instead of starting new ones.
    drop(server);
    let server = Server::start(&config, &[]);
    let (response, _) = server
        .call(&identity, &resource_list(&["adopted"]))
        .await
        .unwrap();
    assert_eq!(response.resource_list, resource_list(&["adopted"]));
    assert_eq!(
        names(cluster, "pods"),
        pods,
        "the same pods serve after the restart"
    );

    // Idle past the TTL: pods and services are deleted.
    eventually("TTL clean-up", Duration::from_secs(60), || {
        names(cluster, "pods").is_empty() && names(cluster, "services").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn runners_sharing_a_namespace_queue_limits_and_deadlines() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let identity = cluster
        .push(&function_image(&["/bin/cat"]), "krm/identity:v1")
        .expect("image");
    let slow = cluster
        .push(
            &function_image(&["/bin/sh", "-c", "sleep 2; cat"]),
            "krm/slow:v1",
        )
        .expect("image");
    let runner_a = Server::start(
        &runner_config(
            cluster,
            &world.wrapper,
            "      max_queued_calls: 1\n      max_waitlist_length: 1\n",
        ),
        &[],
    );
    let config_b =
        runner_config(cluster, &world.wrapper, "").replace("owner: runner-a", "owner: runner-b");
    let runner_b = Server::start(&config_b, &[]);
    runner_a
        .call(&identity, &resource_list(&["a"]))
        .await
        .unwrap();
    runner_b
        .call(&identity, &resource_list(&["b"]))
        .await
        .unwrap();
    assert_eq!(
        names(cluster, "pods").len(),
        2,
        "each runner has its own pod"
    );
    // Restarting runner B (which deletes pods it cannot use) leaves runner A's pod alone.
    drop(runner_b);
    let runner_b = Server::start(&config_b, &[]);
    runner_a
        .call(&identity, &resource_list(&["a2"]))
        .await
        .expect("runner A's pod still serves");
    drop(runner_b);

    // Queue limit: one pod, preferred load 1, one call may wait beyond it; a third is refused.
    runner_a
        .call(&slow, &resource_list(&["warm"]))
        .await
        .expect("slow pod warm");
    let mut in_flight = Vec::new();
    for _ in 0..2 {
        let endpoint = runner_a.endpoint();
        let image = slow.clone();
        in_flight.push(tokio::spawn(async move {
            let mut client =
                krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::connect(endpoint)
                    .await
                    .unwrap();
            client
                .evaluate_function(krm_runner_proto::evaluator::EvaluateFunctionRequest {
                    resource_list: resource_list(&["q"]),
                    image,
                })
                .await
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let status = runner_a
        .call(&slow, &resource_list(&["q"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("queue"), "{}", status.message());
    for call in in_flight {
        call.await.unwrap().expect("queued calls complete");
    }

    // A deadline shorter than a pod start: DEADLINE_EXCEEDED, and the half-started pod goes away.
    let fresh = cluster
        .push(&function_image(&["/bin/cat"]), "krm/fresh:v1")
        .expect("image");
    let before = names(cluster, "pods");
    let mut request = tonic::Request::new(krm_runner_proto::evaluator::EvaluateFunctionRequest {
        resource_list: resource_list(&["late"]),
        image: fresh.clone(),
    });
    request.set_timeout(Duration::from_millis(400));
    let status = runner_a
        .client()
        .await
        .evaluate_function(request)
        .await
        .unwrap_err();
    krm_runner_tests::assert_deadline_answer(&status);
    eventually(
        "the half-started pod to be deleted",
        Duration::from_secs(30),
        || names(cluster, "pods") == before,
    )
    .await;
    // The pool is clean: the next call starts a pod and succeeds.
    let (response, _) = runner_a
        .call(&fresh, &resource_list(&["fresh"]))
        .await
        .unwrap();
    assert_eq!(response.resource_list, resource_list(&["fresh"]));
}
