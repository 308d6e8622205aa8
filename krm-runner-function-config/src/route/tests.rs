use serde_json::json;

use super::*;
use crate::types::{FunctionConfig, FunctionConfigSpec};

const CATALOG: &str = "ghcr.io/kptdev/krm-functions-catalog";
const DEFAULT_PREFIX: &str = "ghcr.io/kptdev/krm-functions-catalog/";
const FUNCTIONS: &str = "/opt/functions";

fn object(namespace: Option<&str>, name: &str, source: Source, spec: serde_json::Value) -> Sourced {
    let spec: FunctionConfigSpec = serde_json::from_value(spec).unwrap();
    let mut object = FunctionConfig::new(name, spec);
    object.metadata.namespace = namespace.map(str::to_owned);
    Sourced::checked(object, source).unwrap()
}

fn file(name: &str, spec: serde_json::Value) -> Sourced {
    let path = PathBuf::from(format!("/etc/krm/{name}.yaml"));
    object(None, name, Source::File { path, document: 1 }, spec)
}

fn cluster(namespace: &str, name: &str, spec: serde_json::Value) -> Sourced {
    object(Some(namespace), name, Source::Cluster, spec)
}

fn table(objects: Vec<Sourced>) -> RoutingTable {
    let (table, conflicts) = RoutingTable::build(objects, DEFAULT_PREFIX, Path::new(FUNCTIONS));
    assert_eq!(conflicts, []);
    table
}

fn matched(route: RouteOutcome) -> Matched {
    match route {
        RouteOutcome::Matched(matched) => matched,
        RouteOutcome::NoMatch(reason) => panic!("no match: {reason}"),
    }
}

fn no_match(route: RouteOutcome) -> NoMatch {
    match route {
        RouteOutcome::NoMatch(reason) => reason,
        RouteOutcome::Matched(matched) => panic!("matched {}", matched.object),
    }
}

/// The plan and the left-out reasons, as text, for compact tables.
fn explain(table: &RoutingTable, image: &str) -> (Vec<String>, Vec<String>) {
    let matched = matched(table.route(image));
    (
        matched.plan.iter().map(ToString::to_string).collect(),
        matched.left_out.iter().map(ToString::to_string).collect(),
    )
}

fn all_three() -> Sourced {
    file(
        "set-namespace",
        json!({
            "image": "set-namespace",
            "goExecutor": {"tags": ["v0.4", "v0.4.5"]},
            "binaryExecutor": {"tags": ["v0.4.5", "v0.4.2"], "path": "set-namespace"},
            "podExecutor": {"tags": [], "maxParallelExecutions": 2},
        }),
    )
}

#[test]
fn executors_are_planned_in_flow_order_for_the_tags_they_list() {
    let table = table(vec![all_three()]);
    let image = |tag: &str| format!("{CATALOG}/set-namespace:{tag}");
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (
            "v0.4.5",
            &[
                "goExecutor: built-in function set-namespace",
                "binaryExecutor: /opt/functions/set-namespace",
                "podExecutor",
            ],
            &[],
        ),
        (
            "v0.4",
            &["goExecutor: built-in function set-namespace", "podExecutor"],
            &[r#"binaryExecutor: tag "v0.4" not among ["v0.4.5", "v0.4.2"]"#],
        ),
        // Tags are constraints: `v0.4` admits every 0.4 release.
        (
            "v0.4.2",
            &[
                "goExecutor: built-in function set-namespace",
                "binaryExecutor: /opt/functions/set-namespace",
                "podExecutor",
            ],
            &[],
        ),
        (
            "v0.5.0",
            &["podExecutor"],
            &[
                r#"goExecutor: tag "v0.5.0" not among ["v0.4", "v0.4.5"]"#,
                r#"binaryExecutor: tag "v0.5.0" not among ["v0.4.5", "v0.4.2"]"#,
            ],
        ),
        (
            "v9",
            &["podExecutor"],
            &[
                r#"goExecutor: tag "v9" not among ["v0.4", "v0.4.5"]"#,
                r#"binaryExecutor: tag "v9" not among ["v0.4.5", "v0.4.2"]"#,
            ],
        ),
    ];
    for (tag, plan, left_out) in cases {
        let mut expected = to_strings(&["wasmExecutor: not configured"]);
        expected.extend(to_strings(left_out));
        // In flow order: the go executor's reason before the wasm executor's.
        expected.sort_by_key(|reason| !reason.starts_with("goExecutor"));
        assert_eq!(
            explain(&table, &image(tag)),
            (to_strings(plan), expected),
            "{tag}"
        );
    }
    let PlannedExecutor::Pod { settings } = &matched(table.route(&image("v9"))).plan[0] else {
        panic!("not a pod step");
    };
    assert_eq!(settings.max_parallel_executions, Some(2));
}

