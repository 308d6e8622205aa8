//! The pod evaluator end to end: the real runner with the real `pod` plugin, against the
//! test-only Kubernetes API stand-in whose node runs every pod with podman (each pod on its own
//! 127.0.0.N address), pulling images from a local docker-registry. Why: whether pods are
//! created, reused and replaced can only be seen against a cluster, and none can run here.
//!
//! Needs podman, runc, docker-registry and busybox-static (tests/run.sh installs them): skipped
//! loudly without them, a failure under CI=true.

#[path = "support/pod_world.rs"]
mod pod_world;

use std::path::PathBuf;
use std::time::Duration;

use krm_kube_standin::fixture::{Cluster, require_podman};
use krm_kube_standin::image::ScratchImage;
use krm_kube_standin::registry::LocalRegistry;
use krm_runner_tests::{Server, resource_list};
use pod_world::{NAMESPACE, docker_config, function_image, kubectl, pod_world, runner_config};
use tonic::Code;

fn names(cluster: &Cluster, kind: &str) -> Vec<String> {
    kubectl(cluster, &["get", kind, "-n", NAMESPACE, "-o", "name"])
        .lines()
        .map(str::to_owned)
        .collect()
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
        tag: String::new(),
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
        "      pod_ttl: 15s\n      scan_interval: 500ms\n",
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
                    tag: String::new(),
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
        "one pod per image (failing + no-shell): {pods:?}\n{}",
        server.stderr()
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
                    tag: String::new(),
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
        tag: String::new(),
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

/// `kubectl get <what> -n fns -o json`, parsed.
fn kubectl_json(cluster: &Cluster, what: &[&str]) -> serde_json::Value {
    let mut args = vec!["get"];
    args.extend(what);
    args.extend(["-n", NAMESPACE, "-o", "json"]);
    serde_json::from_str(&kubectl(cluster, &args)).unwrap()
}

/// The `.dockerconfigjson` of Secret `name`, after checking its type.
fn pull_secret(cluster: &Cluster, name: &str) -> String {
    use base64::Engine as _;
    let secret = kubectl_json(cluster, &["secret", name]);
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson", "{secret}");
    let data = secret["data"][".dockerconfigjson"].as_str().unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn private_registry_secret_pull_secrets_and_authenticated_metadata() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let private = LocalRegistry::start_with_login(&cluster.dir.join("private"), "puller", "s3cret")
        .expect("registry with a login");
    assert!(private.refuses_anonymous(), "the registry needs the login");
    let [first, rotated] = ["krm/private:v1", "krm/rotated:v1"].map(|name| {
        cluster
            .push_to(&private, &function_image(&["/bin/cat"]), name)
            .expect("image pushed with the login")
    });
    // The wrapper comes from the open registry: credentials are matched by registry host.
    let config = runner_config(cluster, &world.wrapper, "").replace(
        &format!("[\"{}\"]", cluster.registry.host),
        &format!("[\"{}\", \"{}\"]", cluster.registry.host, private.host),
    );

    // Without the credentials the metadata fetch is refused and nothing is created.
    let anonymous = Server::start(&config, &[]);
    let status = anonymous
        .call(&first, &resource_list(&["x"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains(&format!(
            "unable to get the entrypoint for {first}: Not authorized"
        )),
        "{}",
        status.message()
    );
    drop(anonymous);
    assert!(names(cluster, "pods").is_empty());
    assert!(names(cluster, "secrets").is_empty());

    // With them (Porch's flags): the fetch authenticates, the Secret holds the file, the pod
    // names it and the node pulls with it.
    let secrets_dir = tempfile::tempdir().unwrap();
    let auth_file = secrets_dir.path().join(".dockerconfigjson");
    let auth_path = auth_file.to_str().unwrap();
    std::fs::write(&auth_file, docker_config(&private, "")).unwrap();
    let server = Server::start(
        &config,
        &[
            "--enable-private-registries",
            "--registry-auth-secret-path",
            auth_path,
            "--registry-auth-secret-name",
            "krm-pull",
        ],
    );
    let (response, _) = server
        .call(&first, &resource_list(&["private"]))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(response.resource_list, resource_list(&["private"]));
    assert_eq!(
        pull_secret(cluster, "krm-pull"),
        docker_config(&private, "")
    );
    let pods = kubectl_json(cluster, &["pods"]);
    let pod = &pods["items"][0];
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "krm-pull"}]),
        "{pod}"
    );

    // Rotated credentials: the next pod start updates the Secret.
    let rotated_config = docker_config(
        &private,
        ", \"other.example\": {\"username\": \"u\", \"password\": \"p\"}",
    );
    std::fs::write(&auth_file, &rotated_config).unwrap();
    server
        .call(&rotated, &resource_list(&["rotated"]))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(pull_secret(cluster, "krm-pull"), rotated_config);

    // A broken file fails the next pod start naming the file; warm pods keep serving.
    std::fs::write(&auth_file, "{\"auths\": ").unwrap();
    let status = server
        .call(
            &format!("{}/krm/never:v1", private.host),
            &resource_list(&["x"]),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains(auth_path)
            && status.message().contains("not a docker config JSON file"),
        "{}",
        status.message()
    );
    server
        .call(&first, &resource_list(&["warm"]))
        .await
        .expect("the warm pod still serves");
    assert_eq!(names(cluster, "pods").len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn private_registry_over_tls_with_a_custom_ca() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let registry = LocalRegistry::start_with_tls(&cluster.dir.join("tls")).expect("HTTPS registry");
    let image = cluster
        .push_to(&registry, &function_image(&["/bin/cat"]), "krm/tls:v1")
        .expect("image");
    let config = runner_config(cluster, &world.wrapper, "");

    // Its CA is nobody's: the metadata fetch refuses the certificate.
    let untrusting = Server::start(&config, &[]);
    let status = untrusting
        .call(&image, &resource_list(&["x"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("unable to get the entrypoint for {image}"))
            && status.message().contains("UnknownIssuer"),
        "the cause is named: {}",
        status.message()
    );
    drop(untrusting);

    // Trusted through Porch's flags (ca.crt in the mounted secret's folder): it works.
    let tls_secret = tempfile::tempdir().unwrap();
    std::fs::copy(
        registry.ca_file.as_ref().unwrap(),
        tls_secret.path().join("ca.crt"),
    )
    .unwrap();
    let server = Server::start(
        &config,
        &[
            "--enable-private-registries-tls",
            "--tls-secret-path",
            tls_secret.path().to_str().unwrap(),
        ],
    );
    let (response, _) = server
        .call(&image, &resource_list(&["tls"]))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(response.resource_list, resource_list(&["tls"]));
}

/// Start-up: a missing or broken docker config file is a configuration error naming the field
/// and the file (no cluster needed: it is found before the plugin talks to one).
#[test]
fn private_registry_files_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "not json").unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "evaluators:\n  pod:\n    plugin: pod\n    config:\n      wrapper_server_image: wrapper:v1\n  default:\n    plugin: multi\n    config: {chain: [pod]}\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.json");
    for (file, expected) in [
        (&missing, "no such file or directory"),
        (&broken, "not a docker config JSON file"),
    ] {
        let output = krm_runner_tests::run_cli(
            &[
                "--config-file",
                config.to_str().unwrap(),
                "--enable-private-registries",
                "--registry-auth-secret-path",
                file.to_str().unwrap(),
                "plugins",
            ],
            &[],
            b"",
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("registry_auth_secret_path: {}", file.display()))
                && stderr.contains(expected),
            "{stderr}"
        );
    }
}

