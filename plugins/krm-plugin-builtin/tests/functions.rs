//! Catalog behaviour of each function, over ResourceLists as kpt sends them.

mod common;
use common::*;

const NS_ITEMS: &str = r#"# a comment before the first item
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web # the web tier
    namespace: old
  spec:
    replicas: 3
- apiVersion: v1
  kind: Service
  metadata:
    name: 'web'
  spec:
    ports: [{port: 80}]   # flow, untouched

- apiVersion: v1
  kind: Namespace
  metadata:
    name: old
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: local
    namespace: old
    annotations:
      config.kubernetes.io/local-config: "true"
- apiVersion: example.com/v1
  kind: Widget
  metadata:
    name: no-ns
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata:
    name: crb
  subjects:
  - kind: ServiceAccount
    name: sa
    namespace: old
  - kind: User
    name: u
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: rb
    namespace: old
  subjects:
  - kind: ServiceAccount
    name: default
    namespace: old
"#;

#[test]
fn set_namespace_rewrites_namespaced_fields_and_keeps_format() {
    let input = rl(NS_ITEMS, &configmap(&[("namespace", "prod")]));
    let out = ok("set-namespace", &input);
    let expected_items = NS_ITEMS
        .replace(
            "    name: web # the web tier\n    namespace: old",
            "    name: web # the web tier\n    namespace: prod",
        )
        .replace(
            "    name: 'web'\n",
            "    name: 'web'\n    namespace: prod\n",
        )
        .replace(
            "  kind: Namespace\n  metadata:\n    name: old",
            "  kind: Namespace\n  metadata:\n    name: prod",
        )
        .replace(
            "    name: sa\n    namespace: old",
            "    name: sa\n    namespace: prod",
        )
        .replace(
            "    name: rb\n    namespace: old",
            "    name: rb\n    namespace: prod",
        );
    assert_eq!(
        body(&out),
        rl(&expected_items, &configmap(&[("namespace", "prod")])).trim_end()
    );
    // Local-config object, unknown cluster-scoped kind and RoleBinding subjects are left alone.
    assert!(out.contains("    name: local\n    namespace: old\n"));
    assert!(out.contains("    name: default\n    namespace: old\n"));
    let results = results(&out);
    assert!(
        results
            .contains("message: namespace [default old] updated to \"prod\", 5 value(s) changed"),
        "{results}"
    );
    assert!(
        results.contains("does not have upstream origin."),
        "{results}"
    );
    assert!(
        results.contains("all `depends-on` annotations are up-to-date. no `namespace` changed")
    );
}

#[test]
fn set_namespace_missing_config_is_an_error_result_with_exit_0() {
    let input = rl(NS_ITEMS, "");
    let out = ok("set-namespace", &input);
    assert_eq!(body(&out), input.trim_end(), "items untouched");
    assert_eq!(
        results(&out),
        "- message: FunctionConfig is missing. Expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`\n  severity: error\n"
    );
}

#[test]
fn set_namespace_config_forms() {
    // Package context: ConfigMap kptfile.kpt.dev with data.name.
    let pc = "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: kptfile.kpt.dev\n    annotations:\n      config.kubernetes.io/local-config: \"true\"\n  data:\n    name: my-pkg\n";
    let out = ok("set-namespace", &rl(NS_ITEMS, pc));
    assert!(out.contains("    name: web # the web tier\n    namespace: my-pkg\n"));
    let empty = pc.replace("name: my-pkg", "name: \"\"");
    let out = ok("set-namespace", &rl(NS_ITEMS, &empty));
    assert!(results(&out).contains("`data.name` should not be empty"));
    // Typed form.
    let typed = "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: SetNamespace\n  metadata:\n    name: x\n  namespace: typed\n";
    let out = ok("set-namespace", &rl(NS_ITEMS, typed));
    assert!(out.contains("namespace: typed\n"));
    let out = ok(
        "set-namespace",
        &rl(
            NS_ITEMS,
            &typed.replace("namespace: typed", "namespace: \"\""),
        ),
    );
    assert!(
        results(&out).contains("message: '`namespace` should not be empty'"),
        "{out}"
    );
    // Empty data.namespace and unknown kinds.
    let out = ok(
        "set-namespace",
        &rl(NS_ITEMS, &configmap(&[("namespace", "")])),
    );
    assert!(results(&out).contains("`data.namespace` should not be empty"));
    let other = "  apiVersion: example.com/v1\n  kind: Foo\n  metadata:\n    name: x\n";
    let out = ok("set-namespace", &rl(NS_ITEMS, other));
    assert!(
        results(&out).contains("unknown functionConfig Kind=Foo ApiVersion=example.com/v1"),
        "{out}"
    );
    assert!(results(&out).contains("severity: error"));
}

