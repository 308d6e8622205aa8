//! `--only cache`: the result cache, against the same calls run each time and against the
//! empty gRPC round trip; a pod function's hit against its warm pod call.

use std::time::Instant;

use anyhow::{Context, bail};
use krm_runner::Config;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;

use super::pod_world;
use super::{BenchArgs, BenchServer, deployments, indent_items, ms, percentiles, resource_list_of};

/// The result cache: a Porch-like re-render (the same six-step pipeline over an unchanged
/// 100-Deployment package, each step one EvaluateFunction) and ConfigHub's sequence of five
/// over the same Deployments (one FunctionExecutor Invoke) on a runner with the cache and one
/// without; and a hit against the empty gRPC round trip (Health/Check), on the same runner.
pub async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    const PIPELINE: [(&str, &str); 6] = [
        ("set-namespace", "namespace: prod"),
        ("set-labels", "team: core"),
        ("set-annotations", "owner: platform"),
        ("set-image", "name: nginx\n    newTag: \"1.27\""),
        (
            "search-replace",
            "by-path: spec.replicas\n    put-value: \"3\"",
        ),
        ("ensure-name-substring", "prepend: prod-"),
    ];
    let package = indent_items(&deployments(100));
    let inputs: Vec<(&str, Vec<u8>)> = PIPELINE
        .iter()
        .map(|(function, data)| {
            let list = format!(
                "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{package}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    {data}\n"
            );
            (*function, list.into_bytes())
        })
        .collect();
    let sequence = confighub_sequence(&deployments(100));
    let renders = (args.calls / 20).max(20);
    println!(
        "\n## Result cache ({renders} re-renders of a six-step pipeline and as many ConfigHub sequences over 100 Deployments; {} hits)",
        args.calls
    );
    println!("| what | p50 | p99 |\n|---|---|---|");
    let mut hit_server = None;
    for cached in [false, true] {
        let mut server = BenchServer::start_cached(base, &[], cached).await?;
        let mut samples = Vec::with_capacity(renders);
        for round in 0..=renders {
            let started = Instant::now();
            for (function, input) in &inputs {
                server.call(function, input).await?;
            }
            // The first render fills the cache; the re-renders are what is measured.
            if round > 0 {
                samples.push(started.elapsed());
            }
        }
        let (p50, p99) = percentiles(&mut samples);
        let label = if cached { "with the cache" } else { "without" };
        println!("| re-render, {label} | {} | {} |", ms(p50), ms(p99));
        let mut executor = FunctionExecutorClient::connect(server.endpoint.clone()).await?;
        let mut samples = Vec::with_capacity(renders);
        for round in 0..=renders {
            let started = Instant::now();
            let response = executor.invoke(sequence.clone()).await?.into_inner();
            anyhow::ensure!(response.success, "{:?}", response.error_messages);
            if round > 0 {
                samples.push(started.elapsed());
            }
        }
        let (p50, p99) = percentiles(&mut samples);
        println!(
            "| ConfigHub sequence of five (Invoke), {label} | {} | {} |",
            ms(p50),
            ms(p99)
        );
        if cached {
            hit_server = Some(server);
        } else {
            server.stop();
        }
    }
    let mut server = hit_server.context("the cached runner")?;
    let outcome = hit_against_floor(&mut server, args.calls).await;
    server.stop();
    outcome?;
    pod_hit_against_warm(base, args.calls).await
}