fn to_strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

#[test]
fn absent_sections_and_pod_tag_lists_are_explained() {
    let table = table(vec![
        file(
            "pod-tagged",
            json!({"image": "pod-tagged", "podExecutor": {"tags": ["v1"]}}),
        ),
        file(
            "go-only",
            json!({"image": "go-only", "goExecutor": {"tags": ["v1"], "id": "builtin-name"}}),
        ),
        file(
            "binary-abs",
            json!({"image": "binary-abs", "binaryExecutor": {"tags": ["v1"], "path": "/usr/bin/fn"}}),
        ),
    ]);
    assert_eq!(
        explain(&table, "pod-tagged:v1"),
        (
            to_strings(&["podExecutor"]),
            to_strings(&[
                "goExecutor: not configured",
                "wasmExecutor: not configured",
                "binaryExecutor: not configured"
            ])
        )
    );
    assert_eq!(
        explain(&table, "pod-tagged:v2"),
        (
            vec![],
            to_strings(&[
                "goExecutor: not configured",
                "wasmExecutor: not configured",
                "binaryExecutor: not configured",
                r#"podExecutor: tag "v2" not among ["v1"]"#,
            ])
        )
    );
    // goExecutor.id names the built-in; an absolute binary path is kept as written.
    assert_eq!(
        explain(&table, "go-only:v1").0,
        ["goExecutor: built-in function builtin-name"]
    );
    assert_eq!(
        matched(table.route("binary-abs:v1")).plan,
        [PlannedExecutor::Binary {
            path: PathBuf::from("/usr/bin/fn"),
            tag: Some("v1".to_owned()),
            cache: None,
        }]
    );
}

/// A module runs after the built-in and before the binary and the pod (cheaper to start than a
/// process, sandboxed unlike one); a relative path is under the functions directory, an image
/// kept as written.
#[test]
fn a_wasm_executor_is_planned_between_the_builtin_and_the_binary() {
    let table = table(vec![
        file(
            "fn",
            json!({
                "image": "fn",
                "goExecutor": {"tags": ["v1"]},
                "wasmExecutor": {"tags": ["v1", "v2"], "path": "fn.wasm"},
                "binaryExecutor": {"tags": ["v1", "v2", "v3"], "path": "fn"},
                "podExecutor": {},
            }),
        ),
        file(
            "pulled",
            json!({"image": "pulled", "wasmExecutor": {"tags": ["~1.2"], "image": "r.example/wasm/pulled"}}),
        ),
    ]);
    assert_eq!(
        explain(&table, "fn:v1").0,
        [
            "goExecutor: built-in function fn",
            "wasmExecutor: module /opt/functions/fn.wasm",
            "binaryExecutor: /opt/functions/fn",
            "podExecutor",
        ]
    );
    assert_eq!(
        explain(&table, "fn:v3"),
        (
            to_strings(&["binaryExecutor: /opt/functions/fn", "podExecutor"]),
            to_strings(&[
                r#"goExecutor: tag "v3" not among ["v1"]"#,
                r#"wasmExecutor: tag "v3" not among ["v1", "v2"]"#,
            ])
        )
    );
    assert_eq!(
        matched(table.route("pulled:v1.2.9")).plan,
        [PlannedExecutor::Wasm {
            module: WasmModule::Image("r.example/wasm/pulled".to_owned()),
            tag: Some("v1.2.9".to_owned()),
            cache: None,
        }]
    );
}