#[test]
fn set_namespace_matcher_origins_and_depends_on() {
    let items = r#"- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: a
    namespace: ns1
    annotations:
      internal.kpt.dev/upstream-identifier: "|ConfigMap|ns1|a"
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: b
    namespace: ns2
    annotations:
      internal.kpt.dev/upstream-identifier: "|ConfigMap|ns2|b"
      config.kubernetes.io/depends-on: /namespaces/ns1/ConfigMap/a
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: c
    namespace: ns2
    annotations:
      internal.kpt.dev/upstream-identifier: "|ConfigMap|ns2|c"
      config.kubernetes.io/depends-on: /namespaces/ns1/ConfigMap/elsewhere
"#;
    // Two origin namespaces and no matcher: refuse, exit 0.
    let out = ok(
        "set-namespace",
        &rl(items, &configmap(&[("namespace", "new")])),
    );
    assert_eq!(
        body(&out),
        rl(items, &configmap(&[("namespace", "new")])).trim_end()
    );
    assert!(
        results(&out).contains("expect a single upstream namespace, found [ns1 ns2]"),
        "{out}"
    );
    // With a matcher only ns1 changes, and the depends-on pointing at `a` follows it.
    let out = ok(
        "set-namespace",
        &rl(
            items,
            &configmap(&[("namespace", "new"), ("namespaceMatcher", "ns1")]),
        ),
    );
    assert!(out.contains("    name: a\n    namespace: new\n"));
    assert!(out.contains("    name: b\n    namespace: ns2\n"));
    assert!(out.contains("config.kubernetes.io/depends-on: /namespaces/new/ConfigMap/a\n"));
    assert!(out.contains("config.kubernetes.io/depends-on: /namespaces/ns1/ConfigMap/elsewhere\n"));
    assert!(
        results(&out).contains(
            "`depends-on` annotation namespace [ns1] updated to \\\"new\\\", 1 value(s) changed"
        ) || results(&out).contains(
            "`depends-on` annotation namespace [ns1] updated to \"new\", 1 value(s) changed"
        ),
        "{out}"
    );
}

#[test]
fn set_namespace_crd_webhook_and_apiservice() {
    let items = r#"- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata:
    name: no-conversion
  spec:
    group: example.com
- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata:
    name: webhook-no-ns
  spec:
    conversion:
      webhook:
        clientConfig:
          service:
            name: svc
- apiVersion: apiregistration.k8s.io/v1
  kind: APIService
  metadata:
    name: no-service
  spec:
    group: metrics.k8s.io
"#;
    let out = ok(
        "set-namespace",
        &rl(items, &configmap(&[("namespace", "new-ns")])),
    );
    assert!(
        out.contains("          service:\n            name: svc\n            namespace: new-ns\n"),
        "{out}"
    );
    assert!(out.contains("    name: no-conversion\n  spec:\n    group: example.com\n"));
    assert!(out.contains("    name: no-service\n  spec:\n    group: metrics.k8s.io\n"));
    assert!(
        results(&out).contains("namespace [default] updated to \"new-ns\", 1 value(s) changed")
    );
}

