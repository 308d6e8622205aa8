//! Function versions through the real runner over gRPC: Porch's request field 3 (`Tag`, a
//! Masterminds semver constraint for an untagged image) resolved by the builtin and exec
//! evaluators, by FunctionConfig routing whose executor tags are constraints, and explained by
//! `functions --resolve IMAGE --tag CONSTRAINT`.

use std::path::Path;
use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use krm_runner_tests::{Server, resource_list, run_cli, scratch, script};
use tonic::Code;

const REPO: &str = "example.com/fns/marker";

/// An answer: the response, the instance that served, and `x-krm-resolved-image`.
type Answer = (EvaluateFunctionResponse, String, Option<String>);

async fn call(
    server: &Server,
    image: &str,
    tag: &str,
    input: &[u8],
) -> Result<Answer, tonic::Status> {
    let response = server
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: input.to_vec(),
            image: image.to_owned(),
            tag: tag.to_owned(),
        })
        .await?;
    let header = |name: &str| {
        response
            .metadata()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let evaluator = header("x-krm-evaluator").unwrap_or_default();
    let resolved = header("x-krm-resolved-image");
    Ok((response.into_inner(), evaluator, resolved))
}

/// One executable per version in `dir/bin`, each echoing its input and saying its version on
/// stderr.
fn versioned_binaries(dir: &Path, versions: &[&str]) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for version in versions {
        script(
            &dir.join("bin"),
            version,
            &format!("cat\necho {version} >&2"),
        );
    }
}

/// builtin and exec behind multi; exec maps `REPO:<version>` for each version, plus a FunctionConfig
/// folder `dir/fc` re-read every 100 ms.
fn config(dir: &Path, versions: &[&str]) -> String {
    let functions: String = versions
        .iter()
        .map(|version| format!("        - {{image: \"{REPO}:{version}\", path: {version}}}\n"))
        .collect();
    format!(
        r#"serve: default
evaluators:
  builtin: {{plugin: builtin}}
  exec:
    plugin: exec
    config:
      functions_dir: "{bin}"
      functions:
{functions}  default: {{plugin: multi, config: {{chain: [builtin, exec]}}}}
function_configs:
  paths: ["{fc}"]
  reload_interval_seconds: 0.1
  functions_dir: "{bin}"
  executors: {{goExecutor: builtin, binaryExecutor: exec, podExecutor: ""}}
"#,
        bin = dir.join("bin").display(),
        fc = dir.join("fc").display(),
    )
}

const VERSIONS: &[&str] = &["v1.2.3", "v1.2.7", "v1.3.0-rc.1", "v0.9.0"];