#[test]
fn a_missing_tag_is_the_empty_tag() {
    let table = table(vec![
        all_three(),
        file(
            "untagged",
            json!({"image": "untagged", "goExecutor": {"tags": [""]}, "podExecutor": {"tags": ["v1"]}}),
        ),
    ]);
    let route = matched(table.route(&format!("{CATALOG}/set-namespace")));
    assert_eq!(route.image.tag, "");
    // Only the pod executor with its empty (= every tag) list takes an untagged image...
    assert_eq!(
        route
            .plan
            .iter()
            .map(PlannedExecutor::executor)
            .collect::<Vec<_>>(),
        [FunctionConfigExecutor::PodExecutor]
    );
    // ...or a list naming the empty tag.
    assert_eq!(
        explain(&table, "untagged"),
        (
            to_strings(&["goExecutor: built-in function untagged"]),
            to_strings(&[
                "wasmExecutor: not configured",
                "binaryExecutor: not configured",
                r#"podExecutor: tag "" not among ["v1"]"#
            ])
        )
    );
}

#[test]
fn images_are_split_as_porch_splits_them() {
    let parse = |image| ImageRef::parse(image, DEFAULT_PREFIX);
    let image = |repo: &str, name: &str, tag: &str, digest: Option<&str>| ImageRef {
        repo: repo.into(),
        name: name.into(),
        tag: tag.into(),
        digest: digest.map(Into::into),
    };
    assert_eq!(
        parse("set-labels:v0.2"),
        image(CATALOG, "set-labels", "v0.2", None)
    );
    assert_eq!(parse("set-labels"), image(CATALOG, "set-labels", "", None));
    assert_eq!(
        parse("registry.local:5000/fns/set-labels"),
        image("registry.local:5000/fns", "set-labels", "", None)
    );
    assert_eq!(
        parse("registry.local:5000/fns/set-labels:v1"),
        image("registry.local:5000/fns", "set-labels", "v1", None)
    );
    assert_eq!(
        parse("gcr.io/kpt-fn/set-labels:v1@sha256:abc"),
        image("gcr.io/kpt-fn", "set-labels", "v1", Some("sha256:abc"))
    );
    assert_eq!(ImageRef::parse("set-labels", "").repo, "");
}

#[test]
fn the_repository_must_equal_a_prefix() {
    let table = table(vec![
        file(
            "default-only",
            json!({"image": "default-only", "prefixes": [""], "podExecutor": {}}),
        ),
        file(
            "several",
            json!({
                "image": "several",
                "prefixes": ["", "gcr.io/kpt-fn", "registry.local:5000/fns/"],
                "podExecutor": {},
            }),
        ),
        file("anywhere", json!({"image": "anywhere", "podExecutor": {}})),
        file(
            "empty-list",
            json!({"image": "empty-list", "prefixes": [], "podExecutor": {}}),
        ),
        file(
            "private",
            json!({"image": "private", "prefixes": ["example.com/fns"], "podExecutor": {}}),
        ),
    ]);
    let matches = |image: &str| matches!(table.route(image), RouteOutcome::Matched(_));
    for image in [
        "default-only:v1",
        "ghcr.io/kptdev/krm-functions-catalog/default-only:v1",
        "several:v1",
        "ghcr.io/kptdev/krm-functions-catalog/several:v1",
        "gcr.io/kpt-fn/several:v1",
        "registry.local:5000/fns/several",
        "anywhere",
        "example.com/a/b/anywhere:v1",
        "empty-list:v1",
        "example.com/fns/private:v1",
    ] {
        assert!(matches(image), "{image} should match");
    }
    for image in [
        // Porch's start-anchored regex would take these two.
        "ghcr.io/kptdev/krm-functions-catalog-evil/default-only:v1",
        "ghcr.io/kptdev/krm-functions-catalog/nested/default-only:v1",
        "gcr.io/kpt-fn/default-only:v1",
        "gcr.io/kpt-fn-evil/several:v1",
        "gcr.io/kpt/several:v1",
        "registry.local:5001/fns/several",
        // A bare name is under the default prefix, which this object does not list.
        "private:v1",
    ] {
        assert!(!matches(image), "{image} should not match");
    }
    assert_eq!(
        no_match(table.route("ghcr.io/kptdev/krm-functions-catalog-evil/default-only:v1"))
            .to_string(),
        "FunctionConfig default-only (/etc/krm/default-only.yaml, document 1) does not list \
         repository \"ghcr.io/kptdev/krm-functions-catalog-evil\" (prefixes \
         [\"ghcr.io/kptdev/krm-functions-catalog\"])"
    );
}

