//! The `wasm` evaluator through the real runner: WASI modules built here from `tests/wasm/*.c`
//! with Debian's clang and wasi-libc, served over gRPC, run by `krm-runner fn` and by the real
//! kpt; each hostile module (an endless loop, unbounded memory, an output flood, a trap)
//! answered with the limit it passed while the runner goes on serving; modules pushed to a local
//! docker-registry as kpt pushes them, pulled by digest and run by tag constraint.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krm_kube_standin::registry::{self, Layer, LocalRegistry};
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Server, assert_deadline_answer, call_with_remote_deadline, have_tool, kpt_eval_exec,
    kpt_package, process_stat, run_cli, runner_binary, scratch, script, wasm_module,
};
use tonic::Code;

const SET_NAMESPACE: &str = "example.com/wasm/set-namespace:v1.2.0";

/// A ResourceList of two ConfigMaps (one with a namespace already) asking for `namespace`.
fn input(namespace: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: a
    namespace: old
  data:
    key: value
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: b
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: fn-config
  data:
    namespace: {namespace}
"
    )
    .into_bytes()
}

/// The test modules built into `dir`, by image (`example.com/wasm/NAME:v1.2.0`); `None` when
/// the toolchain is missing (the test is skipped).
fn modules(dir: &Path, names: &[&str]) -> Option<Vec<(String, PathBuf)>> {
    names
        .iter()
        .map(|name| {
            Some((
                format!("example.com/wasm/{name}:v1.2.0"),
                wasm_module(dir, name)?,
            ))
        })
        .collect()
}

/// A runner configuration: `wasm` serving `modules` (compiled forms in `cache`), behind the
/// `default` chain, with `extra` keys in its `config:`.
fn config(modules: &[(String, PathBuf)], cache: &Path, extra: &str) -> String {
    let mut text = format!(
        "max_message_bytes: 1048576\nevaluators:\n  wasm:\n    plugin: wasm\n    config:\n      cache_dir: \"{}\"\n      memory_limit_mib: 32\n{extra}      functions:\n",
        cache.display()
    );
    for (image, path) in modules {
        text.push_str(&format!(
            "        - {{image: \"{image}\", path: \"{}\"}}\n",
            path.display()
        ));
    }
    text.push_str("  default:\n    plugin: multi\n    config: {chain: [wasm]}\n");
    text
}

fn image(name: &str) -> String {
    format!("example.com/wasm/{name}:v1.2.0")
}

async fn call(server: &Server, image: &str, list: &[u8]) -> Result<String, tonic::Status> {
    let (response, evaluator) = server.call(image, list).await?;
    assert_eq!(evaluator, "wasm");
    Ok(String::from_utf8(response.resource_list).unwrap())
}