fn setup() -> (tempfile::TempDir, String) {
    let dir = scratch();
    versioned_binaries(dir.path(), VERSIONS);
    std::fs::create_dir_all(dir.path().join("fc")).unwrap();
    let config = config(dir.path(), VERSIONS);
    (dir, config)
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_runs_the_highest_mapped_version_satisfying_the_requested_tag() {
    let (_dir, config) = setup();
    let server = Server::start(&config, &[]);
    let input = resource_list(&["a"]);

    for (constraint, version) in [
        ("~1.2", "v1.2.7"),
        (">= 1.2.3, < 1.2.7", "v1.2.3"),
        ("1.2.3 - 1.2.6 || <1", "v1.2.3"),
        ("^0.9", "v0.9.0"),
        ("*", "v1.2.7"),
        // A pre-release only when the constraint names one.
        (">=1.3.0-0", "v1.3.0-rc.1"),
        ("v1.2.3", "v1.2.3"),
    ] {
        let (response, evaluator, resolved) = call(&server, REPO, constraint, &input)
            .await
            .unwrap_or_else(|status| panic!("{constraint}: {status:?}\n{}", server.stderr()));
        assert_eq!(evaluator, "exec", "{constraint}");
        assert_eq!(
            String::from_utf8_lossy(&response.log).trim(),
            version,
            "{constraint}"
        );
        assert_eq!(response.resource_list, input, "{constraint}");
        assert_eq!(
            resolved.as_deref(),
            Some(format!("{REPO}:{version}").as_str())
        );
    }

    // The per-call log line names the constraint and what it resolved to.
    let stderr = server.stderr();
    let line = stderr
        .lines()
        .find(|line| line.contains("tag=\"~1.2\"") || line.contains("tag=~1.2"))
        .unwrap_or_else(|| panic!("no call line for ~1.2:\n{stderr}"));
    assert!(line.contains(&format!("{REPO}:v1.2.7")), "{line}");

    // Callers without field 3 are served exactly as before, without the header.
    let (response, evaluator, resolved) = call(&server, &format!("{REPO}:v1.2.3"), "", &input)
        .await
        .unwrap();
    assert_eq!((evaluator.as_str(), resolved), ("exec", None));
    assert_eq!(String::from_utf8_lossy(&response.log).trim(), "v1.2.3");
}

#[tokio::test(flavor = "multi_thread")]
async fn unsatisfiable_and_malformed_constraints_are_refused_clearly() {
    let (_dir, config) = setup();
    let server = Server::start(&config, &[]);
    let input = resource_list(&["a"]);

    let status = call(&server, REPO, "^2", &input).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status
            .message()
            .starts_with(&format!("function \"{REPO}\" not found: ")),
        "{status:?}"
    );
    assert!(
        status.message().contains(&format!(
            "exec: no version of \"{REPO}\" satisfies tag constraint \"^2\": exec maps \
             [v1.3.0-rc.1, v1.2.7, v1.2.3, v0.9.0]"
        )),
        "{status:?}"
    );
    // An image nobody knows: NOT_FOUND still names the constraint.
    let status = call(&server, "example.com/fns/unknown", "~1", &input)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("example.com/fns/unknown"),
        "{status:?}"
    );
    assert!(status.message().contains("\"~1\""), "{status:?}");

    for (image, tag, expected) in [
        (
            REPO,
            ">= banana",
            "invalid version constraint \">= banana\"",
        ),
        (REPO, "1.2 -", "hyphen range"),
        (REPO, "||", "empty"),
        (
            &format!("{REPO}:v1.2.3") as &str,
            "~1.2",
            "already names a version",
        ),
        (
            &format!("{REPO}@sha256:{}", "0".repeat(64)) as &str,
            "~1.2",
            "already names a version",
        ),
    ] {
        let status = call(&server, image, tag, &input).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{tag}: {status:?}");
        assert!(status.message().contains(expected), "{tag}: {status:?}");
        assert!(status.message().contains(tag), "{tag}: {status:?}");
    }
    let long = "1".repeat(10_000);
    let status = call(&server, REPO, &long, &input).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().len() < 300, "{}", status.message());

    // Still serving.
    call(&server, REPO, "~1.2", &input)
        .await
        .expect("serving after refusals");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_builtin_resolves_among_the_catalog_tags_it_reproduces() {
    let (_dir, config) = setup();
    let server = Server::start(&config, &[]);
    let image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
    let input = b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {namespace: resolved}}
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
";
    let (response, evaluator, resolved) = call(&server, image, "~0.4.0", input)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(evaluator, "builtin");
    assert_eq!(resolved.as_deref(), Some(&*format!("{image}:v0.4.1")));
    assert!(String::from_utf8_lossy(&response.resource_list).contains("namespace: resolved"));

    let status = call(&server, image, ">0.5", input).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(
        status.message().contains(&format!(
            "no version of \"{image}\" satisfies tag constraint \">0.5\": the builtin reproduces ["
        )) && status.message().contains("v0.4.1"),
        "{status:?}"
    );
}

fn write_function_config(dir: &Path, yaml: &str) {
    let staged = dir.join("fc/.fns.yaml.tmp");
    std::fs::write(&staged, yaml).unwrap();
    std::fs::rename(&staged, dir.join("fc/fns.yaml")).unwrap();
}