#[test]
fn digest_references_and_unknown_names_never_match() {
    let table = table(vec![all_three()]);
    for image in [
        "ghcr.io/kptdev/krm-functions-catalog/set-namespace@sha256:0123",
        "set-namespace:v0.4.5@sha256:0123",
    ] {
        assert_eq!(
            no_match(table.route(image)),
            NoMatch::Digest {
                digest: "sha256:0123".into()
            }
        );
    }
    assert_eq!(
        no_match(table.route("ghcr.io/kptdev/krm-functions-catalog/set-labels:v1")).to_string(),
        "no FunctionConfig has spec.image \"set-labels\""
    );
    assert!(matches!(
        no_match(table.route("")),
        NoMatch::NoObject { .. }
    ));
}

#[test]
fn conflicts_prefer_files_then_names_whatever_the_arrival_order() {
    let spec = |tag: &str| json!({"image": "set-labels", "podExecutor": {"tags": [tag]}});
    let objects = vec![
        cluster("porch-fn-system", "a-set-labels", spec("v1.0.1")),
        file("z-set-labels", spec("v1.0.26")),
        cluster("default", "set-labels", spec("v1.0.4")),
        file("b-set-labels", spec("v1.0.2")),
    ];
    for reversed in [false, true] {
        let mut objects = objects.clone();
        if reversed {
            objects.reverse();
        }
        let (table, conflicts) = RoutingTable::build(objects, DEFAULT_PREFIX, Path::new(FUNCTIONS));
        assert_eq!(
            matched(table.route("set-labels:v1.0.2")).object.name,
            "b-set-labels"
        );
        assert!(
            matches!(table.route("set-labels:v1.0.26"), RouteOutcome::Matched(m) if m.plan.is_empty())
        );
        let ignored: Vec<_> = conflicts.iter().map(|c| c.ignored.to_string()).collect();
        assert_eq!(
            ignored,
            [
                "FunctionConfig z-set-labels (/etc/krm/z-set-labels.yaml, document 1)",
                "FunctionConfig default/set-labels (cluster)",
                "FunctionConfig porch-fn-system/a-set-labels (cluster)",
            ]
        );
        assert_eq!(
            conflicts[1].to_string(),
            "FunctionConfig b-set-labels (/etc/krm/b-set-labels.yaml, document 1) and \
             FunctionConfig default/set-labels (cluster) both claim spec.image \"set-labels\"; \
             using the first, ignoring the second"
        );
        assert_eq!(table.objects().count(), 1);
    }
}

