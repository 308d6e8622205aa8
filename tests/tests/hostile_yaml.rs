//! Hostile and unusual YAML through the real binary: `krm-runner fn`, `krm-runner eval` and the
//! gRPC server with its builtin plugin. Each input ends in a clear, bounded error naming what is
//! wrong (or, for valid YAML, in the right result), and the server keeps serving.

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::*;

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A ResourceList with one Deployment, `functionConfig` given as indented lines.
fn resource_list(function_config: &str) -> String {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n  spec:\n    template:\n      spec:\n        containers:\n        - name: app\n          image: nginx:1.25\nfunctionConfig:\n{function_config}"
    )
}

/// The billion-laughs chain of issue 9: nine aliases per level, eight levels, inside
/// `functionConfig.data` (about 630 bytes that expand to 43 million nodes).
fn billion_laughs() -> String {
    let mut data = String::from(
        "    a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for level in 1..8 {
        let previous = format!("*a{}", level - 1);
        data.push_str(&format!(
            "    a{level}: &a{level} [{}]\n",
            vec![previous; 9].join(",")
        ));
    }
    resource_list(&format!(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: bomb\n  data:\n    name: nginx\n    prepend: x-\n{data}"
    ))
}

const BOMBED_FUNCTIONS: &[&str] = &[
    "set-labels",
    "set-annotations",
    "set-image",
    "apply-setters",
    "ensure-name-substring",
];

#[test]
fn alias_bombs_fail_fn_with_a_clear_error() {
    let input = billion_laughs();
    for &function in BOMBED_FUNCTIONS {
        let output = run_cli(&["fn", function], &[], input.as_bytes());
        let log = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{function}: {log}");
        assert!(
            log.contains("refused as an alias bomb"),
            "{function}: {log}"
        );
        assert!(!log.contains("memory allocation"), "{function}: {log}");
    }
}

#[tokio::test]
async fn alias_bombs_are_invalid_argument_and_the_server_keeps_serving() {
    let server = Server::start("log_level: info\n", &[]);
    let input = billion_laughs();
    for &function in BOMBED_FUNCTIONS {
        let status = server
            .call(function, input.as_bytes())
            .await
            .expect_err("an alias bomb must not succeed");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("refused as an alias bomb"),
            "{status:?}"
        );
        assert_eq!(server.health_check().await.expect("health"), 1);
    }
    let (response, evaluator) = server
        .call(
            "set-labels",
            resource_list("  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    team: blue\n").as_bytes(),
        )
        .await
        .expect("a sound call still succeeds");
    assert_eq!(evaluator, "builtin");
    assert!(String::from_utf8_lossy(&response.resource_list).contains("team: blue"));
}

#[tokio::test]
async fn builtin_call_past_its_deadline_is_answered_and_the_server_keeps_serving() {
    let server = Server::start("log_level: info\n", &[]);
    // apply-replacements re-reads the whole list for every target: 400 targets over 5,000
    // ConfigMaps is minutes of work, far past a 300 ms deadline.
    let mut items = String::new();
    for i in 0..5000 {
        items.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c{i}\n  data:\n    v: \"{i}\"\n"
        ));
    }
    let targets: String = (0..400)
        .map(|_| "    - select: {kind: ConfigMap}\n      fieldPaths: [data.w]\n      options: {create: true}\n")
        .collect();
    let input = format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{items}functionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata: {{name: r}}\n  replacements:\n  - source: {{kind: ConfigMap, name: c0, fieldPath: data.v}}\n    targets:\n{targets}"
    );
    let status = call_with_remote_deadline(
        &server.endpoint(),
        EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: input.into_bytes(),
            image: "apply-replacements".into(),
        },
        "300m",
    )
    .await
    .expect_err("past its deadline");
    assert_deadline_answer(&status);
    assert_eq!(server.health_check().await.expect("health"), 1);
    let (_, evaluator) = server
        .call(
            "set-labels",
            resource_list("  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    team: blue\n").as_bytes(),
        )
        .await
        .expect("the next call is served");
    assert_eq!(evaluator, "builtin");
}