/// A function that answers with one ConfigMap named after its host, i.e. the pod serving the
/// call, in a namespace named after its GREETING environment variable, after sleeping 2 s when
/// the input says "slow".
const WHOAMI: &str = r#"input=$(cat); case "$input" in *slow*) sleep 2;; esac; printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: %s\n    namespace: %s\n' "$(/bin/busybox hostname)" "${GREETING:-none}""#;

/// The pod that served a WHOAMI call.
fn served_by(response: &krm_runner_proto::evaluator::EvaluateFunctionResponse) -> String {
    let text = String::from_utf8_lossy(&response.resource_list);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("name: "))
        .unwrap_or_else(|| panic!("no name in {text}"))
        .to_owned()
}

/// `count` WHOAMI calls at once; the pods that served them.
async fn whoami_burst(server: &Server, image: &str, count: usize, input: &str) -> Vec<String> {
    let calls: Vec<_> = (0..count)
        .map(|_| {
            let (endpoint, image, input) = (server.endpoint(), image.to_owned(), input.to_owned());
            tokio::spawn(async move {
                let mut client =
                    krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::connect(endpoint)
                        .await
                        .unwrap();
                let response = client
                    .evaluate_function(krm_runner_proto::evaluator::EvaluateFunctionRequest {
                        resource_list: resource_list(&[&input]),
                        image,
                        tag: String::new(),
                    })
                    .await
                    .expect("call in a burst");
                served_by(response.get_ref())
            })
        })
        .collect();
    let mut served = Vec::new();
    for call in calls {
        served.push(call.await.unwrap());
    }
    served
}