#[test]
fn warm_up_uses_the_first_pod_tag_under_the_first_prefix() {
    let (table, conflicts) = RoutingTable::build(
        vec![
            file(
                "listed",
                json!({"image": "listed", "prefixes": ["example.com/fns/", ""],
                       "podExecutor": {"tags": ["v2", "v1"], "timeToLive": "5m"}}),
            ),
            file(
                "default",
                json!({"image": "default", "prefixes": [""], "podExecutor": {"tags": ["v1"]}}),
            ),
            file(
                "absent",
                json!({"image": "absent", "podExecutor": {"tags": ["v3"]}}),
            ),
            file("untagged", json!({"image": "untagged", "podExecutor": {}})),
            file(
                "binary",
                json!({"image": "binary", "binaryExecutor": {"tags": ["v1"], "path": "b"}}),
            ),
            cluster(
                "ns",
                "loser",
                json!({"image": "listed", "podExecutor": {"tags": ["v9"]}}),
            ),
        ],
        DEFAULT_PREFIX,
        Path::new(FUNCTIONS),
    );
    assert_eq!(conflicts.len(), 1);
    let warm: Vec<_> = table
        .warm_up_images()
        .into_iter()
        .map(|(image, pod)| (image, pod.time_to_live))
        .collect();
    assert_eq!(
        warm,
        [
            (format!("{CATALOG}/absent:v3"), "30m".to_owned()),
            (format!("{CATALOG}/default:v1"), "30m".to_owned()),
            ("example.com/fns/listed:v2".to_owned(), "5m".to_owned()),
        ]
    );
}

#[test]
fn relative_binary_paths_resolve_against_the_functions_directory() {
    let (table, _) = RoutingTable::build(
        vec![file(
            "rel",
            json!({"image": "rel", "binaryExecutor": {"tags": ["v1"], "path": "sub/rel"}}),
        )],
        DEFAULT_PREFIX,
        Path::new("relative/functions"),
    );
    let PlannedExecutor::Binary { path, .. } = &matched(table.route("rel:v1")).plan[0] else {
        panic!("not a binary step");
    };
    assert!(path.is_absolute(), "{}", path.display());
    assert!(
        path.ends_with("relative/functions/sub/rel"),
        "{}",
        path.display()
    );
}