#[test]
fn set_labels_paths_create_and_update_only() {
    let items = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
  spec:
    selector:
      matchLabels:
        app: web
    template:
      metadata:
        labels:
          app: web
      spec:
        containers: []
- apiVersion: batch/v1
  kind: Job
  metadata:
    name: job
    labels: {app: job}
  spec:
    selector:
      matchLabels:
        color: red
        app: job
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: local
    annotations:
      config.kubernetes.io/local-config: "true"
"#;
    let out = ok(
        "set-labels",
        &rl(items, &configmap(&[("color", "blue"), ("enabled", "true")])),
    );
    let items_out = body(&out);
    // Deployment: metadata labels created, selector and template extended (keys sorted).
    assert!(
        items_out.contains(
            "    name: web\n    labels:\n      color: blue\n      enabled: \"true\"\n  spec:"
        ),
        "{out}"
    );
    assert!(items_out.contains("      matchLabels:\n        app: web\n        color: blue\n        enabled: \"true\"\n    template:"));
    assert!(items_out.contains("        labels:\n          app: web\n          color: blue\n          enabled: \"true\"\n      spec:"));
    // Job: flow labels stay flow; selector is update-only (color changed, enabled not added).
    assert!(
        items_out.contains("    labels: {app: job, \"color\": \"blue\", \"enabled\": \"true\"}\n"),
        "{out}"
    );
    assert!(items_out.contains("      matchLabels:\n        color: blue\n        app: job\n"));
    // Job pod template created.
    assert!(
        items_out
            .contains("    template:\n      metadata:\n        labels:\n          color: blue\n")
    );
    // Local config untouched.
    assert!(items_out.contains(
        "    name: local\n    annotations:\n      config.kubernetes.io/local-config: \"true\"\n"
    ));
    assert!(!items_out.contains("name: local\n    annotations:\n      config.kubernetes.io/local-config: \"true\"\n    labels"));
    assert!(
        results(&out).contains("set 12 labels in total"),
        "{}",
        results(&out)
    );
}

#[test]
fn set_labels_config_errors() {
    let items = "- apiVersion: v1\n  kind: Service\n  metadata:\n    name: s\n";
    let (out, _) = failed("set-labels", &rl(items, ""));
    assert!(results(&out).contains("`FunctionConfig` is not given"));
    assert_eq!(body(&out), rl(items, "").trim_end());
    let (out, _) = failed("set-labels", &rl(items, &configmap(&[])));
    assert!(results(&out).contains("`FunctionConfig` is not given"));
    let (out, _) = failed(
        "set-labels",
        &rl(
            items,
            "  apiVersion: example.com/v1\n  kind: Other\n  metadata: {name: x}\n",
        ),
    );
    assert!(
        results(&out).contains("unknown FunctionConfig `Other.example.com`"),
        "{out}"
    );
    let (out, _) = failed(
        "set-labels",
        &rl(
            items,
            "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: SetLabels\n  metadata: {name: x}\n  labels: [a, b]\n",
        ),
    );
    assert!(results(&out).contains("unable to convert object to *setlabels.SetLabels"));
    let out = ok(
        "set-labels",
        &rl(
            items,
            "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: SetLabels\n  metadata: {name: x}\n  labels: {}\n",
        ),
    );
    assert!(results(&out).contains("no `labels` arguments are given in FunctionConfig"));
    // Only local items: "no input resources", exit 0.
    let local = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: l\n    annotations:\n      config.kubernetes.io/local-config: \"true\"\n";
    let out = ok("set-labels", &rl(local, &configmap(&[("a", "b")])));
    assert!(results(&out).contains("no input resources"));
    // Signature: a label value that is a map breaks the `labels` rule.
    let (out, _) = failed(
        "set-labels",
        &rl(
            items,
            "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: SetLabels\n  metadata: {name: x}\n  labels: {a: {b: c}}\n",
        ),
    );
    assert!(
        results(&out).contains("parameter `labels` must be a map of strings"),
        "{out}"
    );
}