/// Fast WHOAMI calls until `count` pods have served (after a burst from cold, every call may
/// have gone to the first pod ready); those pods.
async fn until_pods_serve(
    server: &Server,
    image: &str,
    count: usize,
) -> std::collections::BTreeSet<String> {
    let mut serving = std::collections::BTreeSet::new();
    let started = std::time::Instant::now();
    while serving.len() < count {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {serving:?} served within 60 s\n{}",
            server.stderr()
        );
        let (response, evaluator) = server.call(image, &resource_list(&["fast"])).await.unwrap();
        assert_eq!(evaluator, "pod");
        serving.insert(served_by(&response));
    }
    serving
}

/// Watches the stand-in's pods in the test namespace: the most there were at once and every
/// name seen, read from its store every 10 ms.
struct PodWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, std::collections::BTreeSet<String>)>,
}

impl PodWatch {
    fn start(cluster: &Cluster) -> Self {
        let store = cluster.standin.store().clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let pods = (String::new(), "pods".to_owned());
            let (mut most, mut seen) = (0, std::collections::BTreeSet::new());
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let names: Vec<String> = store
                    .all(&pods)
                    .iter()
                    .filter(|pod| pod["metadata"]["namespace"] == NAMESPACE)
                    .filter_map(|pod| pod["metadata"]["name"].as_str().map(str::to_owned))
                    .collect();
                most = most.max(names.len());
                seen.extend(names);
                std::thread::sleep(Duration::from_millis(10));
            }
            (most, seen)
        });
        Self { stop, thread }
    }

    fn finish(self) -> (usize, std::collections::BTreeSet<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scale_out_stops_at_the_pod_limit_and_calls_spread_over_the_pods() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let whoami = cluster
        .push(&function_image(&["/bin/sh", "-c", WHOAMI]), "krm/whoami:v1")
        .expect("image");
    // Porch's shipped settings: two pods per function, another pod once one has a call.
    let server = Server::start(
        &runner_config(cluster, &world.wrapper, ""),
        &[
            "--max-parallel-pods-per-function",
            "2",
            "--max-waitlist-length",
            "1",
        ],
    );
    let watch = PodWatch::start(cluster);

    // A burst of slow calls from cold: two pods start, never a third.
    let burst = whoami_burst(&server, &whoami, 6, "slow").await;
    assert_eq!(burst.len(), 6);

    let serving = until_pods_serve(&server, &whoami, 2).await;

    // Concurrent slow calls go to the least-loaded pod: two each.
    let mut spread = whoami_burst(&server, &whoami, 4, "slow").await;
    spread.sort();
    let both: Vec<String> = serving.iter().cloned().collect();
    assert_eq!(
        spread,
        [&*both[0], &*both[0], &*both[1], &*both[1]],
        "four concurrent calls, two per pod"
    );

    // One at a time, equally loaded pods take turns.
    let mut turns = Vec::new();
    for _ in 0..4 {
        let (response, _) = server
            .call(&whoami, &resource_list(&["fast"]))
            .await
            .unwrap();
        turns.push(served_by(&response));
    }
    assert!(
        turns[0] != turns[1] && turns[0] == turns[2] && turns[1] == turns[3],
        "round robin: {turns:?}"
    );

    let (most, seen) = watch.finish();
    assert_eq!(most, 2, "pods at once");
    assert_eq!(seen, serving, "every pod created served calls");
    assert!(burst.iter().all(|pod| serving.contains(pod)));
}

/// The namespace a WHOAMI call answered with: the GREETING its pod's function container had.
fn greeting(response: &krm_runner_proto::evaluator::EvaluateFunctionResponse) -> String {
    let text = String::from_utf8_lossy(&response.resource_list);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("namespace: "))
        .unwrap_or_else(|| panic!("no namespace in {text}"))
        .to_owned()
}

