//! The function trust policy end to end: the real runner with real plugins, a local
//! docker-registry holding images and cosign-format signatures made here with the key types
//! cosign uses (ECDSA P-256, its default, and Ed25519), pushed as cosign pushes them (the
//! manifest tagged `sha256-<hex>.sig`, one simple-signing layer, the signature in its
//! annotation). Each refusal answers PERMISSION_DENIED naming the rule and the reason; an
//! allowed call's evaluator gets the image by digest.
//!
//! Needs docker-registry (tests/run.sh installs it), and for the pod evaluator's test podman,
//! runc and busybox-static too: skipped loudly without them, a failure under CI=true.

#[path = "support/pod_world.rs"]
mod pod_world;

use std::path::Path;
use std::time::Duration;

use krm_kube_standin::cosign::{self, Key, SIMPLE_SIGNING};
use krm_kube_standin::registry::{self, Layer, LocalRegistry};
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{Server, exec_chain_config, resource_list, run_cli, scratch, script};
use tonic::Code;

async fn call(server: &Server, image: &str) -> Result<String, tonic::Status> {
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: resource_list(&["a"]),
        image: image.to_owned(),
        tag: String::new(),
    });
    request.set_timeout(Duration::from_secs(60));
    let response = server.client().await.evaluate_function(request).await?;
    Ok(String::from_utf8_lossy(&response.into_inner().log)
        .trim()
        .to_owned())
}

async fn refused(server: &Server, image: &str) -> String {
    let status = call(server, image).await.expect_err(image);
    assert_eq!(status.code(), Code::PermissionDenied, "{image}: {status:?}");
    status.message().to_owned()
}

