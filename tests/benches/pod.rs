//! The pod evaluator against the test-only Kubernetes API stand-in (podman runs the pods, a
//! local docker-registry serves the images), next to the exec evaluator running the same
//! function, in one runner and one run:
//!
//! - cold start: the first call to an image (metadata fetch, pod and service created, image
//!   pulled, init container, wrapper ready, the call);
//! - warm call through a pod, and through exec, alternating call by call so that both see the
//!   same machine load; the difference is what the pod path adds;
//! - Kubernetes API requests per warm call, counted by the stand-in (target: zero).
//!
//! The function is busybox `cat` (the identity) in both: in the image, and as an exec function
//! through a `cat` symlink to /bin/busybox.
//!
//! ```sh
//! cargo build --release -p krm-runner -p krm-plugin-builtin -p krm-plugin-starlark \
//!     -p krm-plugin-exec -p krm-plugin-multi -p krm-plugin-pod -p krm-plugin-testkit
//! cargo bench -p krm-runner-tests --bench pod [-- COLD_STARTS WARM_CALLS]
//! ```

#[path = "../tests/support/pod_world.rs"]
mod pod_world;

use std::time::{Duration, Instant};

use krm_kube_standin::fixture::require_podman;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use krm_runner_tests::{Server, build_dir, resource_list};
use pod_world::{function_image, pod_evaluator, pod_world};
use tonic::transport::Channel;

/// Where busybox-static puts itself; the exec function is a `cat` symlink to it.
const BUSYBOX: &str = "/bin/busybox";

fn main() {
    // `cargo bench` passes `--bench`; the numbers are positional.
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let cold_starts = numbers.first().copied().unwrap_or(10);
    let warm_calls = numbers.get(1).copied().unwrap_or(500);
    if !require_podman("pod benchmark") {
        return;
    }
    let plugin = build_dir().join("libkrm_plugin_pod.so");
    assert!(
        plugin.is_file(),
        "{} is missing: build the plugins in release first (see the command in benches/pod.rs)",
        plugin.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(cold_starts, warm_calls));
}

async fn bench(cold_starts: usize, warm_calls: usize) {
    let load_before = load_average();
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let images: Vec<String> = (0..=cold_starts)
        .map(|index| {
            cluster
                .push(
                    &function_image(&["/bin/cat"]),
                    &format!("krm/bench-cat:v{index}"),
                )
                .expect("function image")
        })
        .collect();
    let exec_dir = tempfile::tempdir().unwrap();
    let exec_cat = exec_dir.path().join("cat");
    std::os::unix::fs::symlink(BUSYBOX, &exec_cat).unwrap();
    // The production order: exec first (it declines images it does not know), then pod. The
    // idle scan (one LIST per scan_interval, not per call) is kept out of the measured window.
    let config = format!(
        "log_level: warn\nevaluators:\n  exec:\n    plugin: exec\n    config:\n      functions:\n        - {{image: bench/cat, path: \"{}\"}}\n{}  default:\n    plugin: multi\n    config: {{chain: [exec, pod]}}\n",
        exec_cat.display(),
        pod_evaluator(cluster, &world.wrapper, "      scan_interval: 1h\n")
    );
    let server = Server::start(&config, &[]);
    let mut client = server.client().await;
    let input = resource_list(&["a", "b", "c", "d", "e", "f", "g", "h"]);

    let (warm_image, cold_images) = images.split_last().unwrap();
    let mut cold = Vec::new();
    for image in cold_images {
        let started = Instant::now();
        call(&mut client, image, &input, &server).await;
        cold.push(started.elapsed());
    }

    call(&mut client, warm_image, &input, &server).await;
    call(&mut client, "bench/cat", &input, &server).await;
    let requests_before = cluster.standin.api_requests();
    let (mut pod, mut exec) = (Vec::new(), Vec::new());
    for _ in 0..warm_calls {
        let started = Instant::now();
        call(&mut client, warm_image, &input, &server).await;
        pod.push(started.elapsed());
        let started = Instant::now();
        call(&mut client, "bench/cat", &input, &server).await;
        exec.push(started.elapsed());
    }
    let requests = cluster.standin.api_requests() - requests_before;

    let (cold_p50, cold_p90) = percentiles(&mut cold);
    let (pod_p50, pod_p90) = percentiles(&mut pod);
    let (exec_p50, exec_p90) = percentiles(&mut exec);
    println!(
        "pod benchmark: {} cores, load average before {load_before}, after {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!("ResourceList of {} bytes, busybox cat\n", input.len());
    println!("| what | calls | p50 | p90 |\n|---|---|---|---|");
    for (what, calls, p50, p90) in [
        (
            "cold start (first call to an image)",
            cold.len(),
            cold_p50,
            cold_p90,
        ),
        ("warm call through a pod", pod.len(), pod_p50, pod_p90),
        ("warm call through exec", exec.len(), exec_p50, exec_p90),
    ] {
        println!("| {what} | {calls} | {} | {} |", ms(p50), ms(p90));
    }
    println!(
        "| added by the pod path (pod - exec) | | {} | {} |",
        ms(pod_p50.saturating_sub(exec_p50)),
        ms(pod_p90.saturating_sub(exec_p90))
    );
    println!(
        "\nKubernetes API requests during the {warm_calls} warm pod calls: {requests} ({:.3} per call)",
        requests as f64 / warm_calls as f64
    );
}

async fn call(
    client: &mut FunctionEvaluatorClient<Channel>,
    image: &str,
    input: &[u8],
    server: &Server,
) {
    let response = client
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: input.to_vec(),
            image: image.to_owned(),
            tag: String::new(),
        })
        .await
        .unwrap_or_else(|status| panic!("{image}: {status:?}\n{}", server.stderr()));
    assert_eq!(response.into_inner().resource_list, input, "{image}");
}

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.90))
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| {
            let fields: Vec<&str> = text.split_whitespace().take(3).collect();
            (fields.len() == 3).then(|| fields.join(" "))
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