/// The test namespace's pods as JSON objects.
fn pods_json(cluster: &Cluster) -> Vec<serde_json::Value> {
    kubectl_json(cluster, &["pods"])["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// Whether a pod object is Ready.
fn is_ready(pod: &serde_json::Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The function container of a pod object.
fn function_container(pod: &serde_json::Value) -> &serde_json::Value {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "function")
        .unwrap()
}

/// A FunctionConfig file routed through the runner gives its image its own pod limits (two pods
/// although the flags allow one, another pod from one call per pod), its template overrides
/// (the function container's limits and env) and its idle TTL (30 minutes by the flags).
#[tokio::test(flavor = "multi_thread")]
async fn function_config_pod_settings_limits_overrides_and_ttl() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let whoami = cluster
        .push(&function_image(&["/bin/sh", "-c", WHOAMI]), "krm/whoami:v1")
        .expect("image");
    let configs = tempfile::tempdir().unwrap();
    // Written then renamed, as a ConfigMap update does, so the runner never reads half a file.
    let write_function_config = |greeting: &str| {
        let staged = configs.path().join(".whoami.yaml");
        std::fs::write(
            &staged,
            format!(
                r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {{name: whoami}}
spec:
  image: whoami
  prefixes: ["{}/krm"]
  podExecutor:
    tags: [v1]
    timeToLive: 6s
    maxParallelExecutions: 2
    preferredMaxQueueLength: 1
    templateOverrides:
      container:
        resources: {{limits: {{memory: 256Mi}}}}
        env: [{{name: GREETING, value: {greeting}}}]
"#,
                cluster.registry.host
            ),
        )
        .unwrap();
        std::fs::rename(&staged, configs.path().join("whoami.yaml")).unwrap();
    };
    write_function_config("hello");
    let config = format!(
        "{}function_configs:\n  paths: [\"{}\"]\n  reload_interval_seconds: 0.2\n  executors: {{podExecutor: pod}}\n",
        runner_config(cluster, &world.wrapper, "      scan_interval: 500ms\n"),
        configs.path().display()
    );
    let watch = PodWatch::start(cluster);
    let server = Server::start(&config, &[]);

    // The runner warms the FunctionConfig's image up with its overrides.
    eventually("the warm-up pod", Duration::from_secs(60), || {
        pods_json(cluster).iter().any(|pod| {
            function_container(pod)["resources"]["limits"]["memory"] == "256Mi" && is_ready(pod)
        })
    })
    .await;
    assert_eq!(names(cluster, "pods").len(), 1);

    let burst = whoami_burst(&server, &whoami, 4, "slow").await;
    assert_eq!(burst.len(), 4);
    let serving = until_pods_serve(&server, &whoami, 2).await;
    let mut spread = whoami_burst(&server, &whoami, 4, "slow").await;
    spread.sort();
    let both: Vec<String> = serving.iter().cloned().collect();
    assert_eq!(
        spread,
        [&*both[0], &*both[0], &*both[1], &*both[1]],
        "four concurrent calls, two per pod"
    );
    let (most, seen) = watch.finish();
    assert_eq!((most, &seen), (2, &serving), "pods at once, and which");

    // The overrides are in both pods' specs, and the function sees its env var.
    let pods = pods_json(cluster);
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let function = function_container(pod);
        assert_eq!(
            function["resources"]["limits"]["memory"], "256Mi",
            "{function}"
        );
        assert_eq!(
            function["env"],
            serde_json::json!([{"name": "GREETING", "value": "hello"}])
        );
        assert!(
            pod["metadata"]["annotations"]["krm-runner.dev/template-overrides"].is_string(),
            "{pod}"
        );
    }
    let (response, _) = server
        .call(&whoami, &resource_list(&["fast"]))
        .await
        .unwrap();
    assert_eq!(greeting(&response), "hello");

    // Other overrides: the pods made with the old ones are retired (deleted once idle) and a
    // pod with the new ones serves.
    let old = names(cluster, "pods");
    write_function_config("bye");
    let started = std::time::Instant::now();
    loop {
        let (response, _) = server
            .call(&whoami, &resource_list(&["fast"]))
            .await
            .unwrap();
        if greeting(&response) == "bye" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the new overrides did not reach a pod\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = server.stderr();
    for pod in &old {
        let name = pod.trim_start_matches("pod/");
        assert!(
            log.lines()
                .any(|line| line.contains("retiring a function pod") && line.contains(name)),
            "{name} retired for its overrides (not left to its TTL)\n{log}"
        );
    }
    eventually("old pods deleted", Duration::from_secs(60), || {
        names(cluster, "pods").iter().all(|pod| !old.contains(pod))
    })
    .await;
    let current = names(cluster, "pods");
    assert_eq!(current.len(), 1, "{current:?}");

    // A restarted runner adopts the pod made with the overrides its image has.
    drop(server);
    let server = Server::start(&config, &[]);
    let (response, _) = server
        .call(&whoami, &resource_list(&["fast"]))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(greeting(&response), "bye");
    assert_eq!(
        format!("pod/{}", served_by(&response)),
        current[0],
        "the adopted pod serves"
    );
    assert_eq!(names(cluster, "pods"), current);

    // Idle past the FunctionConfig's TTL: pods and services go.
    eventually("per-image TTL clean-up", Duration::from_secs(60), || {
        names(cluster, "pods").is_empty() && names(cluster, "services").is_empty()
    })
    .await;
}

/// Porch's pod-cache config file (list form) gives an image no FunctionConfig routes its pod
/// count, preferred load and resources, and its image is warmed up before any call.
#[tokio::test(flavor = "multi_thread")]
async fn pod_cache_config_settings_and_warm_up() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let cached = cluster
        .push(&function_image(&["/bin/sh", "-c", WHOAMI]), "krm/cached:v1")
        .expect("image");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        format!(
            "- name: {cached}\n  maxWaitlistLength: 1\n  maxParallelPodsPerFunction: 2\n  resources: {{limits: {{memory: 128Mi}}}}\n"
        ),
    )
    .unwrap();
    let server = Server::start(
        &runner_config(
            cluster,
            &world.wrapper,
            &format!("      pod_cache_config: \"{}\"\n", file.path().display()),
        ),
        &[],
    );

    // Warmed up: a pod for the image, with the file's resources, before any call.
    eventually("the warm-up pod", Duration::from_secs(60), || {
        pods_json(cluster).iter().any(|pod| {
            // The image pinned to its digest, as calls for it run.
            pod["metadata"]["annotations"]["krm-runner.dev/image"]
                .as_str()
                .is_some_and(|image| image.starts_with(&format!("{cached}@sha256:")))
                && is_ready(pod)
        })
    })
    .await;
    let warm = pods_json(cluster);
    assert_eq!(warm.len(), 1);
    assert_eq!(
        function_container(&warm[0])["resources"]["limits"]["memory"],
        "128Mi"
    );

    // The file's pod count: a second pod serves once one has a call, never a third.
    let watch = PodWatch::start(cluster);
    let burst = whoami_burst(&server, &cached, 4, "slow").await;
    assert_eq!(burst.len(), 4);
    let serving = until_pods_serve(&server, &cached, 2).await;
    let (most, seen) = watch.finish();
    assert_eq!((most, &seen), (2, &serving), "pods at once, and which");
    assert!(
        serving.contains(warm[0]["metadata"]["name"].as_str().unwrap()),
        "the warm-up pod serves"
    );
}