fn write_key(dir: &Path, name: &str, key: &Key) -> String {
    let path = dir.join(name);
    std::fs::write(&path, key.public_pem()).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn only_allowed_pinned_and_signed_images_run() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let registry = LocalRegistry::start(&dir.path().join("registry")).expect("registry");
    let host = registry.host.clone();
    let (release, ed_release, stranger) = (Key::p256(7), Key::ed25519(9), Key::p256(11));

    let signed = registry.push_image("krm/signed", "v1", "signed").unwrap();
    cosign::sign(&registry, "krm/signed", &signed, &release).unwrap();
    let ed_signed = registry.push_image("krm/ed", "v1", "ed").unwrap();
    cosign::sign(&registry, "krm/ed", &ed_signed, &ed_release).unwrap();
    registry
        .push_image("krm/unsigned", "v1", "unsigned")
        .unwrap();
    // A valid signature by the trusted key, but over the signed image's digest.
    let tampered = registry
        .push_image("krm/tampered", "v1", "tampered")
        .unwrap();
    let other_payload = cosign::payload(&registry, "krm/tampered", &signed);
    cosign::push_signature(
        &registry,
        "krm/tampered",
        &tampered,
        &other_payload,
        &release,
    )
    .unwrap();
    let wrong_key = registry
        .push_image("krm/wrong-key", "v1", "wrong key")
        .unwrap();
    cosign::sign(&registry, "krm/wrong-key", &wrong_key, &stranger).unwrap();
    let moved_before = registry.push_image("krm/moved", "v1", "before").unwrap();
    // A multi-platform image: its tag names an image index, which cosign signs by the index's
    // digest; that digest is what the evaluator gets.
    let platform = registry
        .push_image("krm/multi", "amd64", "multi amd64")
        .unwrap();
    let multi = registry
        .push_index("krm/multi", "v1", &[&platform])
        .unwrap();
    cosign::sign(&registry, "krm/multi", &multi, &release).unwrap();
    // A registry answering the signature's tag with an image index (around a signature manifest
    // that verifies): not cosign's layout, refused rather than followed.
    let listed = registry.push_image("krm/listed", "v1", "listed").unwrap();
    cosign::sign(&registry, "krm/listed", &listed, &release).unwrap();
    let signature_manifest = registry::sha256_digest(
        &registry::http_get_accept(
            registry.addr,
            &format!(
                "/v2/krm/listed/manifests/{}",
                cosign::signature_tag(&listed)
            ),
            registry::OCI_MANIFEST,
            Duration::from_secs(10),
        )
        .unwrap()
        .1,
    );
    registry
        .push_index(
            "krm/listed",
            &cosign::signature_tag(&listed),
            &[&signature_manifest],
        )
        .unwrap();

    let functions = dir.path().join("functions");
    std::fs::create_dir(&functions).unwrap();
    let pinned = script(&functions, "pinned", "cat; echo \"ran by digest\" >&2");
    let by_tag = script(&functions, "by-tag", "cat; echo \"ran by tag\" >&2");
    let signed_pinned = format!("{host}/krm/signed@{signed}");
    let ed_pinned = format!("{host}/krm/ed@{ed_signed}");
    let moved_pinned = format!("{host}/krm/moved@{moved_before}");
    let multi_pinned = format!("{host}/krm/multi@{multi}");
    let signed_tag = format!("{host}/krm/signed:v1");
    let evil = format!("{host}/evil/miner:v1");
    let mapped: Vec<(&str, &Path)> = vec![
        (&signed_pinned, &pinned),
        (&ed_pinned, &pinned),
        (&moved_pinned, &pinned),
        (&multi_pinned, &pinned),
        (&signed_tag, &by_tag),
        (&evil, &by_tag),
    ];
    let keys = dir.path();
    let policy = format!(
        "policy:
  default: deny
  keys:
    release: \"{}\"
    ed-release: \"{}\"
  registries: {{plain_http: [\"{host}\"]}}
  rules:
  - {{name: no-evil, images: [\"{host}/evil/**\"], action: deny}}
  - {{name: pinned, images: [\"{host}/krm/moved\"], action: allow, digests: [\"{moved_before}\"]}}
  - {{name: signed, images: [\"{host}/krm/*\"], tags: \">= 1\", action: allow, signed_by: [release, ed-release]}}
",
        write_key(keys, "release.pub", &release),
        write_key(keys, "ed-release.pub", &ed_release),
    );
    let config = exec_chain_config(&mapped, "exec", &policy);
    let server = Server::start(&config, &[]);

    let pushed_signatures = registry.requests(".sig");
    // Signed by either trusted key: runs, and the evaluator gets the image by digest.
    for image in [&signed_tag, &format!("{host}/krm/ed:v1")] {
        let log = call(&server, image)
            .await
            .unwrap_or_else(|status| panic!("{image}: {status:?}\n{}", server.stderr()));
        assert_eq!(log, "ran by digest", "{image}");
    }
    // A second call is decided from the verified digest: no new signature request.
    let signature_requests = registry.requests(".sig");
    assert_eq!(
        signature_requests - pushed_signatures,
        2,
        "one signature manifest fetched per image"
    );
    call(&server, &signed_tag).await.unwrap();
    assert_eq!(registry.requests(".sig"), signature_requests);

    let unsigned = refused(&server, &format!("{host}/krm/unsigned:v1")).await;
    assert!(
        unsigned.contains(
            "refused by policy rule \"signed\": unsigned: the registry has no signature for sha256:"
        ),
        "{unsigned}"
    );
    let other = refused(&server, &format!("{host}/krm/tampered:v1")).await;
    assert!(
        other.contains(&format!(
            "refused by policy rule \"signed\": signature of another digest: it signs {signed}, the image is {tampered}"
        )),
        "{other}"
    );
    let unknown = refused(&server, &format!("{host}/krm/wrong-key:v1")).await;
    assert!(
        unknown.contains(&format!(
            "refused by policy rule \"signed\": unknown key: no signature of {wrong_key} verifies with the rule's keys (release, ed-release)"
        )),
        "{unknown}"
    );
    let denied = refused(&server, &evil).await;
    assert!(
        denied.contains(&format!(
            "function image \"{evil}\" refused by policy rule \"no-evil\": the rule denies it"
        )),
        "{denied}"
    );
    let default = refused(&server, "testkit/echo").await;
    assert!(
        default.contains(
            "refused by policy rule \"default\": no rule allows it and the policy's default is deny"
        ),
        "{default}"
    );
    // A digest alone names no version the rule's tags could judge: the allow rule does not
    // match it.
    let digest_alone = refused(&server, &signed_pinned).await;
    assert!(digest_alone.contains("rule \"default\""), "{digest_alone}");
    // Tags outside the rule's fall through to the default.
    let old = refused(&server, &format!("{host}/krm/signed:v0.9")).await;
    assert!(old.contains("rule \"default\""), "{old}");

    // The pinned tag runs until it moves; then it is refused, its new digest named.
    assert_eq!(
        call(&server, &format!("{host}/krm/moved:v1"))
            .await
            .unwrap(),
        "ran by digest"
    );
    let moved_after = registry.push_image("krm/moved", "v1", "after").unwrap();
    let moved = refused(&server, &format!("{host}/krm/moved:v1")).await;
    assert!(
        moved.contains(&format!(
            "refused by policy rule \"pinned\": {moved_after} is not a digest the rule pins ({moved_before})"
        )),
        "{moved}"
    );

    // A signature manifest without the signature, or with a payload over the bound: refused
    // as malformed, before any key is tried.
    let bare = registry.push_image("krm/bare", "v1", "bare").unwrap();
    registry
        .push_manifest(
            "krm/bare",
            &cosign::signature_tag(&bare),
            &[Layer {
                media_type: SIMPLE_SIGNING,
                bytes: b"{}",
                annotations: serde_json::json!({}),
            }],
        )
        .unwrap();
    let malformed = refused(&server, &format!("{host}/krm/bare:v1")).await;
    assert!(
        malformed.contains(&format!(
            "refused by policy rule \"signed\": malformed signature of {bare}: a layer has no \
             dev.cosignproject.cosign/signature annotation"
        )),
        "{malformed}"
    );
    let huge = registry.push_image("krm/huge", "v1", "huge").unwrap();
    let payload = vec![b' '; 65 * 1024];
    cosign::push_signature(&registry, "krm/huge", &huge, &payload, &release).unwrap();
    let too_big = refused(&server, &format!("{host}/krm/huge:v1")).await;
    assert!(
        too_big.contains(&format!(
            "malformed signature of {huge}: its payload is 66560 bytes, over 65536"
        )),
        "{too_big}"
    );

    // A multi-platform image's tag is pinned to its index's digest, signed as cosign signs it.
    assert_eq!(
        call(&server, &format!("{host}/krm/multi:v1"))
            .await
            .unwrap(),
        "ran by digest"
    );
    let listed_refusal = refused(&server, &format!("{host}/krm/listed:v1")).await;
    assert!(
        listed_refusal.contains(&format!(
            "refused by policy rule \"signed\": malformed signature of {listed}: {} is an image \
             index (a manifest list), not cosign's signature manifest",
            cosign::signature_tag(&listed)
        )),
        "{listed_refusal}"
    );

    // The call's log line carries the decision.
    let stderr = server.stderr();
    assert!(
        stderr.contains("allowed by rule \\\"signed\\\": pinned to")
            || stderr.contains("allowed by rule \"signed\": pinned to"),
        "{stderr}"
    );

    // `functions --resolve` prints the same decisions.
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let config_file = config_file.display().to_string();
    let resolve = |image: &str| {
        let output = run_cli(
            &[
                "functions",
                "--config-file",
                &config_file,
                "--resolve",
                image,
            ],
            &[],
            b"",
        );
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, text) = resolve(&signed_tag);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("policy:          allowed by rule \"signed\": pinned to sha256:")
            && text.contains(&format!("runs:            {signed_pinned}")),
        "{text}"
    );
    let (code, text) = resolve(&format!("{host}/krm/unsigned:v1"));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("refused by policy rule \"signed\": unsigned"),
        "{text}"
    );
}

/// The pod evaluator, allowed a signed image by a tag, starts the pod with the image by digest.
#[tokio::test(flavor = "multi_thread")]
async fn the_pod_evaluator_starts_the_digest_the_policy_checked() {
    if !krm_kube_standin::fixture::require_podman("the trust policy's pinned pods") {
        return;
    }
    let world = tokio::task::spawn_blocking(pod_world::pod_world)
        .await
        .unwrap();
    let cluster = &world.cluster;
    let registry = &cluster.registry;
    let image = cluster
        .push(&pod_world::function_image(&["/bin/cat"]), "krm/pinned:v1")
        .expect("function image");
    let (status, manifest) = registry::http_get_accept(
        registry.addr,
        "/v2/krm/pinned/manifests/v1",
        "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(status, 200);
    let digest = registry::sha256_digest(&manifest);
    let release = Key::p256(7);
    cosign::sign(registry, "krm/pinned", &digest, &release).unwrap();
    let dir = scratch();
    let host = &registry.host;
    let config = format!(
        "{}policy:
  default: deny
  keys: {{release: \"{}\"}}
  registries: {{plain_http: [\"{host}\"]}}
  rules:
  - {{name: signed, images: [\"{host}/krm/*\"], action: allow, signed_by: [release]}}
",
        pod_world::runner_config(cluster, &world.wrapper, ""),
        write_key(dir.path(), "release.pub", &release),
    );
    let server = Server::start(&config, &[]);
    let input = resource_list(&["pinned"]);
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: input.clone(),
        image: image.clone(),
        tag: String::new(),
    });
    request.set_timeout(Duration::from_secs(120));
    let response = server
        .client()
        .await
        .evaluate_function(request)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(response.metadata().get("x-krm-evaluator").unwrap(), "pod");
    assert_eq!(response.into_inner().resource_list, input);
    let pods: serde_json::Value = serde_json::from_str(&pod_world::kubectl(
        cluster,
        &["get", "pods", "-n", pod_world::NAMESPACE, "-o", "json"],
    ))
    .unwrap();
    let images: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|pod| pod["spec"]["containers"].as_array().unwrap())
        .filter_map(|container| container["image"].as_str())
        .collect();
    assert_eq!(images, [format!("{host}/krm/pinned@{digest}")], "{pods:#}");
}

/// A registry that never answers: the check gives up after `timeout_seconds`, UNAVAILABLE,
/// and the runner serves on.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_does_not_answer_is_unavailable_within_the_bound() {
    // Connections are accepted by the kernel and never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = silent.local_addr().unwrap().to_string();
    let policy = format!(
        "policy:
  registries: {{plain_http: [\"{host}\"], timeout_seconds: 1}}
  rules:
  - {{name: pinned, images: [\"{host}/**\"], action: allow, require_digest: true}}
"
    );
    let server = Server::start(&exec_chain_config(&[], "kit", &policy), &[]);
    let status = call(&server, &format!("{host}/krm/fn:v1"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains(
            "refused by policy rule \"pinned\": the registry could not be asked: no answer within 1000 ms"
        ),
        "{status:?}"
    );
    // Images no rule pins are not held up.
    assert_eq!(call(&server, "testkit/echo").await.unwrap(), "kit");
    drop(silent);
}

/// A registry that requires a login: the policy asks it with the credentials of the docker
/// config file its `registries.auth_file` names (the format the pod evaluator's private
/// registries read), and without them it is UNAVAILABLE, the registry's refusal named.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_login_comes_from_the_docker_config_file() {
    if let Err(missing) = registry::available() {
        krm_kube_standin::fixture::skip(&missing);
        return;
    }
    let dir = scratch();
    let registry =
        LocalRegistry::start_with_login(&dir.path().join("registry"), "robot", "s3cret:x")
            .expect("registry");
    assert!(registry.refuses_anonymous());
    let host = registry.host.clone();
    let release = Key::p256(7);
    let digest = registry.push_image("krm/private", "v1", "private").unwrap();
    cosign::sign(&registry, "krm/private", &digest, &release).unwrap();
    let auth_file = dir.path().join(".dockerconfigjson");
    std::fs::write(
        &auth_file,
        format!(r#"{{"auths": {{"{host}": {{"username": "robot", "password": "s3cret:x"}}}}}}"#),
    )
    .unwrap();
    let functions = dir.path().join("functions");
    std::fs::create_dir(&functions).unwrap();
    let pinned = script(&functions, "pinned", "cat; echo \"ran by digest\" >&2");
    let by_digest = format!("{host}/krm/private@{digest}");
    let key = write_key(dir.path(), "release.pub", &release);
    let config = |auth: &str| {
        exec_chain_config(
            &[(&by_digest, &pinned)],
            "exec",
            &format!(
                "policy:
  keys: {{release: \"{key}\"}}
  registries: {{plain_http: [\"{host}\"]{auth}}}
  rules:
  - {{name: signed, images: [\"{host}/krm/*\"], action: allow, signed_by: [release]}}
"
            ),
        )
    };
    let with_login = Server::start(
        &config(&format!(", auth_file: \"{}\"", auth_file.display())),
        &[],
    );
    let image = format!("{host}/krm/private:v1");
    let log = call(&with_login, &image)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", with_login.stderr()));
    assert_eq!(log, "ran by digest");

    let anonymous = Server::start(&config(""), &[]);
    let status = call(&anonymous, &image).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains("refused by policy rule \"signed\": the registry could not be asked")
            && status.message().contains("Not authorized"),
        "{status:?}"
    );
}

#[test]
fn config_check_refuses_a_malformed_policy_naming_each_field() {
    let dir = scratch();
    let not_a_key = dir.path().join("not-a-key.pub");
    std::fs::write(&not_a_key, "hello\n").unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "policy:
  keys: {{release: \"{}\"}}
  registries: {{auth_file: \"{}\"}}
  rules:
  - {{name: a, images: [\"ghcr.io/[x\"], action: allow}}
  - {{name: b, images: [\"**\"], tags: \">> 1\", action: allow, signed_by: [nobody]}}
",
            not_a_key.display(),
            not_a_key.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let output = run_cli(&["config", "check", "--config-file", &config], &[], b"");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for expected in [
        "policy.keys.release: ",
        "is not a PEM public key",
        "policy.registries.auth_file: ",
        "not-a-key.pub: not a docker config JSON file",
        "policy.rules[0].images[0]: invalid glob \"ghcr.io/[x\"",
        "policy.rules[1].tags: invalid version constraint \">> 1\"",
        "policy.rules[1].signed_by[0]: no key named \"nobody\" in policy.keys",
    ] {
        assert!(
            stderr.contains(expected),
            "{expected:?} missing from:\n{stderr}"
        );
    }
}

#[test]
fn a_local_function_run_obeys_the_policy_unless_told_to_skip_it() {
    let dir = scratch();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "policy: {default: deny}\n").unwrap();
    let config = config.display().to_string();
    let input = resource_list(&["a"]);
    let output = run_cli(
        &[
            "fn",
            "--config-file",
            &config,
            "set-namespace",
            "--",
            "namespace=x",
        ],
        &[],
        &input,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "krm-runner fn: function image \"set-namespace\" refused by policy rule \"default\""
        ),
        "{stderr}"
    );
    let output = run_cli(
        &[
            "fn",
            "--config-file",
            &config,
            "--skip-trust-policy",
            "set-namespace",
            "--",
            "namespace=x",
        ],
        &[],
        &input,
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("namespace: x"));
}