#[test]
fn executor_tags_are_constraints() {
    let table = table(vec![file(
        "fn",
        json!({
            "image": "fn",
            "goExecutor": {"tags": ["v1.0.0", "v1.1.0"]},
            "binaryExecutor": {"tags": ["~1.2.0", "v1.2.3", "v1.2.7", "latest"], "path": "fn"},
            "podExecutor": {"tags": ["*"]},
        }),
    )]);
    let executors = |image: &str| {
        matched(table.route(image))
            .plan
            .iter()
            .map(PlannedExecutor::executor)
            .collect::<Vec<_>>()
    };
    // A requested tag falls under the entries admitting its version...
    assert_eq!(
        executors("fn:v1.1.0"),
        [
            FunctionConfigExecutor::GoExecutor,
            FunctionConfigExecutor::PodExecutor
        ]
    );
    assert_eq!(
        executors("fn:v1.2.5"),
        [
            FunctionConfigExecutor::BinaryExecutor,
            FunctionConfigExecutor::PodExecutor
        ]
    );
    // ...`*` admits any release, `latest` only itself, pre-releases none unless named.
    assert_eq!(
        executors("fn:v7.0.0"),
        [FunctionConfigExecutor::PodExecutor]
    );
    assert_eq!(
        executors("fn:latest"),
        [FunctionConfigExecutor::BinaryExecutor]
    );
    assert_eq!(
        executors("fn:v1.2.5-rc.1"),
        Vec::<FunctionConfigExecutor>::new()
    );
    let (_, left_out) = explain(&table, "fn:main");
    assert_eq!(left_out[3], r#"podExecutor: tag "main" not among ["*"]"#);
}

#[test]
fn requested_constraints_pick_the_highest_named_tag_per_executor() {
    let table = table(vec![file(
        "fn",
        json!({
            "image": "fn",
            "goExecutor": {"tags": ["v1.0.0", "v1.1.0", "~1.1"]},
            "binaryExecutor": {"tags": ["v1.2.3", "v1.2.7", "v2.0.0-rc.1"], "path": "fn"},
            "podExecutor": {"tags": ["~1.2"]},
        }),
    )]);
    let route = |constraint: &str| {
        let constraint = Constraint::parse(constraint).unwrap();
        matched(table.route_with("example.com/fn", Some(&constraint)))
    };
    let caret = route("^1");
    assert_eq!(
        caret.plan,
        [
            PlannedExecutor::Go {
                function_id: "fn".into(),
                tag: Some("v1.1.0".into())
            },
            PlannedExecutor::Binary {
                path: PathBuf::from("/opt/functions/fn"),
                tag: Some("v1.2.7".into()),
                cache: None,
            },
            PlannedExecutor::Pod {
                settings: Arc::new(serde_json::from_value(json!({"tags": ["~1.2"]})).unwrap())
            },
        ]
    );
    let patch = route(">= 1.2.3, < 1.2.7");
    assert_eq!(
        patch.plan[0],
        PlannedExecutor::Binary {
            path: PathBuf::from("/opt/functions/fn"),
            tag: Some("v1.2.3".into()),
            cache: None,
        }
    );
    assert_eq!(
        patch.left_out[0].to_string(),
        r#"goExecutor: no tag among ["v1.0.0", "v1.1.0", "~1.1"] satisfies constraint ">= 1.2.3, < 1.2.7""#
    );
    // Only a constraint naming a pre-release picks one.
    let rc = route("2.0.0-rc.1");
    assert_eq!(rc.plan.len(), 2, "{:?}", rc.plan);
    assert!(
        matches!(&rc.plan[0], PlannedExecutor::Binary { tag: Some(tag), .. } if tag == "v2.0.0-rc.1")
    );
}

#[test]
fn a_requested_version_or_range_meets_executor_ranges() {
    let table = table(vec![file(
        "fn",
        json!({
            "image": "fn",
            "goExecutor": {"tags": [">= 1.0.0, < 2.0.0"]},
            "binaryExecutor": {"tags": [">= 1.0.0, < 2.0.0", "v2.3.0"], "path": "fn"},
        }),
    )]);
    let tags = |constraint: &str| {
        let constraint = Constraint::parse(constraint).unwrap();
        let planned = matched(table.route_with("example.com/fn", Some(&constraint)));
        let tags: Vec<_> = planned
            .plan
            .iter()
            .map(|step| match step {
                PlannedExecutor::Go { tag, .. } | PlannedExecutor::Binary { tag, .. } => {
                    (step.executor(), tag.clone())
                }
                PlannedExecutor::Wasm { .. } | PlannedExecutor::Pod { .. } => {
                    panic!("no wasmExecutor or podExecutor")
                }
            })
            .collect();
        (tags, planned.left_out)
    };
    let go = FunctionConfigExecutor::GoExecutor;
    let binary = FunctionConfigExecutor::BinaryExecutor;
    // A version the range admits is run as that version.
    for version in ["1.4.2", "v1.4.2", "=1.4.2"] {
        let expected = version.trim_start_matches('=');
        let (planned, _) = tags(version);
        assert_eq!(
            planned,
            [(go, Some(expected.into())), (binary, Some(expected.into()))],
            "{version}"
        );
    }
    // A range overlapping it is run untagged; a named tag satisfying it is preferred.
    assert_eq!(tags("~1.4.0").0, [(go, None), (binary, None)]);
    assert_eq!(tags("^2").0, [(binary, Some("v2.3.0".into()))]);
    let (planned, left_out) = tags("~2.1");
    assert!(planned.is_empty(), "{planned:?}");
    assert_eq!(
        left_out[0].to_string(),
        r#"goExecutor: no tag among [">= 1.0.0, < 2.0.0"] satisfies constraint "~2.1""#
    );
    assert!(tags("1.4.2-rc.1").0.is_empty());
}
