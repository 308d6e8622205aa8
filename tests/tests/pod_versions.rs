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
use krm_kube_standin::registry::LocalRegistry;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{Server, resource_list};
use pod_world::{NAMESPACE, docker_config, function_image, kubectl, pod_world, runner_config};
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
    push_version_to(cluster, &cluster.registry, version);
}

/// [`push_version`] to another registry (one requiring a login, say).
fn push_version_to(cluster: &Cluster, registry: &LocalRegistry, version: &str) {
    let script = format!("cat; echo {version} >&2");
    cluster
        .push_to(
            registry,
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
    let extra = "      tags_page_size: 2\n      tags_refresh_interval: 1h\n      digest_recheck_interval: 1h\n";
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

/// `spec.podExecutor.tags: [tag]` for the image `krm/<image>` of the stand-in's registry.
fn pod_function_config(cluster: &Cluster, name: &str, image: &str, tag: &str) -> String {
    format!(
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  image: {image}\n  prefixes: [\"{}/krm\"]\n  podExecutor: {{tags: [\"{tag}\"]}}\n",
        cluster.registry.host
    )
}

/// The FunctionConfig `name` as the API has it.
fn function_config(cluster: &Cluster, name: &str) -> serde_json::Value {
    serde_json::from_str(&kubectl(
        cluster,
        &[
            "get",
            "functionconfigs",
            name,
            "-n",
            NAMESPACE,
            "-o",
            "json",
        ],
    ))
    .unwrap()
}

/// `status`, `reason`, `message` of the condition `type_` of `object`, after checking it speaks
/// of the object's generation.
fn condition(object: &serde_json::Value, type_: &str) -> (String, String, String) {
    let conditions = object["status"]["conditions"].as_array().unwrap();
    let found = conditions
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {object}"));
    assert_eq!(
        found["observedGeneration"], object["metadata"]["generation"],
        "{found}"
    );
    assert!(found["lastTransitionTime"].is_string(), "{found}");
    let text = |field: &str| found[field].as_str().unwrap().to_owned();
    (text("status"), text("reason"), text("message"))
}

/// Waits until `done` holds for the FunctionConfig `name`; returns it.
fn wait_for_status(
    cluster: &Cluster,
    server: &Server,
    name: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let object = function_config(cluster, name);
        if done(&object) {
            return object;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "status of {name} never as expected: {object}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_function_configs_report_their_resolved_tags_on_their_status() {
    if !require_podman("FunctionConfig status") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    for version in ["v1.0.0", "v1.1.0", "v1.1.5"] {
        push_version(cluster, version);
    }
    cluster
        .push(&function_image(&["/bin/cat"]), "krm/pinned:v1.0.0")
        .expect("function image");
    let crd = krm_runner_tests::repo_root().join("deploy/kubernetes/crds/functionconfigs.yaml");
    kubectl(cluster, &["create", "-f", crd.to_str().unwrap()]);
    let objects = cluster.dir.join("function-configs.yaml");
    std::fs::write(
        &objects,
        [
            pod_function_config(cluster, "versioned", "versioned", "~1.1"),
            pod_function_config(cluster, "unsatisfiable", "pinned", "^3"),
            pod_function_config(cluster, "absent", "absent", "~1"),
        ]
        .join("---\n"),
    )
    .unwrap();
    kubectl(cluster, &["create", "-f", objects.to_str().unwrap()]);

    let function_configs = format!(
        "function_configs:\n  cluster: {{enabled: true, namespace: {NAMESPACE}, kubeconfig: \"{}\"}}\n  executors: {{podExecutor: pod}}\n  warm_up: false\n  resolve_interval_seconds: 1\n",
        cluster.standin.kubeconfig.display()
    );
    let config = runner_config(cluster, &world.wrapper, "      tags_refresh_interval: 1s\n")
        + &function_configs;
    let server = Server::start(&config, &[]);
    let repository = format!("{}/krm/versioned", cluster.registry.host);

    // A constraint the registry satisfies: Ready, Resolved, the tag and digest it stands for.
    let versioned = tokio::task::block_in_place(|| {
        wait_for_status(cluster, &server, "versioned", |object| {
            object["status"]["executors"][0]["resolvedTag"] == "v1.1.5"
        })
    });
    assert_eq!(
        condition(&versioned, "Ready"),
        ("True".into(), "Ready".into(), String::new())
    );
    assert_eq!(
        condition(&versioned, "Resolved"),
        (
            "True".into(),
            "Resolved".into(),
            "podExecutor \"~1.1\" resolved to v1.1.5".into()
        )
    );
    assert_eq!(condition(&versioned, "Failed").0, "False");
    let executor = &versioned["status"]["executors"][0];
    assert_eq!(executor["executor"], "podExecutor");
    assert_eq!(executor["evaluator"], "pod");
    assert_eq!(executor["tag"], "~1.1");
    assert_eq!(executor["state"], "Ready");
    assert!(executor.get("lastError").is_none(), "{executor}");
    let digest = executor["digest"].as_str().unwrap().to_owned();
    // The digest is the one calls run.
    let (version, resolved) = call(&server, &repository, "~1.1").await.unwrap();
    assert_eq!(version, "v1.1.5");
    assert_eq!(resolved.unwrap(), format!("{repository}:v1.1.5@{digest}"));
    assert_eq!(versioned["status"]["error"], "");

    // A constraint nothing satisfies, and an image the registry does not have: not Ready,
    // Failed, with the reason and the registry's answer.
    let unsatisfiable = tokio::task::block_in_place(|| {
        wait_for_status(cluster, &server, "unsatisfiable", |object| {
            object["status"]["conditions"].is_array()
        })
    });
    let (status, reason, message) = condition(&unsatisfiable, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoVersion"));
    assert!(
        message.contains(&format!(
            "podExecutor \"^3\": no version of \"{}/krm/pinned\" satisfies tag constraint \"^3\": the registry has [v1.0.0]",
            cluster.registry.host
        )),
        "{message}"
    );
    assert_eq!(condition(&unsatisfiable, "Resolved").1, "NoVersion");
    assert_eq!(condition(&unsatisfiable, "Failed").0, "True");
    let executor = &unsatisfiable["status"]["executors"][0];
    assert_eq!(executor["state"], "Failed");
    assert!(executor.get("resolvedTag").is_none(), "{executor}");
    assert!(
        executor["lastError"]
            .as_str()
            .unwrap()
            .contains("satisfies tag constraint \"^3\"")
    );

    let absent = tokio::task::block_in_place(|| {
        wait_for_status(cluster, &server, "absent", |object| {
            object["status"]["conditions"].is_array()
        })
    });
    let (status, reason, message) = condition(&absent, "Failed");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ResolveFailed")
    );
    assert!(
        message.contains(&format!(
            "unable to list the tags of {}/krm/absent",
            cluster.registry.host
        )),
        "{message}"
    );
    assert_eq!(condition(&absent, "Ready").0, "False");

    // Rounds that find the same write nothing: the objects stay as they are, and the runner
    // sends the API no request at all.
    let unchanged = |object: &serde_json::Value| object["metadata"]["resourceVersion"].clone();
    let before = ["versioned", "unsatisfiable", "absent"]
        .map(|name| unchanged(&function_config(cluster, name)));
    let requests = cluster.standin.api_requests();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        cluster.standin.api_requests(),
        requests,
        "API requests from rounds that found nothing new"
    );
    let after = ["versioned", "unsatisfiable", "absent"]
        .map(|name| unchanged(&function_config(cluster, name)));
    assert_eq!(
        before, after,
        "status rewritten by rounds that found nothing new"
    );

    // A newly published patch release: a later round resolves to it, with its digest; the
    // Resolved condition did not change status, so its transition time stays.
    let since = |object: &serde_json::Value| {
        object["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Resolved")
            .unwrap()["lastTransitionTime"]
            .clone()
    };
    tokio::task::block_in_place(|| push_version(cluster, "v1.1.9"));
    let updated = tokio::task::block_in_place(|| {
        wait_for_status(cluster, &server, "versioned", |object| {
            object["status"]["executors"][0]["resolvedTag"] == "v1.1.9"
        })
    });
    let new_digest = updated["status"]["executors"][0]["digest"]
        .as_str()
        .unwrap();
    assert!(
        new_digest.starts_with("sha256:") && new_digest != digest,
        "{updated}"
    );
    assert_eq!(
        condition(&updated, "Resolved").2,
        "podExecutor \"~1.1\" resolved to v1.1.9"
    );
    assert_eq!(since(&updated), since(&versioned));
    let (version, resolved) = call(&server, &repository, "~1.1").await.unwrap();
    assert_eq!(version, "v1.1.9");
    assert_eq!(
        resolved.unwrap(),
        format!("{repository}:v1.1.9@{new_digest}")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_behind_a_login_is_listed_with_the_credentials() {
    if !require_podman("pod evaluator tag constraints behind a login") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world).await.unwrap();
    let cluster = &world.cluster;
    let private = LocalRegistry::start_with_login(&cluster.dir.join("private"), "puller", "s3cret")
        .expect("registry with a login");
    assert!(private.refuses_anonymous(), "the registry needs the login");
    for version in ["v1.0.0", "v1.2.0", "v2.0.0"] {
        push_version_to(cluster, &private, version);
    }
    let repository = format!("{}/krm/versioned", private.host);
    let tags_list = "/v2/krm/versioned/tags/list";
    // The wrapper comes from the open registry: credentials are matched by registry host.
    let config = runner_config(cluster, &world.wrapper, "").replace(
        &format!("[\"{}\"]", cluster.registry.host),
        &format!("[\"{}\", \"{}\"]", cluster.registry.host, private.host),
    );

    // Without the credentials the listing is refused, and the answer says by whom.
    let anonymous = Server::start(&config, &[]);
    let status = call(&anonymous, &repository, "^1").await.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("unable to list the tags of {repository}: "))
            && status.message().contains("Not authorized"),
        "{}",
        status.message()
    );
    drop(anonymous);

    // With them (Porch's flags), the listing authenticates: the highest match runs.
    let secrets_dir = tempfile::tempdir().unwrap();
    let auth_file = secrets_dir.path().join(".dockerconfigjson");
    std::fs::write(&auth_file, docker_config(&private, "")).unwrap();
    let listed = private.requests(tags_list);
    let server = Server::start(
        &config,
        &[
            "--enable-private-registries",
            "--registry-auth-secret-path",
            auth_file.to_str().unwrap(),
            "--registry-auth-secret-name",
            "krm-pull",
        ],
    );
    let (version, resolved) = call(&server, &repository, "^1")
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(version, "v1.2.0");
    let resolved = resolved.expect("x-krm-resolved-image");
    assert!(
        resolved.starts_with(&format!("{repository}:v1.2.0@sha256:")),
        "{resolved}"
    );
    assert!(private.requests(tags_list) > listed, "the tags were listed");
}