#[test]
fn set_annotations_includes_local_config_and_reports_fields() {
    let items = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
    annotations:
      internal.config.kubernetes.io/path: deploy.yaml
  spec:
    template:
      spec: {}
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: local
    annotations:
      config.kubernetes.io/local-config: "true"
      internal.config.kubernetes.io/path: local.yaml
"#;
    let out = ok(
        "set-annotations",
        &rl(items, &configmap(&[("owner", "team-a")])),
    );
    assert!(
        out.contains(
            "      internal.config.kubernetes.io/path: deploy.yaml\n      owner: team-a\n"
        )
    );
    assert!(out.contains("    template:\n      spec: {}\n      metadata:\n        annotations:\n          owner: team-a\n"), "{out}");
    assert!(
        out.contains("      internal.config.kubernetes.io/path: local.yaml\n      owner: team-a\n")
    );
    let results = results(&out);
    assert!(results.contains("- message: 'set annotations: {\"owner\":\"team-a\"}'\n  field:\n    path: metadata.annotations\n  file:\n    path: deploy.yaml\n"), "{results}");
    assert!(results.contains("path: spec.template.metadata.annotations"));
    assert!(
        results.find("deploy.yaml") < results.find("local.yaml"),
        "sorted by file"
    );
    // Config errors exit non-zero.
    let (out, _) = failed("set-annotations", &rl(items, ""));
    assert!(
        results_of(&out).contains("`functionConfig` must be a `ConfigMap` or `SetAnnotations`")
    );
    let (out, _) = failed("set-annotations", &rl(items, &configmap(&[])));
    assert!(results_of(&out).contains("input annotation list cannot be empty"));
}

fn results_of(out: &str) -> &str {
    results(out)
}

#[test]
fn set_image_updates_matching_containers_only() {
    let items = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
  spec:
    template:
      spec:
        initContainers:
        - name: init
          image: nginx:1.20.2
        containers:
        - name: web
          image: nginx:1.20.2 # pinned
        - name: side
          image: "nginx-exporter:1"
        - name: reg
          image: nginx@sha256:0000
- apiVersion: batch/v1
  kind: Job
  metadata:
    name: job
  spec:
    template:
      spec:
        containers:
        - image: nginx
"#;
    let out = ok(
        "set-image",
        &rl(
            items,
            &configmap(&[
                ("name", "nginx"),
                ("newName", "bitnami/nginx"),
                ("newTag", "1.21"),
            ]),
        ),
    );
    assert!(out.contains("          image: bitnami/nginx:1.21 # pinned\n"));
    assert!(
        out.contains("          image: nginx:1.20.2\n        containers:"),
        "initContainers untouched"
    );
    assert!(out.contains("          image: \"nginx-exporter:1\"\n"));
    assert!(out.contains("          image: bitnami/nginx:1.21\n- apiVersion: batch/v1"));
    assert!(
        out.contains("        - image: nginx\n"),
        "Job not a default target"
    );
    assert!(results(&out).contains("summary: updated a total of 2 image(s)"));
    // Digest wins over the tag.
    let digest = format!("sha256:{}", "a".repeat(64));
    let out = ok(
        "set-image",
        &rl(
            items,
            &configmap(&[("name", "nginx"), ("newTag", "9"), ("digest", &digest)]),
        ),
    );
    assert!(out.contains(&format!("          image: nginx@{digest} # pinned\n")));
    // Typed config with additional fields reaches the Job.
    let typed = "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: SetImage\n  metadata: {name: x}\n  image: {name: nginx, newTag: \"2\"}\n  additionalImageFields:\n  - {kind: Job, path: \"spec/template/spec/containers[]/image\"}\n";
    let out = ok("set-image", &rl(items, typed));
    assert!(out.contains("        - image: nginx:2\n"), "{out}");
    // Bad configs.
    let (out, _) = failed("set-image", &rl(items, &configmap(&[("newTag", "1")])));
    assert!(results(&out).contains("must specify `name`"));
    let (out, _) = failed("set-image", &rl(items, &configmap(&[("name", "nginx")])));
    assert!(results(&out).contains("must specify one of `newName`, `newTag`, or `digest`"));
    let (out, _) = failed(
        "set-image",
        &rl(items, &configmap(&[("name", "nginx"), ("tag", "1")])),
    );
    assert!(results(&out).contains("ConfigMap has wrong field name tag"));
    let (out, _) = failed(
        "set-image",
        &rl(items, &configmap(&[("name", "nginx"), ("digest", "md5:1")])),
    );
    assert!(
        results(&out).contains("parameter `digest` must match the pattern"),
        "{out}"
    );
}