/// The runner still answers a real call, and answers it right.
async fn assert_still_serving(server: &Server) {
    let output = call(server, SET_NAMESPACE, &input("after"))
        .await
        .expect("the runner serves on");
    assert_eq!(output.matches("namespace: after").count(), 3, "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wasi_module_transforms_the_resource_list_over_grpc() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let server = Server::start(&config(&modules, &dir.path().join("cache"), ""), &[]);
    let (response, evaluator) = server.call(SET_NAMESPACE, &input("prod")).await.unwrap();
    assert_eq!(evaluator, "wasm");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
    assert!(!output.contains("namespace: old"), "{output}");
    assert_eq!(
        String::from_utf8_lossy(&response.log),
        "set-namespace: 2 items in namespace prod\n"
    );
    // An image it does not map is declined, naming why.
    let status = server
        .call("example.com/wasm/unknown:v1", &input("prod"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("no module is mapped"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_constraint_runs_the_highest_mapped_version_satisfying_it() {
    let dir = scratch();
    let Some(module) = wasm_module(dir.path(), "set-namespace") else {
        return;
    };
    let repository = "example.com/wasm/set-namespace";
    let versions: Vec<(String, PathBuf)> = ["v1.0.0", "v1.2.0", "v1.3.0-rc.1"]
        .iter()
        .map(|version| (format!("{repository}:{version}"), module.clone()))
        .collect();
    let server = Server::start(&config(&versions, &dir.path().join("cache"), ""), &[]);
    let mut client = server.client().await;
    let request = |tag: &str| EvaluateFunctionRequest {
        resource_list: input("prod"),
        image: repository.to_owned(),
        tag: tag.to_owned(),
    };
    let response = client.evaluate_function(request("~1.2")).await.unwrap();
    assert_eq!(
        response.metadata().get("x-krm-resolved-image").unwrap(),
        "example.com/wasm/set-namespace:v1.2.0"
    );
    let output = String::from_utf8(response.into_inner().resource_list).unwrap();
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
    let status = client.evaluate_function(request("^2")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status
            .message()
            .contains("satisfies tag constraint \"^2\": wasm maps [v1.3.0-rc.1, v1.2.0, v1.0.0]"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_module_answers_with_its_results_and_log() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["fail-with-results", "set-namespace"]) else {
        return;
    };
    let server = Server::start(&config(&modules, &dir.path().join("cache"), ""), &[]);
    let status = call(&server, &image("fail-with-results"), &input("prod"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    let message = status.message();
    assert!(
        message.contains("exit status 1 (validation failed)"),
        "{message}"
    );
    assert!(
        message.contains("[error] apps/v1/Deployment/web: replicas must not exceed 3"),
        "{message}"
    );
    // set-namespace without a namespace fails the same way, with its own result.
    let status = call(&server, SET_NAMESPACE, &input("")).await.unwrap_err();
    assert!(
        status
            .message()
            .contains("functionConfig data.namespace is required"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_module_looping_forever_is_stopped_at_the_callers_deadline() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["loop", "set-namespace"]) else {
        return;
    };
    let server = Server::start(&config(&modules, &dir.path().join("cache"), ""), &[]);
    let status = call_with_remote_deadline(
        &server.endpoint(),
        EvaluateFunctionRequest {
            resource_list: input("prod"),
            image: image("loop"),
            tag: String::new(),
        },
        "700m",
    )
    .await
    .unwrap_err();
    assert_deadline_answer(&status);
    assert_still_serving(&server).await;
    assert_not_spinning(&server).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_call_stops_its_module() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["loop", "set-namespace"]) else {
        return;
    };
    let server = Server::start(&config(&modules, &dir.path().join("cache"), ""), &[]);
    let cpu_before = cpu_ticks(&server);
    let mut client = server.client().await;
    let running = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: input("prod"),
                image: image("loop"),
                tag: String::new(),
            })
            .await
    });
    // The loop is running once the runner has burnt a quarter second of CPU time.
    let started = Instant::now();
    while cpu_ticks(&server) < cpu_before + 25 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the module never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Dropping the call resets the HTTP/2 stream: gRPC cancellation.
    running.abort();
    let started = Instant::now();
    while !server.stderr().contains("Cancelled") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no cancelled call logged: {}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_still_serving(&server).await;
    assert_not_spinning(&server).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn runaway_modules_are_answered_with_the_limit_they_passed() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["grow", "flood", "trap", "set-namespace"]) else {
        return;
    };
    let server = Server::start(&config(&modules, &dir.path().join("cache"), ""), &[]);

    let status = call(&server, &image("grow"), &input("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("beyond the limit of 33554432 bytes (memory_limit_mib)"),
        "{}",
        status.message()
    );

    // The output limit is the runner's message size (1 MiB here).
    let status = call(&server, &image("flood"), &input("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("its output exceeded 1048576 bytes (max_output_bytes)"),
        "{}",
        status.message()
    );

    let status = call(&server, &image("trap"), &input("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains("the module trapped") && status.message().contains("unreachable"),
        "{}",
        status.message()
    );
    assert_still_serving(&server).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_module_reaches_no_file_and_only_the_environment_granted() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["sandbox"]) else {
        return;
    };
    let server = Server::start(
        &config(
            &modules,
            &dir.path().join("cache"),
            "      env: {GREETING: hello}\n",
        ),
        &[],
    );
    let (response, _) = server.call(&image("sandbox"), &input("x")).await.unwrap();
    assert_eq!(response.resource_list, input("x"), "the identity function");
    assert_eq!(
        String::from_utf8_lossy(&response.log),
        "open /etc/passwd: refused\nGREETING=hello\nHOME=(unset)\n"
    );
}

/// A runner configuration: `wasm` pulling the images under `{host}/wasm/` from the plain-HTTP
/// registry `host`, modules of at most 1 MiB, with `extra` keys in its `config:`.
fn registry_config(cache: &Path, host: &str, extra: &str) -> String {
    format!(
        "max_message_bytes: 1048576\nevaluators:\n  wasm:\n    plugin: wasm\n    config:\n      cache_dir: \"{}\"\n      max_module_mib: 1\n      registries: [{{prefix: \"{host}/wasm/\", plain_http: true}}]\n{extra}  default:\n    plugin: multi\n    config: {{chain: [wasm]}}\n",
        cache.display()
    )
}

/// kpt's layout, by tag constraint: the highest version the registry has that satisfies it
/// runs, pinned by digest (reported in `x-krm-resolved-image`), pulled and compiled once for
/// that digest; a plain artifact of one `application/wasm` layer runs by tag; an artifact of
/// another media type, an oversized layer and a missing image are errors naming the image, and
/// the runner serves on.
#[tokio::test(flavor = "multi_thread")]
async fn a_module_pushed_to_a_registry_runs_by_tag_constraint_pinned_by_digest() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace", "fail-with-results"]) else {
        return;
    };
    let set_namespace = std::fs::read(&modules[0].1).unwrap();
    let failing = std::fs::read(&modules[1].1).unwrap();
    let registry = LocalRegistry::start(&dir.path().join("registry")).expect("registry");
    let host = registry.host.clone();
    // Only v1.2.0 transforms: a wrong choice fails the call.
    for tag in ["v1.0.0", "v1.3.0-rc.1", "v2.0.0"] {
        registry
            .push_kpt_wasm("wasm/set-namespace", tag, "set-namespace.wasm", &failing)
            .unwrap();
    }
    let chosen = registry
        .push_kpt_wasm(
            "wasm/set-namespace",
            "v1.2.0",
            "set-namespace.wasm",
            &set_namespace,
        )
        .unwrap();
    let layer = |media_type, bytes| Layer {
        media_type,
        bytes,
        annotations: serde_json::Value::Null,
    };
    registry
        .push_manifest(
            "wasm/plain",
            "v1",
            &[layer("application/wasm", &set_namespace)],
        )
        .unwrap();
    registry
        .push_manifest(
            "wasm/other",
            "v1",
            &[layer("application/vnd.example.thing", b"not a module")],
        )
        .unwrap();
    let oversized = vec![0u8; 1024 * 1024 + 1];
    registry
        .push_manifest("wasm/big", "v1", &[layer("application/wasm", &oversized)])
        .unwrap();
    registry
        .push_kpt_wasm("wasm/big-in-tar", "v1", "big.wasm", &oversized)
        .unwrap();

    let server = Server::start(&registry_config(&dir.path().join("cache"), &host, ""), &[]);
    let mut client = server.client().await;
    let repository = format!("{host}/wasm/set-namespace");
    let by_constraint = || EvaluateFunctionRequest {
        resource_list: input("prod"),
        image: repository.clone(),
        tag: "~1.2".to_owned(),
    };
    let response = client
        .evaluate_function(by_constraint())
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(
        response.metadata().get("x-krm-resolved-image").unwrap(),
        format!("{repository}:v1.2.0@{chosen}").as_str()
    );
    let output = String::from_utf8(response.into_inner().resource_list).unwrap();
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
    // Once pulled, the digest's module is not pulled again.
    let blobs = registry.requests("/blobs/");
    client.evaluate_function(by_constraint()).await.unwrap();
    assert_eq!(
        registry.requests("/blobs/"),
        blobs,
        "pulled once per digest"
    );

    let status = client
        .evaluate_function(EvaluateFunctionRequest {
            tag: "^3".to_owned(),
            ..by_constraint()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains(
            "satisfies tag constraint \"^3\": the registry has [v2.0.0, v1.3.0-rc.1, v1.2.0, v1.0.0]"
        ),
        "{}",
        status.message()
    );

    let output = call(&server, &format!("{host}/wasm/plain:v1"), &input("plain"))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(output.matches("namespace: plain").count(), 3, "{output}");

    let status = call(&server, &format!("{host}/wasm/other:v1"), &input("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    for expected in [
        format!("{host}/wasm/other@sha256:"),
        "is not a WebAssembly module artifact: its layer is of media type \"application/vnd.example.thing\"".to_owned(),
    ] {
        assert!(status.message().contains(&expected), "{expected} in {}", status.message());
    }

    for (name, what) in [("big", "its layer"), ("big-in-tar", "its module file")] {
        let status = call(&server, &format!("{host}/wasm/{name}:v1"), &input("x"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        let expected =
            format!("{what} is 1048577 bytes, over the limit of 1048576 bytes (max_module_mib)");
        assert!(
            status
                .message()
                .contains(&format!("{host}/wasm/{name}@sha256:"))
                && status.message().contains(&expected),
            "{expected} in {}",
            status.message()
        );
    }

    let status = call(&server, &format!("{host}/wasm/missing:v1"), &input("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("{host}/wasm/missing:v1")),
        "{}",
        status.message()
    );

    let output = String::from_utf8(
        client
            .evaluate_function(by_constraint())
            .await
            .expect("the runner serves on")
            .into_inner()
            .resource_list,
    )
    .unwrap();
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
}

/// A pulled module marked cacheable is keyed by the digest its tag was resolved to: answered
/// again while the tag stays, never once the tag moves to another module. The first call
/// (no digest known yet) and the first after `refresh_seconds` (the digest to be asked again)
/// run uncached.
#[tokio::test(flavor = "multi_thread")]
async fn a_marked_pulled_module_is_keyed_by_its_digest() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace", "sandbox"]) else {
        return;
    };
    let registry = LocalRegistry::start(&dir.path().join("registry")).expect("registry");
    let host = registry.host.clone();
    let push = |module: &Path| {
        registry
            .push_kpt_wasm(
                "wasm/moving",
                "v1",
                "fn.wasm",
                &std::fs::read(module).unwrap(),
            )
            .unwrap()
    };
    push(&modules[0].1);
    let config = format!(
        "{}cache: {{images: [{{prefix: \"{host}/wasm/\", ttl_seconds: 600}}]}}\n",
        registry_config(
            &dir.path().join("cache"),
            &host,
            "      refresh_seconds: 1\n"
        )
    );
    let server = Server::start(&config, &[]);
    let mut client = server.client().await;
    let image = format!("{host}/wasm/moving:v1");
    let mut call = async || {
        let response = client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: input("prod"),
                image: image.clone(),
                tag: String::new(),
            })
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
        let said = response
            .metadata()
            .get("x-krm-cache")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        (said, response.into_inner().resource_list)
    };
    let (first, transformed) = call().await;
    assert_eq!(first, "bypass", "no digest known before the first pull");
    assert_eq!(
        String::from_utf8_lossy(&transformed)
            .matches("namespace: prod")
            .count(),
        3
    );
    assert_eq!(call().await, ("miss".to_owned(), transformed.clone()));
    assert_eq!(call().await, ("hit".to_owned(), transformed.clone()));

    push(&modules[1].1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (stale, moved) = call().await;
    assert_eq!(stale, "bypass", "the digest is asked again");
    assert_eq!(
        moved,
        input("prod"),
        "the new module (the identity function) ran"
    );
    assert_eq!(call().await, ("miss".to_owned(), moved.clone()));
    assert_eq!(call().await, ("hit".to_owned(), moved));
}

/// A registry answering a manifest or a tag list without end: the pull stops at the bound
/// (RESOURCE_EXHAUSTED naming the image and the bound) instead of reading on, and the runner
/// serves on.
#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_or_tag_list_without_end_is_refused_at_its_bound() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let host = endless_manifest_registry();
    let mut text = config(&modules, &dir.path().join("cache"), "");
    text = text.replace(
        "      functions:\n",
        &format!(
            "      max_module_mib: 1\n      registries: [{{prefix: \"{host}/wasm/\", plain_http: true}}]\n      functions:\n"
        ),
    );
    let server = Server::start(&text, &[]);
    let repository = format!("{host}/wasm/endless");
    let status = call(&server, &format!("{repository}:v1"), &input("prod"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains(&format!("{repository}@sha256:")),
        "names the image pinned: {}",
        status.message()
    );
    assert!(
        status
            .message()
            .contains("the manifest is over 262144 bytes"),
        "{}",
        status.message()
    );
    let status = server
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: input("prod"),
            image: repository.clone(),
            tag: "~1".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains(&format!(
            "cannot list the tags of {repository}: the tag list is over"
        )),
        "{}",
        status.message()
    );
    assert_still_serving(&server).await;
}

/// A plain-HTTP "registry" on loopback that answers every manifest and tag list request with a
/// digest and then a body that never ends; its `host:port`.
fn endless_manifest_registry() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut line = String::new();
                    while reader.read_line(&mut line).unwrap_or(0) > 2 {
                        line.clear();
                    }
                    let head = |extra: &str| {
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nDocker-Content-Digest: sha256:{}\r\n{extra}\r\n",
                            "0".repeat(64)
                        )
                    };
                    if request.starts_with("GET ")
                        && (request.contains("/manifests/") || request.contains("/tags/list"))
                    {
                        let _ = stream.write_all(head("Transfer-Encoding: chunked\r\n").as_bytes());
                        let chunk = format!("10000\r\n{}\r\n", "a".repeat(0x10000));
                        while stream.write_all(chunk.as_bytes()).is_ok() {}
                        return;
                    }
                    if stream
                        .write_all(head("Content-Length: 0\r\n").as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    host
}

/// A registry that requires a login: pulls use the credentials of the docker config file
/// `auth_file` names (the pod evaluator's format); without them the call is UNAVAILABLE,
/// naming the image.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_login_comes_from_the_docker_config_file() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let registry = LocalRegistry::start_with_login(&dir.path().join("registry"), "robot", "s3cret")
        .expect("registry");
    let host = registry.host.clone();
    registry
        .push_kpt_wasm(
            "wasm/set-namespace",
            "v1",
            "set-namespace.wasm",
            &std::fs::read(&modules[0].1).unwrap(),
        )
        .unwrap();
    let auth_file = dir.path().join(".dockerconfigjson");
    std::fs::write(
        &auth_file,
        format!(r#"{{"auths": {{"{host}": {{"username": "robot", "password": "s3cret"}}}}}}"#),
    )
    .unwrap();
    let image = format!("{host}/wasm/set-namespace:v1");
    let with_login = Server::start(
        &registry_config(
            &dir.path().join("cache"),
            &host,
            &format!("      auth_file: \"{}\"\n", auth_file.display()),
        ),
        &[],
    );
    let output = call(&with_login, &image, &input("prod"))
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", with_login.stderr()));
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");

    let anonymous = Server::start(&registry_config(&dir.path().join("cache"), &host, ""), &[]);
    let status = call(&anonymous, &image, &input("prod")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&image), "{}", status.message());
}

#[test]
fn fn_runs_a_mapped_module_and_keeps_it_compiled_by_digest() {
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let cache = dir.path().join("cache");
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, config(&modules, &cache, "")).unwrap();
    let run = || {
        let output = run_cli(
            &[
                "fn",
                "--config-file",
                config_file.to_str().unwrap(),
                SET_NAMESPACE,
            ],
            &[],
            &input("prod"),
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert_eq!(stdout.matches("namespace: prod").count(), 3, "{stdout}");
    };
    run();
    let cached = cached_files(&cache);
    assert_eq!(cached.len(), 1, "one compiled module: {cached:?}");
    let digest = sha256_hex(&modules[0].1);
    let name = cached[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with(&format!("{digest}-")) && name.ends_with(".cwasm"),
        "keyed by the module's digest {digest}: {name}"
    );
    let compiled = std::fs::read(&cached[0]).unwrap();

    // Read back as it is, then a damaged one refused, compiled again and replaced.
    run();
    assert_eq!(cached_files(&cache), cached);
    std::fs::write(&cached[0], b"not a compiled module").unwrap();
    run();
    assert_eq!(
        cached_files(&cache),
        cached,
        "nothing else left in the cache"
    );
    assert_eq!(std::fs::read(&cached[0]).unwrap(), compiled, "replaced");
}

#[test]
fn kpt_runs_a_module_through_krm_runner_fn() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let config_file = dir.path().join("config.yaml");
    std::fs::write(
        &config_file,
        config(&modules, &dir.path().join("cache"), ""),
    )
    .unwrap();
    let written = kpt_through_fn(dir.path(), &config_file, SET_NAMESPACE, "prod");
    assert!(written.contains("namespace: prod"), "{written}");
    assert!(!written.contains("namespace: old"), "{written}");
}

/// `kpt fn eval --exec "krm-runner fn IMAGE"` (with `config_file`) over a package of one
/// ConfigMap in namespace `old`, asking for `namespace`: the package's `app.yaml` after.
fn kpt_through_fn(dir: &Path, config_file: &Path, image: &str, namespace: &str) -> String {
    let package = kpt_package(
        dir,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: old\ndata:\n  key: value\n",
    );
    let function = format!(
        "--plugin-dir {} --config-file {} {image}",
        runner_binary().parent().unwrap().display(),
        config_file.display()
    );
    let output = kpt_eval_exec(&package, &function, &[&format!("namespace={namespace}")]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(package.join("app.yaml")).unwrap()
}

/// A module pulled from a registry as kpt pushes it, by `krm-runner fn` and by the real kpt
/// through it: both run it by tag, and the second run finds the module it compiled for the
/// tag's digest, compiling nothing more.
#[test]
fn fn_and_kpt_run_a_module_pulled_from_a_registry() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace"]) else {
        return;
    };
    let registry = LocalRegistry::start(&dir.path().join("registry")).expect("registry");
    let host = registry.host.clone();
    registry
        .push_kpt_wasm(
            "wasm/set-namespace",
            "v1.2.0",
            "set-namespace.wasm",
            &std::fs::read(&modules[0].1).unwrap(),
        )
        .unwrap();
    let cache = dir.path().join("cache");
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, registry_config(&cache, &host, "")).unwrap();
    let image = format!("{host}/wasm/set-namespace:v1.2.0");

    let output = run_cli(
        &["fn", "--config-file", config_file.to_str().unwrap(), &image],
        &[],
        &input("prod"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.matches("namespace: prod").count(), 3, "{stdout}");
    let compiled = cached_files(&cache);
    assert_eq!(compiled.len(), 1, "one compiled module: {compiled:?}");

    let written = kpt_through_fn(dir.path(), &config_file, &image, "staging");
    assert!(written.contains("namespace: staging"), "{written}");
    assert_eq!(
        cached_files(&cache),
        compiled,
        "compiled once for the digest"
    );
}