/// A pod function whose image is marked cacheable, hit, against the warm pod call of the same
/// function under a tag nobody marked (its own pod), on one runner, calls alternating. Needs
/// podman and the Kubernetes API stand-in, as the pod tests do; skipped, saying so, without.
async fn pod_hit_against_warm(base: &Config, calls: usize) -> anyhow::Result<()> {
    if !krm_kube_standin::fixture::require_podman("the pod function's cache hit") {
        return Ok(());
    }
    let world = tokio::task::spawn_blocking(pod_world::pod_world).await?;
    let cluster = &world.cluster;
    let push = |tag: &str| {
        cluster.push(
            &pod_world::function_image(&["/bin/cat"]),
            &format!("krm/bench-cached:{tag}"),
        )
    };
    let (marked, unmarked) =
        tokio::task::block_in_place(|| anyhow::Ok((push("marked")?, push("unmarked")?)))?;
    let evaluators = format!(
        "{}  default:\n    plugin: multi\n    config: {{chain: [pod]}}\n",
        pod_world::pod_evaluator(cluster, &world.wrapper, "")
    );
    let cache = format!("{{images: [{{prefix: \"{marked}\", ttl_seconds: 3600}}]}}");
    let mut server = BenchServer::start_with(base, &[], &evaluators, &cache).await?;
    let outcome = async {
        let input = resource_list_of(700);
        // Each image's pod started, the marked one's answer kept; then what each call is.
        for (image, expected) in [(&marked, "hit"), (&unmarked, "bypass")] {
            server.call(image, &input).await?;
            let response = server
                .client
                .evaluate_function(EvaluateFunctionRequest {
                    resource_list: input.clone(),
                    image: image.clone(),
                    tag: String::new(),
                })
                .await?;
            let said = response.metadata().get("x-krm-cache");
            if said.and_then(|value| value.to_str().ok()) != Some(expected) {
                bail!("{image}: x-krm-cache {said:?}, expected {expected}");
            }
        }
        let (mut hits, mut warm) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        for _ in 0..calls {
            let started = Instant::now();
            server.call(&marked, &input).await?;
            hits.push(started.elapsed());
            let started = Instant::now();
            server.call(&unmarked, &input).await?;
            warm.push(started.elapsed());
        }
        let (hit50, hit99) = percentiles(&mut hits);
        let (warm50, warm99) = percentiles(&mut warm);
        println!(
            "\n### A pod function ({calls} calls each, busybox `cat` over {} bytes, alternating)",
            input.len()
        );
        println!("| what | p50 | p99 |\n|---|---|---|");
        println!(
            "| hit, image marked cacheable | {} | {} |",
            ms(hit50),
            ms(hit99)
        );
        println!(
            "| warm pod call, same function | {} | {} |",
            ms(warm50),
            ms(warm99)
        );
        println!(
            "| hit faster than the warm pod call at p50 | {:.0}x (target 20x) | |",
            warm50.as_secs_f64() / hit50.as_secs_f64()
        );
        anyhow::Ok(())
    }
    .await;
    server.stop();
    outcome
}

async fn hit_against_floor(server: &mut BenchServer, calls: usize) -> anyhow::Result<()> {
    let small = resource_list_of(256);
    let mut input = String::from_utf8(small)?;
    input.push_str("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: prod\n");
    let input = input.into_bytes();
    server.call("set-namespace", &input).await?;
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint.clone())?
        .connect()
        .await?;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let check = || tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    let (mut hits, mut floor) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        let started = Instant::now();
        server.call("set-namespace", &input).await?;
        hits.push(started.elapsed());
        let started = Instant::now();
        health.check(check()).await?;
        floor.push(started.elapsed());
    }
    let (hit50, hit99) = percentiles(&mut hits);
    let (floor50, floor99) = percentiles(&mut floor);
    println!(
        "| hit, set-namespace over {} bytes | {} | {} |",
        input.len(),
        ms(hit50),
        ms(hit99)
    );
    println!(
        "| empty round trip (Health/Check) | {} | {} |",
        ms(floor50),
        ms(floor99)
    );
    println!(
        "| added by a hit at p50 | {:.1} µs | |",
        (hit50.as_secs_f64() - floor50.as_secs_f64()) * 1e6
    );
    Ok(())
}

/// ConfigHub's sequence of five (the one docs/benchmarks.md measures as a process) over
/// `unit`: a filter, set-replicas, set-image, set-label and get-replicas.
fn confighub_sequence(unit: &str) -> pb::InvokeRequest {
    let mut request = pb::InvokeRequest::kubernetes(
        unit,
        vec![
            pb::Invocation::positional(
                "where-filter",
                &["apps/v1/Deployment", "spec.replicas > 1"],
            ),
            pb::Invocation::positional("set-replicas", &["5"]),
            pb::Invocation::positional("set-image", &["app", "nginx:1.27"]),
            pb::Invocation::positional("set-label", &["tier", "web"]),
            pb::Invocation::positional("get-replicas", &[]),
        ],
    );
    request.num_filters = 1;
    request.cast_string_args_to_scalars = true;
    request
}
