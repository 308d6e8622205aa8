//! Hostile and unusual input: never a panic, always a named error or a faithful output.

mod common;
use common::*;
use krm_plugin_api::ErrorKind;

const ALL: &[&str] = &[
    "set-namespace",
    "set-labels",
    "set-annotations",
    "set-image",
    "apply-setters",
    "search-replace",
    "ensure-name-substring",
    "apply-replacements",
];

#[test]
fn bad_input_is_invalid_input_naming_the_problem() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "input is empty"),
        (b"# only a comment\n", "input is empty"),
        (b"kind: ResourceList\nitems: [\n", "not valid YAML"),
        (b"\xff\xfe", "not UTF-8"),
        (b"- a\n- b\n", "not a mapping"),
        (
            b"apiVersion: v1\nkind: ConfigMap\n",
            "expected ResourceList",
        ),
        (b"kind: ResourceList\nitems: 3\n", "`items` is not a list"),
        (
            b"kind: ResourceList\n---\nkind: ResourceList\n",
            "several YAML documents",
        ),
    ];
    for name in ALL {
        for (input, expected) in cases {
            let err = krm_plugin_builtin::run_function(name, input).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidInput, "{name}: {err:?}");
            assert!(err.message.contains(expected), "{name}: {}", err.message);
        }
    }
}

#[test]
fn non_krm_items_and_odd_shapes_are_passed_through() {
    let items = "- just a string\n- [1, 2]\n- {}\n- kind: NoMetadata\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: null\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    containers: {not: a list}\n- &anchor\n  apiVersion: v1\n  kind: Secret\n  metadata:\n    name: s\n- *anchor\n";
    let configs = [
        ("set-namespace", configmap(&[("namespace", "x")])),
        ("set-labels", configmap(&[("a", "b")])),
        ("set-annotations", configmap(&[("a", "b")])),
        (
            "set-image",
            configmap(&[("name", "nginx"), ("newTag", "1")]),
        ),
        ("apply-setters", configmap(&[("a", "b")])),
        ("search-replace", configmap(&[("by-value", "s"), ("put-value", "t")])),
        ("ensure-name-substring", configmap(&[("prepend", "x-")])),
        (
            "apply-replacements",
            "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata: {name: r}\n  replacements:\n  - source: {kind: Pod}\n    targets:\n    - select: {kind: Pod}\n      fieldPaths: [metadata.annotations.copy]\n      options: {create: true}\n".to_owned(),
        ),
    ];
    for (name, config) in configs {
        let input = rl(items, &config);
        let out = ok(name, &input);
        assert!(out.starts_with("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- just a string\n- [1, 2]\n"), "{name}: {out}");
        // The output is still one parseable ResourceList.
        assert_eq!(docs(&out).len(), 1, "{name}: {out}");
    }
}

#[test]
fn empty_and_missing_items() {
    for items in [
        "kind: ResourceList\n",
        "kind: ResourceList\nitems: []\n",
        "kind: ResourceList\nitems:\n",
    ] {
        let out = ok(
            "set-namespace",
            &format!(
                "{items}functionConfig:\n{}",
                configmap(&[("namespace", "x")])
            ),
        );
        assert!(
            out.contains("all matching namespaces are already \"x\". no value changed"),
            "{out}"
        );
        let out = ok(
            "set-labels",
            &format!("{items}functionConfig:\n{}", configmap(&[("a", "b")])),
        );
        assert!(out.contains("no input resources"), "{out}");
    }
}

#[test]
fn deep_nesting_and_huge_scalars_do_not_panic() {
    let deep = format!(
        "kind: ResourceList\nitems:\n- {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for name in ALL {
        let _ = krm_plugin_builtin::run_function(name, deep.as_bytes());
    }
    let big = format!(
        "kind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c}}\n  data:\n    v: {}\nfunctionConfig:\n{}",
        "x".repeat(5_000_000),
        configmap(&[("namespace", "n")])
    );
    let out = ok("set-namespace", &big);
    assert!(out.contains("metadata: {name: c, \"namespace\": \"n\"}"));
}

#[test]
fn json_input_stays_json_compatible() {
    let input = r#"{"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}], "functionConfig": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}, "data": {"namespace": "n"}}}"#;
    let out = ok("set-namespace", input);
    let value: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
    assert_eq!(value["items"][0]["metadata"]["namespace"], "n");
    assert_eq!(value["results"][0]["severity"], "warning");
}

#[test]
fn untouched_documents_are_byte_identical_at_scale() {
    // 10,000 Deployments, with comments: set-namespace changes one line per object and nothing else.
    let items = deployments(10_000);
    let input = rl(&items, &configmap(&[("namespace", "new")]));
    let out = ok("set-namespace", &input);
    let expected = rl(
        &items.replace("    namespace: old\n", "    namespace: new\n"),
        &configmap(&[("namespace", "new")]),
    );
    assert_eq!(body(&out), expected.trim_end());
    assert!(results(&out).contains("namespace [old] updated to \"new\", 10000 value(s) changed"));
    // A second run is a no-op on the items.
    let again = ok("set-namespace", &format!("{}\n", body(&out)));
    assert_eq!(body(&again), body(&out));
    assert!(results(&again).contains("all matching namespaces are already \"new\""));
    // set-labels over the same: three maps per Deployment.
    let out = ok("set-labels", &rl(&items, &configmap(&[("tier", "web")])));
    assert_eq!(
        out.matches("\n      tier: web\n").count()
            + out.matches("\n        tier: web\n").count()
            + out.matches("\n          tier: web\n").count(),
        30_000
    );
    assert!(out.contains("          image: nginx:1.20.2 # pinned\n"));
}

