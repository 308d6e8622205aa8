//! ConfigHub's typed functions as KRM functions, through the real binary: `krm-runner fn NAME
//! -- key=value`, the real `kpt` running it as an exec function, and Porch's gRPC call
//! answered by the confighub plugin. Name clashes with the catalog: the builtin plugin's catalog
//! function keeps the bare name, the typed one answers to `confighub/NAME`.

use krm_runner_tests::{Server, have_tool, kpt_eval_exec, kpt_package, run_cli, scratch};
use tonic::Code;

const PACKAGE: &str = "# the web app
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # keep me
  namespace: old
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: web
        image: nginx:1.25 # pinned
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: old
data:
  key: \"value\"
";

/// PACKAGE as a ResourceList, with `config` (a YAML block at column 2) as functionConfig.
fn resource_list(config: &str) -> String {
    resource_list_of(PACKAGE, config)
}

fn resource_list_of(package: &str, config: &str) -> String {
    let mut text =
        String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    for document in package.split("---\n") {
        let document = document.trim_start_matches("# the web app\n");
        text.push_str("- ");
        text.push_str(&document.trim_end().replace('\n', "\n  "));
        text.push('\n');
    }
    if !config.is_empty() {
        text.push_str("functionConfig:\n");
        text.push_str(config);
    }
    text
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn set_replicas_changes_exactly_the_replicas() {
    let input = resource_list(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: args}\n  data:\n    replicas: \"5\"\n",
    );
    let output = run_cli(&["fn", "set-replicas"], &[], input.as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        input.replace("replicas: 1", "replicas: 5"),
        "every other byte of the ResourceList is kept"
    );

    // kpt's `-- key=value` form, over plain documents.
    let output = run_cli(
        &["fn", "confighub/set-replicas", "--", "replicas=3"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("    replicas: 3\n"), "{out}");
    assert!(out.contains("image: nginx:1.25 # pinned"), "{out}");
    assert!(out.contains("name: web # keep me"), "{out}");
    assert!(!out.contains("replicas: 1"), "{out}");
}

#[test]
fn readonly_outputs_become_results_and_failed_validations_fail() {
    let output = run_cli(
        &["fn", "get-image", "--", "container-name=web"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    let results = out.split("\nresults:\n").nth(1).expect("results written");
    for expected in [
        "message: nginx:1.25",
        "severity: info",
        "kind: Deployment",
        "name: web",
        "namespace: old",
        "path: spec.template.spec.containers.0.image",
    ] {
        assert!(results.contains(expected), "{expected:?} in {results}");
    }
    // Readonly: the items are untouched.
    assert!(out.contains("replicas: 1"), "{out}");

    // A validator over a ResourceList without functionConfig, as kpt sends it.
    let placeholder = resource_list_of(&PACKAGE.replace("nginx:1.25", "confighubplaceholder"), "");
    let output = run_cli(&["fn", "no-placeholders"], &[], placeholder.as_bytes());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("severity: error"), "{out}");
    assert!(
        out.contains("path: spec.template.spec.containers.0.image"),
        "{out}"
    );
    assert!(
        stderr(&output).contains("no-placeholders: validation failed"),
        "{}",
        stderr(&output)
    );
    let output = run_cli(
        &["fn", "no-placeholders"],
        &[],
        resource_list_of(PACKAGE, "").as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("message: passed"));
}

#[test]
fn bad_arguments_are_named_and_change_nothing() {
    let without_arguments = resource_list(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: args}\n  data: {}\n",
    );
    for (args, input, named) in [
        (
            vec!["replicas=many"],
            PACKAGE,
            "parameter replicas: \"many\" is not an integer",
        ),
        (
            vec!["replicas=2", "colour=blue"],
            PACKAGE,
            "\"colour\" is not a parameter",
        ),
        (
            vec![],
            without_arguments.as_str(),
            "missing required parameter replicas",
        ),
    ] {
        let mut command = vec!["fn", "set-replicas", "--"];
        command.extend(&args);
        let output = run_cli(&command, &[], input.as_bytes());
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        let err = stderr(&output);
        assert!(
            err.contains(&format!("set-replicas: {named}")),
            "{args:?}: {err}"
        );
        let out = stdout(&output);
        assert!(
            out.contains("replicas: 1") && !out.contains("replicas: 2"),
            "{args:?}: {out}"
        );
        assert!(out.contains("severity: error"), "{args:?}: {out}");
    }
    let output = run_cli(
        &["fn", "set-replicas", "--", "replicas"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("\"replicas\" is not key=value"));
}

#[test]
fn catalog_functions_keep_their_names_and_typed_ones_answer_to_confighub_names() {
    // The catalog's set-namespace (parameter `namespace`) keeps the bare name.
    let output = run_cli(
        &["fn", "set-namespace", "--", "namespace=prod"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stdout(&output).contains("namespace: old"));
    // ConfigHub's (parameter `namespace-name`) under confighub/.
    let output = run_cli(
        &["fn", "confighub/set-namespace", "--", "namespace-name=prod"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(
        out.contains("namespace: prod") && !out.contains("namespace: old"),
        "{out}"
    );
    let output = run_cli(
        &["fn", "confighub/set-namespace", "--", "namespace=prod"],
        &[],
        PACKAGE.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("namespace"), "{}", stderr(&output));

    let output = run_cli(&["functions"], &[], b"");
    let table = stdout(&output);
    let evaluator_of = |name: &str| {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .and_then(|line| line.split_whitespace().nth(1).map(str::to_owned))
    };
    assert_eq!(
        evaluator_of("set-namespace").as_deref(),
        Some("builtin"),
        "{table}"
    );
    for name in [
        "confighub/set-namespace",
        "confighub/set-image",
        "confighub/search-replace",
        "set-replicas",
        "get-image",
    ] {
        assert_eq!(
            evaluator_of(name).as_deref(),
            Some("confighub"),
            "{name}: {table}"
        );
    }
    let output = run_cli(&["functions", "set-namespace"], &[], b"");
    assert!(stdout(&output).contains("gcr.io/kpt-fn/set-namespace"));
    let output = run_cli(&["functions", "confighub/set-namespace"], &[], b"");
    let described = stdout(&output);
    assert!(described.contains("namespace-name"), "{described}");
}

#[test]
fn kpt_runs_a_typed_function_as_an_exec_function() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), PACKAGE);
    let output = kpt_eval_exec(&package, "set-replicas", &["replicas=4"]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    let written = std::fs::read_to_string(package.join("app.yaml")).unwrap();
    assert_eq!(
        written,
        PACKAGE.replace("replicas: 1", "replicas: 4"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn porch_calls_reach_typed_functions_through_the_confighub_plugin() {
    let server = Server::start("", &[]);
    let input = resource_list(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: args}\n  data: {replicas: \"7\"}\n",
    );
    for image in ["set-replicas", "confighub/set-replicas"] {
        let (response, evaluator) = server
            .call(image, input.as_bytes())
            .await
            .unwrap_or_else(|status| panic!("{image}: {status:?}"));
        assert_eq!(evaluator, "confighub", "{image}");
        assert_eq!(
            String::from_utf8(response.resource_list).unwrap(),
            input.replace("replicas: 1", "replicas: 7"),
            "{image}"
        );
    }
    // Not a catalog image: no catalog prefix or tag reaches a typed function.
    let status = server
        .call("gcr.io/kpt-fn/set-replicas:v0.1", input.as_bytes())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    // A failing invocation is the function failing, with its reasons.
    let bad = input.replace("replicas: \"7\"", "replicas: \"-x\"");
    let status = server
        .call("set-replicas", bad.as_bytes())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("replicas"), "{status:?}");
}