#[test]
fn apply_setters_scalars_patterns_and_arrays() {
    let items = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web # kpt-set: ${app}
    annotations:
      internal.config.kubernetes.io/path: web.yaml
  spec:
    replicas: "1" # kpt-set: ${replicas}
    image: "nginx:1.0" # kpt-set: ${image}:${tag}
    other: keep # kpt-set: ${unrelated}
    envs: # kpt-set: ${envs}
      - dev
    flow: [a] # kpt-set: ${flowlist}
    gone: # kpt-set: ${empty}
      - x
"#;
    let cm = configmap(&[
        ("app", "shop"),
        ("replicas", "3"),
        ("tag", "1.1"),
        ("envs", "[prod, stage]"),
        ("flowlist", "[b, c]"),
        ("empty", ""),
    ]);
    let out = ok("apply-setters", &rl(items, &cm));
    let b = body(&out);
    assert!(b.contains("    name: shop # kpt-set: ${app}\n"));
    assert!(
        b.contains("    replicas: \"3\" # kpt-set: ${replicas}\n"),
        "quoting kept: {b}"
    );
    assert!(
        b.contains("    image: \"nginx:1.1\" # kpt-set: ${image}:${tag}\n"),
        "{b}"
    );
    assert!(b.contains("    other: keep # kpt-set: ${unrelated}\n"));
    assert!(
        b.contains("    envs: # kpt-set: ${envs}\n      - prod\n      - stage\n"),
        "{b}"
    );
    assert!(
        b.contains("    flow: # kpt-set: ${flowlist}\n      - b\n      - c\n"),
        "{b}"
    );
    assert!(b.contains("    gone: [] # kpt-set: ${empty}\n"), "{b}");
    let r = results(&out);
    assert!(
        r.starts_with("  name: apply-setters\n  items:\n"),
        "legacy shape: {r}"
    );
    assert!(r.contains("- message: set field value to \"shop\"\n    field:\n      path: metadata.name\n    file:\n      path: web.yaml\n"), "{r}");
    // A pattern with a setter that is neither given nor recoverable fails.
    let items2 = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    v: abc # kpt-set: ${a}-${b}\n";
    let (out, message) = failed("apply-setters", &rl(items2, &configmap(&[("a", "x")])));
    assert!(
        message.contains("values for setters [${b}] must be provided"),
        "{message}"
    );
    assert!(results(&out).contains("failed to apply setters"));
    // No matching setter: info, exit 0, nothing changed.
    let out = ok("apply-setters", &rl(items2, &configmap(&[("zzz", "x")])));
    assert!(results(&out).contains("no matches for input setter(s)"));
    assert_eq!(
        body(&out),
        rl(items2, &configmap(&[("zzz", "x")])).trim_end()
    );
    // Tag cleared: a plain value is written plain; an empty value is written "".
    let items3 = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    n: 1 # kpt-set: ${n}\n    e: x # kpt-set: ${e}\n";
    let out = ok(
        "apply-setters",
        &rl(items3, &configmap(&[("n", "5"), ("e", "")])),
    );
    assert!(
        out.contains("    n: 5 # kpt-set: ${n}\n    e: \"\" # kpt-set: ${e}\n"),
        "{out}"
    );
}
