//! The world the pod evaluator's end-to-end tests and benchmark run in: the stand-in cluster
//! with its registry, the function namespace, the static wrapper-server image, and runner
//! configs for the `pod` evaluator. Shared by the pod tests, `benches/pod.rs` and
//! `krm-runner-bench`'s result cache measurement.
#![allow(dead_code)] // each user takes what it needs

use std::path::Path;
use std::process::Command;

use krm_kube_standin::fixture::Cluster;
use krm_kube_standin::image::ScratchImage;
use krm_kube_standin::registry::LocalRegistry;

/// The namespace function pods run in.
pub const NAMESPACE: &str = "fns";

pub fn wrapper_image(context: &Path) -> ScratchImage {
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

/// A busybox function image with `entrypoint` (`/bin/cat`: the identity function).
pub fn function_image(entrypoint: &[&str]) -> ScratchImage {
    ScratchImage {
        entrypoint: entrypoint.iter().map(|s| (*s).to_owned()).collect(),
        cmd: Vec::new(),
        ..ScratchImage::busybox()
    }
}

/// `kubectl --kubeconfig <stand-in> ARGS`; its stdout, after checking it succeeded.
pub fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
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

/// The address this host has for the stand-in's pods: the gateway of podman's default network,
/// which their containers are attached to. Each container has a network namespace of its own, so
/// the host's loopback is not theirs; a server a pod must reach (a telemetry receiver, say)
/// listens here.
pub fn host_address_for_pods(cluster: &Cluster) -> std::net::IpAddr {
    let node = cluster.standin.node().expect("the stand-in runs pods");
    let gateway = node
        .podman
        .run_blocking(&[
            "network",
            "inspect",
            "podman",
            "--format",
            "{{range .Subnets}}{{.Gateway}}{{end}}",
        ])
        .expect("podman network inspect podman");
    gateway.trim().parse().unwrap_or_else(|_| {
        panic!("podman's default network names no gateway address: {gateway:?}")
    })
}

/// A docker config JSON file holding `registry`'s login, with `extra` entries after it.
pub fn docker_config(registry: &LocalRegistry, extra: &str) -> String {
    use base64::Engine as _;
    let (user, password) = registry.login.clone().expect("a registry with a login");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!(
        "{{\"auths\": {{\"{}\": {{\"auth\": \"{auth}\"}}{extra}}}}}",
        registry.host
    )
}

/// The `pod` evaluator instance's section of a runner config, with `extra` config lines.
pub fn pod_evaluator(cluster: &Cluster, wrapper: &str, extra: &str) -> String {
    format!(
        "  pod:\n    plugin: pod\n    config:\n      kubeconfig: \"{}\"\n      pod_namespace: {NAMESPACE}\n      wrapper_server_image: \"{wrapper}\"\n      plain_http_registries: [\"{}\"]\n      connect_via: pod_ip\n      owner: runner-a\n      readiness_timeout: 90s\n{extra}",
        cluster.standin.kubeconfig.display(),
        cluster.registry.host
    )
}

/// A runner config serving the `pod` evaluator alone.
pub fn runner_config(cluster: &Cluster, wrapper: &str, extra: &str) -> String {
    format!(
        "evaluators:\n{}  default:\n    plugin: multi\n    config: {{chain: [pod]}}\n",
        pod_evaluator(cluster, wrapper, extra)
    )
}

/// Everything a pod test needs: the stand-in cluster with its registry, the wrapper image, and
/// the function images pushed.
pub struct PodWorld {
    pub cluster: Cluster,
    /// The wrapper-server image reference.
    pub wrapper: String,
    _dir: tempfile::TempDir,
}

/// Builds the static wrapper server, starts the stand-in cluster, creates the namespace and
/// pushes the wrapper image.
pub fn pod_world() -> PodWorld {
    // Short: podman refuses a run root longer than 50 characters.
    let dir = tempfile::Builder::new().prefix("kp").tempdir().unwrap();
    let context = krm_kube_standin::fixture::static_wrapper_server_context();
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