/// Creates Pod `name` in `namespace` standing for a runner's own Pod, as a Deployment's would
/// be: bound to another node, so that the stand-in's node leaves it alone. Returns its uid.
fn runner_pod(cluster: &Cluster, namespace: &str, name: &str) -> String {
    let file = cluster.dir.join(format!("{namespace}-{name}.yaml"));
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: another-node\n  containers:\n  - name: runner\n    image: krm-runner:latest\n"
        ),
    )
    .unwrap();
    kubectl(cluster, &["create", "-f", file.to_str().unwrap()]);
    kubectl(
        cluster,
        &[
            "get",
            "pod",
            name,
            "-n",
            namespace,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
}

/// The function pods runner `owner` made.
fn pods_of(cluster: &Cluster, owner: &str) -> Vec<serde_json::Value> {
    let label = format!("krm-runner.dev/owner={owner}");
    kubectl_json(cluster, &["pods", "-l", &label])["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_runners_pods_are_reclaimed_and_a_live_runners_keep_serving() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let identity = cluster
        .push(&function_image(&["/bin/cat"]), "krm/identity:v1")
        .expect("image");
    let elsewhere = cluster.dir.join("runners.yaml");
    std::fs::write(
        &elsewhere,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: runners\n",
    )
    .unwrap();
    kubectl(cluster, &["create", "-f", elsewhere.to_str().unwrap()]);
    // A and B run in the function namespace, C in another one: A's and B's function pods name
    // their runner's Pod as owner, C's cannot (a collector would delete them at once).
    let uid_a = runner_pod(cluster, NAMESPACE, "runner-a");
    let uid_b = runner_pod(cluster, NAMESPACE, "runner-b");
    let uid_c = runner_pod(cluster, "runners", "runner-c");
    let start = |owner: &str, namespace: &str, uid: Option<&str>| {
        let config = runner_config(cluster, &world.wrapper, "      scan_interval: 300ms\n")
            .replace("owner: runner-a", &format!("owner: {owner}"));
        let mut env = vec![("POD_NAME", owner), ("POD_NAMESPACE", namespace)];
        env.extend(uid.map(|uid| ("POD_UID", uid)));
        Server::start_with_env(&config, &[], &env)
    };
    // A learns its uid by reading its Pod; B and C from the downward API's POD_UID.
    let runner_a = start("runner-a", NAMESPACE, None);
    let runner_b = start("runner-b", NAMESPACE, Some(&uid_b));
    let runner_c = start("runner-c", "runners", Some(&uid_c));
    for runner in [&runner_a, &runner_b, &runner_c] {
        runner
            .call(&identity, &resource_list(&["cold"]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", runner.stderr()));
    }
    let [pod_a, pod_b, pod_c] = ["runner-a", "runner-b", "runner-c"].map(|owner| {
        let pods = pods_of(cluster, owner);
        assert_eq!(pods.len(), 1, "{owner}: {pods:?}");
        pods[0].clone()
    });
    let owners = |pod: &serde_json::Value| pod["metadata"]["ownerReferences"].clone();
    assert_eq!(
        owners(&pod_a),
        serde_json::json!([{"apiVersion": "v1", "kind": "Pod", "name": "runner-a", "uid": uid_a}])
    );
    assert_eq!(owners(&pod_b)[0]["uid"], uid_b.as_str());
    assert_eq!(owners(&pod_c), serde_json::Value::Null);
    assert_eq!(
        pod_c["metadata"]["annotations"]["krm-runner.dev/owner-pod"],
        "runners/runner-c"
    );
    // Several scans later, every runner's pod is still there: live runners' pods are not
    // anybody else's to delete.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        names(cluster, "pods").len(),
        5,
        "runner-a, runner-b and 3 function pods"
    );
    assert_eq!(names(cluster, "services").len(), 3);

    // A is killed and its Pod deleted (a rollout, a lost node): the garbage collector deletes
    // its function pod, which it owned, at once, and the pod's service after it.
    drop(runner_a);
    kubectl(
        cluster,
        &[
            "delete",
            "pod",
            "runner-a",
            "-n",
            NAMESPACE,
            "--grace-period=0",
            "--force",
        ],
    );
    let left = pods_of(cluster, "runner-a");
    assert!(
        left.iter()
            .all(|pod| pod["metadata"]["deletionTimestamp"].is_string()),
        "the collector, not a scan, deletes it: {left:?}"
    );
    let service_a = format!("service/{}", pod_a["metadata"]["name"].as_str().unwrap());
    eventually("A's pod and service to go", Duration::from_secs(60), || {
        pods_of(cluster, "runner-a").is_empty() && !names(cluster, "services").contains(&service_a)
    })
    .await;

    // C is killed and its Pod deleted: no collector can (its pods are in another namespace
    // than its Pod), so the surviving runner B reclaims them.
    drop(runner_c);
    kubectl(
        cluster,
        &[
            "delete",
            "pod",
            "runner-c",
            "-n",
            "runners",
            "--grace-period=0",
            "--force",
        ],
    );
    eventually(
        "B to reclaim C's pod and service",
        Duration::from_secs(60),
        || pods_of(cluster, "runner-c").is_empty() && names(cluster, "services").len() == 1,
    )
    .await;

    // B's pod was never touched and still serves.
    let (response, _) = runner_b
        .call(&identity, &resource_list(&["still"]))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", runner_b.stderr()));
    assert_eq!(response.resource_list, resource_list(&["still"]));
    let pods = pods_of(cluster, "runner-b");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["metadata"]["uid"], pod_b["metadata"]["uid"]);
    assert_eq!(
        names(cluster, "services"),
        [format!(
            "service/{}",
            pod_b["metadata"]["name"].as_str().unwrap()
        )]
    );
    assert!(
        runner_b
            .stderr()
            .contains("reclaiming a function pod whose runner is gone"),
        "{}",
        runner_b.stderr()
    );
}

/// The uid of function pod `name`.
fn uid_of(cluster: &Cluster, name: &str) -> String {
    kubectl(
        cluster,
        &[
            "get",
            "pod",
            name,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_a_pod_killed_mid_call_the_registry_down_the_api_server_restarting() {
    if !require_podman("pod evaluator end to end") {
        return;
    }
    let mut world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let [slow, cold, later] = [
        ("krm/slow:v1", ["/bin/sh", "-c", "sleep 2; cat"]),
        ("krm/cold:v1", ["/bin/sh", "-c", "cat"]),
        ("krm/later:v1", ["/bin/sh", "-c", "cat"]),
    ]
    .map(|(name, entrypoint)| {
        world
            .cluster
            .push(&function_image(&entrypoint), name)
            .expect("image")
    });
    let server = Server::start(&runner_config(&world.cluster, &world.wrapper, ""), &[]);
    let call = |image: &str, name: &str| {
        let (endpoint, image, input) =
            (server.endpoint(), image.to_owned(), resource_list(&[name]));
        tokio::spawn(async move {
            let mut client =
                krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::connect(endpoint)
                    .await
                    .unwrap();
            let mut request =
                tonic::Request::new(krm_runner_proto::evaluator::EvaluateFunctionRequest {
                    tag: String::new(),
                    resource_list: input.clone(),
                    image,
                });
            request.set_timeout(Duration::from_secs(90));
            client
                .evaluate_function(request)
                .await
                .map(|response| assert_eq!(response.into_inner().resource_list, input))
        })
    };

    // A pod killed mid-call: the call is retried on a new pod and succeeds; the dead pod and
    // its service are deleted.
    call(&slow, "warm").await.unwrap().expect("warm-up call");
    let first = names(&world.cluster, "pods");
    assert_eq!(first.len(), 1);
    let pod_uid = uid_of(&world.cluster, first[0].trim_start_matches("pod/"));
    let in_flight = call(&slow, "killed");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let node = world.cluster.standin.node().unwrap().clone();
    let killed = tokio::task::spawn_blocking(move || node.kill_pod_blocking(&pod_uid))
        .await
        .unwrap()
        .expect("podman kill");
    assert_eq!(killed, 1, "the function container");
    in_flight
        .await
        .unwrap()
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    eventually("one pod and one service", Duration::from_secs(60), || {
        let pods = names(&world.cluster, "pods");
        pods.len() == 1 && pods != first && names(&world.cluster, "services").len() == 1
    })
    .await;

    // The registry down during a cold start: a clear error, nothing created; back up, the
    // same call succeeds.
    world.cluster.registry.stop();
    let status = call(&cold, "no registry").await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("unable to get the entrypoint for {cold}")),
        "{}",
        status.message()
    );
    assert_eq!(names(&world.cluster, "pods").len(), 1);
    assert_eq!(names(&world.cluster, "services").len(), 1);
    world.cluster.registry.restart().expect("registry back");
    call(&cold, "registry back")
        .await
        .unwrap()
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));

    // The API server restarting: warm pods keep serving (no API request on the warm path), a
    // cold start fails clearly, and succeeds once the API server is back.
    world.cluster.standin.stop_api();
    call(&cold, "no api server")
        .await
        .unwrap()
        .expect("a warm call needs no API server");
    let status = call(&later, "no api server").await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().starts_with(&format!(
            "unable to get the grpc client to the pod for {later}: cannot read PodTemplate"
        )),
        "{}",
        status.message()
    );
    world.cluster.standin.start_api();
    call(&later, "api server back")
        .await
        .unwrap()
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));

    // Nothing leaked: one pod and one service per image, and bursts on every image are served
    // by exactly those pods (a leaked slot would make some wait or start another pod).
    let pods = names(&world.cluster, "pods");
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert_eq!(names(&world.cluster, "services").len(), 3);
    let burst: Vec<_> = [&slow, &cold, &later]
        .iter()
        .flat_map(|image| (0..3).map(|index| call(image, &format!("burst{index}"))))
        .collect();
    for call in burst {
        call.await
            .unwrap()
            .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    }
    assert_eq!(names(&world.cluster, "pods"), pods);
    assert_eq!(names(&world.cluster, "services").len(), 3);
}