#[test]
fn deep_nesting_is_refused_quickly_naming_the_limit() {
    let deep = "[".repeat(40_000);
    let input = resource_list(&format!(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    team: {deep}\n"
    ));
    let output = run_cli(&["fn", "set-labels"], &[], input.as_bytes());
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");
    assert!(log.contains("not valid YAML"), "{log}");
    assert!(log.contains("recursion limit exceeded"), "{log}");

    let block = format!("{}x\n", "- ".repeat(40_000));
    let input = format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{block}");
    let output = run_cli(&["fn", "set-labels"], &[], input.as_bytes());
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");
    assert!(log.contains("nesting deeper than 512 levels"), "{log}");

    // `eval` inspects its input documents before wrapping them.
    let document = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {deep}\n");
    let output = run_cli(
        &["eval", "--image", "set-labels", "--", "a=b"],
        &[],
        document.as_bytes(),
    );
    let log = stderr(&output);
    assert_ne!(output.status.code(), Some(0), "{log}");
    assert!(log.contains("input document 1: not valid YAML"), "{log}");
    // Closed, so that only the depth is wrong: the parser the plugins use stops it.
    let nested = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {}1{}\n",
        "{a: ".repeat(600),
        "}".repeat(600)
    );
    let output = run_cli(
        &["eval", "--image", "set-labels", "--", "a=b"],
        &[],
        nested.as_bytes(),
    );
    let log = stderr(&output);
    assert!(log.contains("input document 1: not valid YAML"), "{log}");
    assert!(log.contains("recursion limit exceeded"), "{log}");
}

#[test]
fn eval_and_fn_refuse_input_over_max_message_bytes() {
    let big = vec![b'#'; 2048];
    for args in [
        &["fn", "set-labels"][..],
        &["eval", "--image", "set-labels"][..],
    ] {
        let output = run_cli(args, &[("KRM_RUNNER_MAX_MESSAGE_BYTES", "1024")], &big);
        let log = stderr(&output);
        assert_ne!(output.status.code(), Some(0), "{args:?}: {log}");
        assert!(
            log.contains("stdin is over 1024 bytes (max_message_bytes)"),
            "{args:?}: {log}"
        );
    }
}

#[test]
fn duplicate_keys_are_refused_naming_key_and_position() {
    let duplicate_item = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: first\n    name: second\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: c}\n  data: {team: blue}\n";
    let output = run_cli(&["fn", "set-labels"], &[], duplicate_item.as_bytes());
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");
    assert!(
        log.contains(
            "duplicate mapping key \"name\" at line 8 column 5 (first at line 7 column 5)"
        ),
        "{log}"
    );
    let duplicate_data = resource_list(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data: {team: blue, team: red}\n",
    );
    let output = run_cli(&["fn", "set-labels"], &[], duplicate_data.as_bytes());
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");
    assert!(
        log.contains("duplicate mapping key \"team\" at line 19 column 22"),
        "{log}"
    );
}

#[test]
fn set_namespace_replaces_a_non_string_namespace_it_counts() {
    let input = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n    namespace: {a: b}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: f}\n  data: {namespace: prod}\n";
    let output = run_cli(&["fn", "set-namespace"], &[], input.as_bytes());
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(out.contains("    name: c\n    namespace: prod\n"), "{out}");
    assert!(out.contains("1 value(s) changed"), "{out}");
}

#[test]
fn tab_after_a_colon_is_a_separator() {
    let input = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion:\tv1\n  kind:\tConfigMap\n  metadata:\n    name:\tc # tabbed\n  data: {note: \"a:\tb\"}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: f}\n  data:\n    team:\tblue\n";
    let output = run_cli(&["fn", "set-labels"], &[], input.as_bytes());
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        out.contains("- apiVersion:\tv1\n  kind:\tConfigMap\n  metadata:\n    name:\tc # tabbed\n    labels:\n      team: blue\n"),
        "{out}"
    );
    assert!(out.contains("data: {note: \"a:\tb\"}"), "{out}");
    // The same through `eval`, whose wrapping reads the documents too.
    let document = "apiVersion:\tv1\nkind:\tConfigMap\nmetadata:\n  name:\tc\n";
    let output = run_cli(
        &["eval", "--image", "set-labels", "--", "team=blue"],
        &[],
        document.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("team: blue"),
        "{}",
        stdout(&output)
    );
}
