//! search-replace and ensure-name-substring: catalog semantics over ResourceLists as kpt sends them.

mod common;
use common::*;

const SR_ITEMS: &str = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: nginx-deployment # the name
    annotations:
      internal.config.kubernetes.io/path: deploy.yaml
  spec:
    replicas: 3
    template:
      spec:
        containers:
        - name: nginx
          image: nginx:1.7.9 # pinned

        - name: side
          image: 'nginx-exporter:1'
    environments: [dev, stage]
- apiVersion: v1
  kind: Service
  metadata:
    name: svc
  spec:
    selector:
      app: nginx-deployment
"#;

#[test]
fn search_replace_by_value_regex_put_value_with_groups() {
    let cm = configmap(&[
        ("by-value-regex", "nginx-(.*)"),
        ("put-value", "ubuntu-${1}"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    let expected = SR_ITEMS
        .replace(
            "name: nginx-deployment # the name",
            "name: ubuntu-deployment # the name",
        )
        .replace("image: 'nginx-exporter:1'", "image: 'ubuntu-exporter:1'")
        .replace("app: nginx-deployment", "app: ubuntu-deployment");
    assert_eq!(body(&out), rl(&expected, &cm).trim_end());
    let r = results(&out);
    assert!(r.starts_with("  name: search-replace\n  items:\n"), "{r}");
    // Only objects with a path annotation are reported (the Service has none).
    assert!(r.contains("- message: 'Mutated field value to \"ubuntu-deployment # the name\"'\n    field:\n      path: metadata.name\n    file:\n      path: deploy.yaml\n"), "{r}");
    assert!(
        r.contains("Mutated field value to \"'ubuntu-exporter:1'\""),
        "{r}"
    );
    assert!(
        r.contains("path: spec.template.spec.containers[1].image"),
        "{r}"
    );
    assert_eq!(r.matches("- message:").count(), 2, "{r}");
}

#[test]
fn search_replace_by_path_matching_and_put_comment() {
    let cm = configmap(&[("by-path", "spec.**.image")]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert_eq!(body(&out), rl(SR_ITEMS, &cm).trim_end(), "search only");
    let r = results(&out);
    assert!(
        r.contains("Matched field value \"nginx:1.7.9 # pinned\""),
        "{r}"
    );
    assert!(
        r.contains("path: spec.template.spec.containers[0].image"),
        "{r}"
    );
    // put-comment on scalars and on list keys (flow list becomes block).
    let cm = configmap(&[
        ("by-path", "spec.environments"),
        ("put-comment", "kpt-set: ${env}"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(
        out.contains(
            "    environments: # kpt-set: ${env}\n      - dev\n      - stage\n- apiVersion: v1"
        ),
        "{out}"
    );
    assert!(
        results(&out).contains("path: 'spec.environments # kpt-set: ${env}'"),
        "{out}"
    );
    assert!(
        results(&out).contains("Mutated field value to \"[dev, stage]\""),
        "{out}"
    );
    let cm = configmap(&[
        ("by-value", "nginx:1.7.9"),
        ("put-comment", "kpt-set: ${image}"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(
        out.contains("          image: nginx:1.7.9 # kpt-set: ${image}\n\n"),
        "{out}"
    );
    // by-path with [*] and by-value together (AND).
    let cm = configmap(&[
        ("by-path", "spec.template.spec.containers[*].name"),
        ("by-value", "side"),
        ("put-value", "helper"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(out.contains("        - name: helper\n"));
    assert!(out.contains("        - name: nginx\n"));
}

#[test]
fn search_replace_put_value_by_literal_path_creates_everywhere() {
    let cm = configmap(&[("by-path", "metadata.labels.team"), ("put-value", "3")]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(out.contains("      internal.config.kubernetes.io/path: deploy.yaml\n    labels:\n      team: 3\n  spec:"), "{out}");
    assert!(
        out.contains("    name: svc\n    labels:\n      team: 3\n"),
        "{out}"
    );
    let r = results(&out);
    assert_eq!(r.matches("Mutated field value to \"3\"").count(), 2, "{r}");
    // by-file-path limits it to matching files.
    let cm = configmap(&[
        ("by-path", "spec.replicas"),
        ("put-value", "5"),
        ("by-file-path", "other/**"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(out.contains("replicas: 3"), "{out}");
    assert!(results(&out).contains("no matches"), "{out}");
    let cm = configmap(&[
        ("by-path", "spec.replicas"),
        ("put-value", "5"),
        ("by-file-path", "deploy*.yaml"),
    ]);
    let out = ok("search-replace", &rl(SR_ITEMS, &cm));
    assert!(out.contains("replicas: 5"), "{out}");
    assert!(!out.contains("name: svc\n  spec:\n    replicas"), "{out}");
}

#[test]
fn search_replace_errors_and_no_matches() {
    let (out, _) = failed(
        "search-replace",
        &rl(SR_ITEMS, &configmap(&[("by-name", "x")])),
    );
    assert!(
        results(&out).contains("invalid matcher \\\"by-name\\\", must be one of"),
        "{out}"
    );
    assert!(results(&out).contains("severity: error"));
    let (out, _) = failed(
        "search-replace",
        &rl(
            SR_ITEMS,
            &configmap(&[("by-value", "a"), ("by-value-regex", "b")]),
        ),
    );
    assert!(results(&out).contains("only one of"), "{out}");
    let (_, msg) = failed(
        "search-replace",
        &rl(SR_ITEMS, &configmap(&[("by-value-regex", "(a")])),
    );
    assert!(msg.contains("error parsing regexp"), "{msg}");
    let (_, msg) = failed(
        "search-replace",
        &rl(
            SR_ITEMS,
            &configmap(&[("by-value-regex", "nginx"), ("put-value", "${2}")]),
        ),
    );
    assert!(msg.contains("unable to resolve capture groups"), "{msg}");
    let out = ok(
        "search-replace",
        &rl(SR_ITEMS, &configmap(&[("by-value", "nothing")])),
    );
    assert!(results(&out).contains("- message: no matches\n"), "{out}");
    assert_eq!(
        body(&out),
        rl(SR_ITEMS, &configmap(&[("by-value", "nothing")])).trim_end()
    );
}

const ENS_ITEMS: &str = r#"- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web # keep me
    namespace: ns
    annotations:
      config.kubernetes.io/depends-on: /namespaces/ns/ConfigMap/cfg
  spec:
    template:
      spec:
        serviceAccountName: sa
        containers:
        - name: web
          envFrom:
          - configMapRef:
              name: cfg
          env:
          - name: X
            valueFrom:
              secretKeyRef: {name: unknown-secret, key: k}
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cfg
    namespace: ns
- apiVersion: v1
  kind: ServiceAccount
  metadata:
    name: sa
    namespace: ns
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: prod-rb
    namespace: ns
  roleRef:
    apiGroup: rbac.authorization.k8s.io
    kind: Role
    name: reader
  subjects:
  - kind: ServiceAccount
    name: sa
    namespace: ns
  - kind: User
    name: sa
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata:
    name: reader
    namespace: ns
- apiVersion: v1
  kind: Namespace
  metadata:
    name: ns
- apiVersion: v1
  kind: Service
  metadata:
    name: with-prod-service
    namespace: ns
"#;

#[test]
fn ensure_name_substring_prefix_fixes_references() {
    let cm = configmap(&[("prepend", "prod-")]);
    let out = ok("ensure-name-substring", &rl(ENS_ITEMS, &cm));
    let expected = ENS_ITEMS
        .replace("name: web # keep me", "name: prod-web # keep me")
        .replace(
            "/namespaces/ns/ConfigMap/cfg",
            "/namespaces/ns/ConfigMap/prod-cfg",
        )
        .replace("serviceAccountName: sa", "serviceAccountName: prod-sa")
        .replace("              name: cfg", "              name: prod-cfg")
        .replace("    name: cfg\n", "    name: prod-cfg\n")
        .replace(
            "    name: sa\n    namespace: ns\n- apiVersion: rbac",
            "    name: prod-sa\n    namespace: ns\n- apiVersion: rbac",
        )
        .replace(
            "    name: reader\n  subjects",
            "    name: prod-reader\n  subjects",
        )
        .replace(
            "  - kind: ServiceAccount\n    name: sa",
            "  - kind: ServiceAccount\n    name: prod-sa",
        )
        .replace(
            "    name: reader\n    namespace: ns\n- apiVersion: v1\n  kind: Namespace",
            "    name: prod-reader\n    namespace: ns\n- apiVersion: v1\n  kind: Namespace",
        );
    assert_eq!(out, rl(&expected, &cm));
    // Idempotent: a second run changes nothing.
    let again = ok("ensure-name-substring", &out);
    assert_eq!(again, out);
}

#[test]
fn ensure_name_substring_append_typed_and_errors() {
    let typed = "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: EnsureNameSubstring\n  metadata:\n    name: x\n  substring: -dev\n  editMode: append\n  additionalNameFields:\n  - kind: Deployment\n    path: spec/template/spec/containers[]/name\n";
    let out = ok("ensure-name-substring", &rl(ENS_ITEMS, typed));
    assert!(out.contains("    name: web-dev # keep me\n"), "{out}");
    assert!(out.contains("        - name: web-dev\n"), "{out}");
    assert!(out.contains("    name: with-prod-service-dev\n"), "{out}");
    assert!(
        out.contains("  kind: Namespace\n  metadata:\n    name: ns\n"),
        "Namespace skipped"
    );
    for (config, message) in [
        (
            configmap(&[]),
            "only 1 entry is allowed in the ConfigMap, but got: 0",
        ),
        (
            configmap(&[("prepend", "a"), ("append", "b")]),
            "only 1 entry is allowed in the ConfigMap, but got: 2",
        ),
        (configmap(&[("middle", "a")]), "unknown editMode: middle"),
        (configmap(&[("prepend", "")]), "substring must not be empty"),
        (
            typed.replace("editMode: append", "editMode: around"),
            "parameter `editMode` must be one of [prepend, append]",
        ),
        (
            typed.replace("substring: -dev", "substring: [a]"),
            "parameter `substring` must be a string",
        ),
        (
            "  apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n".to_owned(),
            "but we got: /v1, Kind=Secret",
        ),
    ] {
        let (out, _) = failed("ensure-name-substring", &rl(ENS_ITEMS, &config));
        assert!(results(&out).contains(message), "{message}: {out}");
        assert!(
            results(&out).contains("failed to load the `functionConfig`"),
            "{out}"
        );
    }
    // No functionConfig at all: nothing to do, exit 0.
    let out = ok("ensure-name-substring", &rl(ENS_ITEMS, ""));
    assert_eq!(out, rl(ENS_ITEMS, ""));
}

const AR_CONFIG: &str =
    "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata:\n    name: r\n";

#[test]
fn apply_replacements_keeps_format_and_chains() {
    let items = r#"# package context
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: ctx # the source
    annotations:
      config.kubernetes.io/local-config: "true"
  data:
    name: shop
    port: "8080"
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: 'web'   # quoted
  spec:
    replicas: 3 # three

    template:
      spec:
        containers: [{name: app, image: "nginx:1"}]
- apiVersion: v1
  kind: Service
  metadata:
    name: untouched # comment
"#;
    let config = format!(
        "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap, name: ctx, fieldPath: data.name}}\n    targets:\n    - select: {{kind: Deployment}}\n      fieldPaths: [metadata.name, spec.template.metadata.labels.app]\n      options: {{create: true}}\n    - select: {{kind: Deployment}}\n      fieldPaths: [\"spec.template.spec.containers.[name=app].image\"]\n      options: {{delimiter: ':', index: 0}}\n  - source: {{kind: ConfigMap, fieldPath: data.port}}\n    targets:\n    - select: {{kind: Deployment}}\n      fieldPaths: [spec.replicas]\n  - source: {{kind: Deployment, name: shop, fieldPath: spec.template.metadata}}\n    targets:\n    - select: {{kind: Service}}\n      fieldPaths: [spec.copied]\n      options: {{create: true}}\n"
    );
    let out = ok("apply-replacements", &rl(items, &config));
    let expected = items
        .replace("    name: 'web'   # quoted", "    name: 'shop'   # quoted")
        .replace("    replicas: 3 # three\n", "    replicas: 8080 # three\n")
        .replace(
            "containers: [{name: app, image: \"nginx:1\"}]\n",
            "containers: [{name: app, image: \"shop:1\"}]\n      metadata:\n        labels:\n          app: shop\n",
        )
        .replace(
            "    name: untouched # comment\n",
            "    name: untouched # comment\n  spec:\n    copied:\n      labels:\n        app: shop\n",
        );
    assert_eq!(out, rl(&expected, &config), "{out}");
    assert!(!out.contains("results:"), "no results on success");
}

#[test]
fn apply_replacements_config_errors_exit_1() {
    let items =
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    k: v\n";
    for (config, message) in [
        (
            "".to_owned(),
            "FunctionConfig is missing. Expect `ApplyReplacements`",
        ),
        (
            configmap(&[("a", "b")]),
            "received functionConfig of kind ConfigMap and apiVersion v1, only functionConfig of kind ApplyReplacements",
        ),
        (
            format!("{AR_CONFIG}  replacements: {{a: b}}\n"),
            "parameter `replacements` must be a list",
        ),
        (
            format!("{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap}}\n"),
            "replacements must specify a source and at least one target",
        ),
        (
            format!(
                "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap}}\n    targets: [{{fieldPaths: [a]}}]\n"
            ),
            "target must specify resources to select",
        ),
        (
            format!(
                "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap, fieldPath: data.nope}}\n    targets: [{{select: {{kind: ConfigMap}}}}]\n"
            ),
            "fieldPath `data.nope` is missing for replacement source ConfigMap.[noVer].[noGrp]/[noName].[noNs]",
        ),
        (
            format!(
                "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap, fieldPath: data.k, options: {{delimiter: ',', index: 3}}}}\n    targets: [{{select: {{kind: ConfigMap}}}}]\n"
            ),
            "options.index 3 is out of bounds for value v",
        ),
        (
            format!(
                "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap, fieldPath: data.k}}\n    targets: [{{select: {{kind: ConfigMap}}, fieldPaths: [data], options: {{delimiter: ','}}}}]\n"
            ),
            "delimiter option can only be used with scalar nodes",
        ),
        (
            format!(
                "{AR_CONFIG}  replacements:\n  - source: {{kind: ConfigMap, fieldPath: data.k}}\n    targets: [{{select: {{kind: ConfigMap}}, fieldPaths: [data.k.x]}}]\n"
            ),
            "unable to find field \\\"data.k.x\\\" in replacement target: wrong node kind",
        ),
    ] {
        let (out, _) = failed("apply-replacements", &rl(items, &config));
        assert!(results(&out).contains(message), "{message}: {out}");
        assert!(out.starts_with(&rl(items, "")), "items untouched: {out}");
    }
    // An empty replacement list is a no-op.
    let config = format!("{AR_CONFIG}  replacements: []\n");
    assert_eq!(
        ok("apply-replacements", &rl(items, &config)),
        rl(items, &config)
    );
}

#[test]
fn new_functions_scale_linearly_enough_on_10k_objects() {
    let items = deployments(10_000);
    let cm = configmap(&[("by-value", "nginx:1.20.2"), ("put-value", "nginx:1.21")]);
    let out = ok("search-replace", &rl(&items, &cm));
    assert_eq!(out.matches("image: nginx:1.21 # pinned\n").count(), 10_000);
    let out = ok(
        "ensure-name-substring",
        &rl(&items, &configmap(&[("append", "-x")])),
    );
    assert_eq!(out.matches("    name: app-").count(), 10_000);
    assert!(out.contains("    name: app-9999-x\n"));
    let config = format!(
        "{AR_CONFIG}  replacements:\n  - source: {{kind: Deployment, name: app-0, fieldPath: spec.replicas}}\n    targets:\n    - select: {{kind: Deployment}}\n      fieldPaths: [spec.template.metadata.labels.replicas]\n      options: {{create: true}}\n"
    );
    let out = ok("apply-replacements", &rl(&items, &config));
    assert_eq!(out.matches("          replicas: \"1\"\n").count(), 0);
    assert_eq!(out.matches("\n          app: app-").count(), 10_000);
    assert_eq!(
        out.matches("\n          replicas: 1\n").count(),
        10_000,
        "created with the int type"
    );
}