/// Flow- and comment-rich items, mutated byte by byte.
const MUTATED_ITEMS: &str = "\
- apiVersion: apps/v1 # keep
  kind: Deployment
  metadata: {name: web, namespace: old, # c
    labels: {app: web, tier: \"front\"}, annotations: {
      # head
      a: b}}
  spec:
    replicas: 3 # kpt-set: ${replicas}
    selector: {matchLabels: {app: web}}
    template:
      metadata:
        labels: {app: web}
      spec:
        containers: [{name: web, image: \"nginx:1.27\"}, # c
          {name: side, image: busybox}]
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cfg # n
    namespace: old
    labels: { # c
      a: b}
  data: {k: v, # c
    j: w}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: rb}
  subjects: [{kind: ServiceAccount, name: sa, namespace: old}]
  roleRef: {kind: Role, name: r, apiGroup: rbac.authorization.k8s.io}
";

/// What a mutation writes: YAML's indicators, and the comments and brackets that move the
/// parser between block and flow.
const MUTATIONS: &[&str] = &[
    ":",
    "-",
    "{",
    "}",
    "[",
    "]",
    "&",
    "*",
    "!",
    "|",
    ">",
    "#",
    "\"",
    "'",
    "\n",
    " ",
    ",",
    " # c",
    " # c\n",
    "[ # c\n",
    "{ # c\n",
    "\n  # head\n",
    "\n- ",
    ": ",
    "&a ",
    "*a",
    "!!str ",
    "\n  ",
    "\t",
];

/// Mutated inputs: each function answers without a panic, and when the input is valid YAML and
/// the function succeeds, its output is valid YAML too, as a parser other than the editor's
/// (yaml_serde, libyaml's) reads it. A comment after a flow collection's opening bracket once
/// made set-labels write an entry below the braces.
#[test]
fn mutated_input_gives_valid_yaml_or_an_error() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let function_configs = [
        ("set-namespace", configmap(&[("namespace", "prod")])),
        ("set-labels", configmap(&[("color", "blue")])),
        ("set-annotations", configmap(&[("color", "blue")])),
        ("set-image", configmap(&[("name", "nginx"), ("newTag", "1.28")])),
        ("apply-setters", configmap(&[("replicas", "5"), ("image", "nginx:1.28")])),
        ("search-replace", configmap(&[("by-path", "spec.replicas"), ("put-value", "7")])),
        ("ensure-name-substring", configmap(&[("prepend", "pre-")])),
        (
            "apply-replacements",
            "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata: {name: r}\n  replacements:\n  - source: {kind: ConfigMap, name: cfg, fieldPath: data.k}\n    targets:\n    - select: {kind: Deployment}\n      fieldPaths: [metadata.annotations.x]\n      options: {create: true}\n".to_owned(),
        ),
    ];
    let edits = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::sample::select(MUTATIONS),
            0..3u8,
        ),
        1..4,
    );
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(edits, 0..function_configs.len()), |(edits, function)| {
            let mut items = MUTATED_ITEMS.to_owned();
            for (at, text, operation) in edits {
                let at = at.index(items.len() + 1);
                let at = (0..=at)
                    .rev()
                    .find(|&i| items.is_char_boundary(i))
                    .unwrap_or(0);
                match operation {
                    0 => items.insert_str(at, text),
                    1 => items.replace_range(at..(at + text.len()).min(items.len()), text),
                    _ => items.replace_range(at..(at + 3).min(items.len()), ""),
                }
            }
            let (name, function_config) = &function_configs[function];
            let input = rl(&items, function_config);
            let answer = run(name, &input);
            let input_valid = yaml_serde::from_str::<yaml_serde::Value>(&input).is_ok();
            if let (true, Ok(output)) = (input_valid, answer)
                && let Err(error) = yaml_serde::from_str::<yaml_serde::Value>(&output)
            {
                return Err(TestCaseError::fail(format!(
                    "{name}: {error}\ninput:\n{input}\noutput:\n{output}"
                )));
            }
            Ok(())
        })
        .unwrap();
}

/// A mapping whose last value is a literal block scalar ends with its last line: a key added
/// to it once went below the next key (`data:`), and a block scalar replaced took the next
/// line's indentation with it.
#[test]
fn a_block_scalar_at_the_end_of_a_mapping_keeps_additions_inside_it() {
    let items = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n    annotations:\n      note: |\n        multi\n        line\n  data:\n    k: v\n";
    let out = ok(
        "set-annotations",
        &rl(items, &configmap(&[("color", "blue")])),
    );
    assert!(
        out.contains(
            "      note: |\n        multi\n        line\n      color: blue\n  data:\n    k: v\n"
        ),
        "{out}"
    );
    let items = "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: d\n  spec:\n    replicas: |\n      3\n    paused: false\n";
    let out = ok(
        "search-replace",
        &rl(
            items,
            &configmap(&[("by-path", "spec.replicas"), ("put-value", "7")]),
        ),
    );
    assert!(
        out.contains("    replicas: 7\n    paused: false\n"),
        "{out}"
    );
}