const ROUTED: &str = r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: routed}
spec:
  image: routed
  prefixes: [example.com/fns]
  binaryExecutor: {tags: ["~1.2", v1.2.3, v1.2.7], path: v1.2.7}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn function_config_tags_are_constraints_and_requested_tags_resolve_against_them() {
    let (dir, config) = setup();
    write_function_config(dir.path(), ROUTED);
    let server = Server::start(&config, &[]);
    let input = resource_list(&["a"]);

    // A tagged request falls under `~1.2`.
    let (response, evaluator, resolved) =
        call(&server, "example.com/fns/routed:v1.2.9", "", &input)
            .await
            .unwrap();
    assert_eq!((evaluator.as_str(), resolved), ("exec", None));
    assert_eq!(String::from_utf8_lossy(&response.log).trim(), "v1.2.7");
    let status = call(&server, "example.com/fns/routed:v1.3.0", "", &input)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    // A requested constraint runs the highest tag the executor names exactly.
    let (_, evaluator, resolved) = call(&server, "example.com/fns/routed", "^1", &input)
        .await
        .unwrap();
    assert_eq!(evaluator, "exec");
    assert_eq!(resolved.as_deref(), Some("example.com/fns/routed:v1.2.7"));
    let (_, _, resolved) = call(&server, "example.com/fns/routed", "<1.2.5", &input)
        .await
        .unwrap();
    assert_eq!(resolved.as_deref(), Some("example.com/fns/routed:v1.2.3"));
    let status = call(&server, "example.com/fns/routed", "^2", &input)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains(
            r#"binaryExecutor: no tag among ["~1.2", "v1.2.3", "v1.2.7"] satisfies constraint "^2""#
        ) && status
            .message()
            .contains("not found: FunctionConfig routed ("),
        "{status:?}"
    );

    // A tag that is not a constraint refuses the file whole, naming file, field and text.
    write_function_config(dir.path(), &ROUTED.replace("\"~1.2\"", "\"~1.2 ||\""));
    let started = Instant::now();
    let refusal = loop {
        let stderr = server.stderr();
        if let Some(line) = stderr
            .lines()
            .find(|line| line.contains("keeping the last good routing"))
        {
            break line.to_owned();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{stderr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(refusal.contains("fns.yaml"), "{refusal}");
    assert!(refusal.contains("spec.binaryExecutor.tags[0]"), "{refusal}");
    assert!(refusal.contains("~1.2 ||"), "{refusal}");
    // The last good routing stays.
    let (_, _, resolved) = call(&server, "example.com/fns/routed", "^1", &input)
        .await
        .unwrap();
    assert_eq!(resolved.as_deref(), Some("example.com/fns/routed:v1.2.7"));

    let config_file = dir.path().join("runner.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let check = run_cli(
        &[
            "--config-file",
            config_file.to_str().unwrap(),
            "config",
            "check",
        ],
        &[],
        b"",
    );
    assert_eq!(check.status.code(), Some(2), "{check:?}");
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("fns.yaml")
            && stderr.contains("spec.binaryExecutor.tags[0]")
            && stderr.contains("invalid version constraint \"~1.2 ||\""),
        "{stderr}"
    );
}

const RANGED: &str = r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: ranged}
spec:
  image: ranged
  prefixes: [example.com/fns]
  binaryExecutor: {tags: [">= 1.0.0, < 2.0.0"], path: v1.2.7}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-namespace}
spec:
  image: set-namespace
  goExecutor: {tags: [">= 0.4.0, < 1.0.0"]}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_requested_version_or_range_is_served_by_an_executor_range_admitting_it() {
    let (dir, config) = setup();
    write_function_config(dir.path(), RANGED);
    let server = Server::start(&config, &[]);
    let input = resource_list(&["a"]);
    let ranged = "example.com/fns/ranged";

    // A version the range admits is served as that version; a range overlapping it untagged.
    for (tag, resolved) in [
        ("1.4.2", Some(format!("{ranged}:1.4.2"))),
        ("v1.4.2", Some(format!("{ranged}:v1.4.2"))),
        ("~1.4.0", None),
        (">= 1.9.5", None),
    ] {
        let (response, evaluator, header) = call(&server, ranged, tag, &input)
            .await
            .unwrap_or_else(|status| panic!("{tag}: {status:?}\n{}", server.stderr()));
        assert_eq!((evaluator.as_str(), header), ("exec", resolved), "{tag}");
        assert_eq!(String::from_utf8_lossy(&response.log).trim(), "v1.2.7");
    }
    let (_, evaluator, _) = call(&server, &format!("{ranged}:v1.4.2"), "", &input)
        .await
        .unwrap();
    assert_eq!(evaluator, "exec");
    for outside in ["2.0.0", "~2.1", "1.4.2-rc.1"] {
        let status = call(&server, ranged, outside, &input).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{outside}: {status:?}");
        assert!(
            status.message().contains(&format!(
                r#"binaryExecutor: no tag among [">= 1.0.0, < 2.0.0"] satisfies constraint "{outside}""#
            )),
            "{status:?}"
        );
    }

    // goExecutor likewise: the builtin reproduces only v0.4.1, the FunctionConfig says more.
    let set_namespace = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
    let input = b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {namespace: ns}}