/// FunctionConfigs for `set-namespace` (a module for v1, its calls marked cacheable, the marker
/// binary for v1 and v2) and `set-labels` (a missing module, then the marker binary).
const WASM_FUNCTION_CONFIGS: &str = r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-namespace}
spec:
  image: set-namespace
  prefixes: [example.com/fns]
  wasmExecutor: {tags: [v1], path: set-namespace.wasm, cache: {timeToLive: 10m}}
  binaryExecutor: {tags: [v1, v2], path: marker}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-labels}
spec:
  image: set-labels
  prefixes: [example.com/fns]
  wasmExecutor: {tags: [v1], path: missing.wasm}
  binaryExecutor: {tags: [v1], path: marker}
"#;

/// A FunctionConfig's wasmExecutor runs its module for the tags it lists, before the binary;
/// the module is compiled ahead of the first call; its `cache` mark makes an identical call a
/// hit; a missing module file is skipped for the next executor; `functions --resolve` and
/// `--status` say so.
#[tokio::test(flavor = "multi_thread")]
async fn a_function_config_wasm_executor_runs_its_module_before_the_binary() {
    let dir = scratch();
    let Some(module) = wasm_module(dir.path(), "set-namespace") else {
        return;
    };
    let bin = dir.path().join("bin");
    let fc = dir.path().join("fc");
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&fc).unwrap();
    std::fs::copy(&module, bin.join("set-namespace.wasm")).unwrap();
    script(&bin, "marker", "cat\necho marker >&2");
    std::fs::write(fc.join("fns.yaml"), WASM_FUNCTION_CONFIGS).unwrap();
    let config = format!(
        r#"evaluators:
  wasm: {{plugin: wasm, config: {{cache_dir: "{cache}"}}}}
  exec: {{plugin: exec}}
  default: {{plugin: multi, config: {{chain: [exec]}}}}
function_configs:
  paths: ["{fc}"]
  functions_dir: "{bin}"
  executors: {{goExecutor: [], wasmExecutor: wasm, binaryExecutor: exec, podExecutor: ""}}
"#,
        cache = cache.display(),
        fc = fc.display(),
        bin = bin.display(),
    );
    let server = Server::start(&config, &[]);
    // Warm-up compiles the module (no `functions:` entry maps it) before any call.
    let started = Instant::now();
    while std::fs::read_dir(&cache).map_or(0, Iterator::count) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no module compiled ahead of the first call\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (response, evaluator) = server
        .call("example.com/fns/set-namespace:v1", &input("prod"))
        .await
        .expect("wasmExecutor call");
    assert_eq!(evaluator, "wasm");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
    assert_eq!(
        String::from_utf8_lossy(&response.log),
        "set-namespace: 2 items in namespace prod\n"
    );
    // Marked cacheable on its section: the same call again is answered from the cache.
    let cached = |namespace: &str| {
        let server = &server;
        let request = EvaluateFunctionRequest {
            resource_list: input(namespace),
            image: "example.com/fns/set-namespace:v1".to_owned(),
            tag: String::new(),
        };
        async move {
            let response = server
                .client()
                .await
                .evaluate_function(request)
                .await
                .unwrap();
            response.metadata().get("x-krm-cache").unwrap().to_owned()
        }
    };
    assert_eq!(cached("prod").await, "hit");
    assert_eq!(cached("staging").await, "miss");
    for image in [
        "example.com/fns/set-namespace:v2",
        "example.com/fns/set-labels:v1",
    ] {
        let (response, evaluator) = server.call(image, &input("prod")).await.expect(image);
        assert_eq!(evaluator, "exec", "{image}");
        assert_eq!(String::from_utf8_lossy(&response.log).trim(), "marker");
    }

    let config_file = dir.path().join("runner.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let config_file = config_file.display().to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["--config-file", config_file.as_str(), "functions"];
        all.extend_from_slice(args);
        let output = run_cli(&all, &[], b"");
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
        )
    };
    let (code, text) = cli(&["--resolve", "example.com/fns/set-namespace:v1"]);
    assert_eq!(code, Some(0), "{text}");
    let module = bin.join("set-namespace.wasm");
    assert!(
        text.contains(&format!(
            "wasmExecutor:    serves: module {} on evaluator \"wasm\"",
            module.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("binaryExecutor:  next if declined: "),
        "{text}"
    );
    let missing = bin.join("missing.wasm");
    let (_, text) = cli(&["--resolve", "example.com/fns/set-labels:v1"]);
    assert!(
        text.contains(&format!(
            "wasmExecutor:    skipped: module {0}: module {0} is missing",
            missing.display()
        )),
        "{text}"
    );
    let (code, text) = cli(&["--status"]);
    assert_eq!(code, Some(1), "{text}");
    let line = |needle: &str| {
        text.lines()
            .find(|line| line.contains("wasmExecutor") && line.contains(needle))
            .unwrap_or_else(|| panic!("no wasmExecutor line with {needle:?} in\n{text}"))
            .to_owned()
    };
    assert!(line("set-namespace").contains("Ready"), "{text}");
    assert!(line("set-labels").contains("Failed"), "{text}");
    assert!(line("set-labels").contains("is missing"), "{text}");
}

/// A wasmExecutor's `image` without a tag: the module of the tag the call runs as, pulled from
/// its registry (v1.2.0 transforms, v1.0.0 fails with results); a requested constraint one of
/// its ranges overlaps is resolved against the module repository's tags; an image under none of
/// the instance's `registries` prefixes is declined, and the binary serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_wasm_executor_image_pulls_the_module_of_the_calls_tag() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let Some(modules) = modules(dir.path(), &["set-namespace", "fail-with-results"]) else {
        return;
    };
    let registry = LocalRegistry::start(&dir.path().join("registry")).expect("registry");
    let host = registry.host.clone();
    for (tag, module) in [("v1.0.0", &modules[1].1), ("v1.2.0", &modules[0].1)] {
        registry
            .push_kpt_wasm(
                "wasm/set-namespace",
                tag,
                "set-namespace.wasm",
                &std::fs::read(module).unwrap(),
            )
            .unwrap();
    }
    let bin = dir.path().join("bin");
    let fc = dir.path().join("fc");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&fc).unwrap();
    script(&bin, "marker", "cat\necho marker >&2");
    std::fs::write(
        fc.join("fns.yaml"),
        format!(
            r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {{name: set-namespace}}
spec:
  image: set-namespace
  prefixes: [example.com/fns]
  wasmExecutor: {{tags: [v1.0.0, ">= 1.1.0"], image: "{host}/wasm/set-namespace"}}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {{name: set-labels}}
spec:
  image: set-labels
  prefixes: [example.com/fns]
  wasmExecutor: {{tags: [v1], image: elsewhere.example/wasm/set-labels}}
  binaryExecutor: {{tags: [v1], path: marker}}
"#
        ),
    )
    .unwrap();
    let config = format!(
        r#"evaluators:
  wasm:
    plugin: wasm
    config:
      cache_dir: "{cache}"
      registries: [{{prefix: "{host}/wasm/", plain_http: true}}]
  exec: {{plugin: exec}}
  default: {{plugin: multi, config: {{chain: [exec]}}}}
function_configs:
  paths: ["{fc}"]
  functions_dir: "{bin}"
  executors: {{goExecutor: [], wasmExecutor: wasm, binaryExecutor: exec, podExecutor: ""}}
"#,
        cache = dir.path().join("cache").display(),
        fc = fc.display(),
        bin = bin.display(),
    );
    let server = Server::start(&config, &[]);
    let output = call(
        &server,
        "example.com/fns/set-namespace:v1.2.0",
        &input("prod"),
    )
    .await
    .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(output.matches("namespace: prod").count(), 3, "{output}");
    let status = call(
        &server,
        "example.com/fns/set-namespace:v1.0.0",
        &input("prod"),
    )
    .await
    .unwrap_err();
    assert!(
        status.message().contains("replicas must not exceed 3"),
        "{status:?}"
    );

    let response = server
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: input("ranged"),
            image: "example.com/fns/set-namespace".to_owned(),
            tag: "~1.2".to_owned(),
        })
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    let resolved = response.metadata().get("x-krm-resolved-image").unwrap();
    assert!(
        resolved
            .to_str()
            .unwrap()
            .starts_with(&format!("{host}/wasm/set-namespace:v1.2.0@sha256:")),
        "{resolved:?}"
    );
    let output = String::from_utf8(response.into_inner().resource_list).unwrap();
    assert_eq!(output.matches("namespace: ranged").count(), 3, "{output}");

    let (response, evaluator) = server
        .call("example.com/fns/set-labels:v1", &input("prod"))
        .await
        .expect("the binary serves");
    assert_eq!(evaluator, "exec");
    assert_eq!(String::from_utf8_lossy(&response.log).trim(), "marker");
}

/// The compiled modules in `cache`, sorted.
fn cached_files(cache: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
}

fn sha256_hex(path: &Path) -> String {
    let output = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8(output.stdout).unwrap()[..64].to_owned()
}

fn cpu_ticks(server: &Server) -> u64 {
    process_stat(server.pid() as i32)
        .expect("the runner is alive")
        .cpu_ticks
}

/// The runner is idle again: no module still spinning on one of its threads. Measured over a
/// full second, in which an endless loop would use about 100 ticks.
async fn assert_not_spinning(server: &Server) {
    let before = cpu_ticks(server);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_ticks(server) - before;
    assert!(used < 50, "the runner used {used} ticks of CPU in a second");
}
