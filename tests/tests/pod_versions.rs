//! Tag constraints on the pod evaluator end to end: the real runner with the real `pod` plugin
//! against the Kubernetes API stand-in, whose local docker-registry holds several versions of
//! one function image (a pre-release among them). The registry's access log counts its
//! requests, the stand-in counts API requests.
//!
//! Needs podman, runc, docker-registry and busybox-static (tests/run.sh installs them): skipped
//! loudly without them, a failure under CI=true.

#[path = "support/pod_world.rs"]
mod pod_world;

use std::time::{Duration, Instant};

use krm_kube_standin::fixture::{Cluster, require_podman};
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{Server, resource_list};
use pod_world::{function_image, pod_world, runner_config};
use tonic::Code;

/// Calls `repository` under `tag`: the log (the version the function says it is) and the
/// `x-krm-resolved-image` header.
async fn call(
    server: &Server,
    repository: &str,
    tag: &str,
) -> Result<(String, Option<String>), tonic::Status> {
    let input = resource_list(&["versioned"]);
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: input.clone(),
        image: repository.to_owned(),
        tag: tag.to_owned(),
    });
    request.set_timeout(Duration::from_secs(120));
    let response = server.client().await.evaluate_function(request).await?;
    let resolved = response
        .metadata()
        .get("x-krm-resolved-image")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    assert_eq!(response.metadata().get("x-krm-evaluator").unwrap(), "pod");
    let response = response.into_inner();
    assert_eq!(response.resource_list, input);
    Ok((
        String::from_utf8_lossy(&response.log).trim().to_owned(),
        resolved,
    ))
}

/// Pushes `krm/versioned:<version>`, a function that says its version on stderr.
fn push_version(cluster: &Cluster, version: &str) {
    let script = format!("cat; echo {version} >&2");
    cluster
        .push(
            &function_image(&["/bin/sh", "-c", &script]),
            &format!("krm/versioned:{version}"),
        )
        .expect("function image");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_run_the_highest_registry_version_satisfying_the_constraint() {
    if !require_podman("pod evaluator tag constraints") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    for version in ["v1.0.0", "v1.1.0", "v1.1.5", "v1.2.0-rc.1", "v2.0.0"] {
        push_version(cluster, version);
    }
    let repository = format!("{}/krm/versioned", cluster.registry.host);
    let tags_list = "/v2/krm/versioned/tags/list";

    // Pages of two tags, so that the listing follows `last` (Debian's docker-registry may
    // answer with every tag at once: then the second request finds no more).
    let extra = "      tags_page_size: 2\n      tags_refresh_interval: 1h\n";
    let server = Server::start(&runner_config(cluster, &world.wrapper, extra), &[]);
    let (version, resolved) = call(&server, &repository, "~1.1")
        .await
        .unwrap_or_else(|status| panic!("cold call: {status:?}\n{}", server.stderr()));
    assert_eq!(version, "v1.1.5");
    let resolved = resolved.expect("x-krm-resolved-image");
    assert!(
        resolved.starts_with(&format!("{repository}:v1.1.5@sha256:")),
        "{resolved}"
    );
    let listing = cluster.registry.requests(tags_list);
    assert!(
        listing >= 2,
        "the listing asks until a page is not full: {listing}"
    );

    // Warm: the cached tag list and metadata, the running pod: no registry request, no API
    // request.
    let (api, registry) = (
        cluster.standin.api_requests(),
        cluster.registry.requests(""),
    );
    for _ in 0..5 {
        let (version, warm) = call(&server, &repository, ">= 1.1.0, < 2").await.unwrap();
        assert_eq!(version, "v1.1.5");
        assert_eq!(warm.as_deref(), Some(resolved.as_str()));
    }
    assert_eq!(
        cluster.registry.requests(""),
        registry,
        "registry requests on warm calls"
    );
    assert_eq!(
        cluster.standin.api_requests(),
        api,
        "API requests on warm calls"
    );

    // A pre-release only when the constraint names one; `*` takes the highest release.
    let (version, _) = call(&server, &repository, "~1.2.0-0").await.unwrap();
    assert_eq!(version, "v1.2.0-rc.1");
    let (version, _) = call(&server, &repository, "*").await.unwrap();
    assert_eq!(version, "v2.0.0");

    // Nothing satisfies: NOT_FOUND naming the image, the constraint and what exists, from the
    // cached list.
    let status = call(&server, &repository, "^3").await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    // Porch's NOT_FOUND wording, then each evaluator's reason: the pod evaluator's names what
    // the registry has.
    assert!(
        status.message().contains(&format!(
            "no version of \"{repository}\" satisfies tag constraint \"^3\": the registry has \
             [v2.0.0, v1.2.0-rc.1, v1.1.5, v1.1.0, v1.0.0]"
        )),
        "{status:?}"
    );
    assert_eq!(
        cluster.registry.requests(tags_list),
        listing,
        "still the one listing"
    );
    drop(server);

    // A newly published patch release is picked up once the list is refreshed in the
    // background, without a restart.
    let extra = "      tags_refresh_interval: 1s\n";
    let server = Server::start(&runner_config(cluster, &world.wrapper, extra), &[]);
    let (version, _) = call(&server, &repository, "~1.1").await.unwrap();
    assert_eq!(version, "v1.1.5");
    tokio::task::block_in_place(|| push_version(cluster, "v1.1.9"));
    let started = Instant::now();
    loop {
        let (version, resolved) = call(&server, &repository, "~1.1")
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
        if version == "v1.1.9" {
            assert!(
                resolved.is_some_and(|r| r.starts_with(&format!("{repository}:v1.1.9@sha256:"))),
            );
            break;
        }
        assert_eq!(version, "v1.1.5");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "v1.1.9 never picked up:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