items: []
";
    let (_, evaluator, header) = call(&server, set_namespace, "0.5.0", input)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", server.stderr()));
    assert_eq!(evaluator, "builtin");
    assert_eq!(header, Some(format!("{set_namespace}:0.5.0")));
}

#[test]
fn functions_resolve_explains_the_version_chosen() {
    let (dir, config) = setup();
    write_function_config(dir.path(), ROUTED);
    let config_file = dir.path().join("runner.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let resolve = |image: &str, tag: &str| {
        run_cli(
            &[
                "--config-file",
                config_file.to_str().unwrap(),
                "functions",
                "--resolve",
                image,
                "--tag",
                tag,
            ],
            &[],
            b"",
        )
    };
    let output = resolve("example.com/fns/routed", "<1.2.5");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(text.contains("tag constraint:  <1.2.5"), "{text}");
    assert!(
        text.contains(&format!(
            "binaryExecutor:  serves: {} as tag \"v1.2.3\" on evaluator \"exec\"",
            dir.path().join("bin/v1.2.7").display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  {:<22} runs example.com/fns/routed:v1.2.3\n",
            "exec (routed)"
        )),
        "{text}"
    );

    // Unrouted: each evaluator of the served chain says what it would run.
    let output = resolve(REPO, "~1.2");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        text.contains(&format!(
            "  {:<22} runs {REPO}:v1.2.7 (highest satisfying of \
             [v1.3.0-rc.1, v1.2.7, v1.2.3, v0.9.0])",
            "exec"
        )),
        "{text}"
    );
    let output = resolve("set-labels", "~9");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!(
            "  {:<22} no version of \"set-labels\" satisfies tag constraint \"~9\"",
            "builtin"
        )),
        "{text}"
    );

    let output = resolve(REPO, "~banana");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid version constraint \"~banana\""),
        "{output:?}"
    );
}

#[test]
fn functions_status_works_out_every_executor_tag_ahead_of_calls() {
    let (dir, config) = setup();
    write_function_config(
        dir.path(),
        &format!(
            "{ROUTED}---\n{}",
            r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: set-namespace}
spec:
  image: set-namespace
  goExecutor: {tags: ["~0.4.0", v0.4.1]}
  binaryExecutor: {tags: [v9.9.9], path: missing}
  podExecutor: {tags: ["*"]}
"#
        ),
    );
    let config_file = dir.path().join("runner.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let output = run_cli(
        &[
            "--config-file",
            config_file.to_str().unwrap(),
            "functions",
            "--status",
        ],
        &[],
        b"",
    );
    let text = String::from_utf8_lossy(&output.stdout);
    // A missing binary is a failure: exit 1, and a row saying why.
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "IMAGE",
            "EXECUTOR",
            "CONSTRAINT",
            "RESOLVED",
            "DIGEST",
            "STATE",
            "LAST",
            "ERROR"
        ]
    );
    let row = |executor: &str, constraint: &str| {
        rows.iter()
            .find(|row| row.get(1) == Some(&executor) && row.get(2) == Some(&constraint))
            .unwrap_or_else(|| panic!("no {executor} {constraint} row:\n{text}"))
            .clone()
    };
    let catalog = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
    // The builtin resolves the constraint among the tags it reproduces.
    assert_eq!(
        row("goExecutor", "~0.4.0"),
        [catalog, "goExecutor", "~0.4.0", "v0.4.1", "-", "Ready"]
    );
    assert_eq!(row("goExecutor", "v0.4.1")[3..], ["v0.4.1", "-", "Ready"]);
    let missing = row("binaryExecutor", "v9.9.9");
    assert_eq!(missing[3..6], ["-", "-", "Failed"]);
    assert!(
        text.contains(&format!(
            "binary {} is missing or not executable",
            dir.path().join("bin/missing").display()
        )),
        "{text}"
    );
    // No pod instance in this runner: skipped, saying why.
    assert_eq!(row("podExecutor", "(any)")[5], "Skipped");
    let routed = row("binaryExecutor", "~1.2");
    assert_eq!(
        routed[..6],
        [
            "example.com/fns/routed",
            "binaryExecutor",
            "~1.2",
            "-",
            "-",
            "Ready"
        ]
    );
}
