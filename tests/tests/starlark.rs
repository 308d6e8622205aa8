//! The starlark function (the `starlark` plugin) as its users meet it: `krm-runner fn starlark` on a ResourceList, run by
//! the real kpt (`kpt fn render` with an `exec:` step, `kpt fn eval`), and over gRPC, where a
//! runaway program must end cleanly and leave the server serving.

use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Server, assert_deadline_answer, call_with_remote_deadline, fn_command, have_tool, kpt,
    kpt_eval_exec, kpt_package, run_cli, scratch,
};
use tonic::Code;

const APP: &str = "# the web app
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # keep me
  labels:
    tier: 'front'
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
data:
  key: \"value\"
";

const SET_NAMESPACE: &str = "apiVersion: fn.kpt.dev/v1alpha1
kind: StarlarkRun
metadata:
  name: set-ns
  annotations:
    config.kubernetes.io/local-config: \"true\"
params:
  namespace: prod
source: |
  ns = ctx.resource_list[\"functionConfig\"][\"params\"][\"namespace\"]
  for r in ctx.resource_list[\"items\"]:
    if r[\"kind\"] not in [\"StarlarkRun\", \"Kptfile\"]:
      r[\"metadata\"][\"namespace\"] = ns
";

fn resource_list(function_config: &str) -> String {
    let items: String = APP
        .split("---\n")
        .map(|doc| format!("- {}", doc.trim_end().replace('\n', "\n  ")) + "\n")
        .collect();
    let config: String = function_config
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{items}functionConfig:\n{config}"
    )
}

fn starlark_run(source: &str) -> String {
    let source: String = source.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: prog\nsource: |\n{source}"
    )
}

#[test]
fn fn_starlark_edits_only_what_the_program_changed() {
    let input = resource_list(SET_NAMESPACE);
    let stdout = succeeding_run(&input);
    let expected = input
        .replace(
            "      tier: 'front'\n",
            "      tier: 'front'\n    namespace: prod\n",
        )
        .replace("    name: cfg\n", "    name: cfg\n    namespace: prod\n");
    assert_eq!(stdout, expected);
}

#[test]
fn fn_starlark_reports_a_failing_program_with_its_line_and_exit_1() {
    let input = resource_list(&starlark_run(
        "for r in ctx.resource_list[\"items\"]:\n  if r[\"kind\"] == \"ConfigMap\":\n    fail(\"no ConfigMaps here\")\n",
    ));
    let output = run_cli(&["fn", "starlark"], &[], input.as_bytes());
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.ends_with(
            "results:\n- message: 'prog:3:5: fail: no ConfigMaps here'\n  severity: error\n"
        ),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error: function failure"), "{stderr}");
}

#[test]
fn fn_starlark_print_reaches_stderr() {
    let input = resource_list(&starlark_run(
        "print(len(ctx.resource_list[\"items\"]), \"items\")\n",
    ));
    let output = run_cli(&["fn", "starlark"], &[], input.as_bytes());
    assert!(output.status.success());
    assert_eq!(String::from_utf8(output.stdout).unwrap(), input);
    assert!(String::from_utf8_lossy(&output.stderr).contains("2 items\n"));
}

#[test]
fn kpt_render_runs_a_starlark_exec_step_like_the_catalog_image() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), APP);
    std::fs::write(package.join("fn-config.yaml"), SET_NAMESPACE).unwrap();
    std::fs::write(
        package.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  mutators:\n  - exec: \"{}\"\n    configPath: fn-config.yaml\n",
            fn_command("starlark")
        ),
    )
    .unwrap();
    let output = kpt(&["fn", "render", package.to_str().unwrap(), "--allow-exec"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The catalog image adds the namespace after the existing metadata keys and changes
    // nothing else (its test `map-key-inline-comment`, example `starlark-set-namespace`).
    assert_eq!(
        std::fs::read_to_string(package.join("app.yaml")).unwrap(),
        APP.replace(
            "    tier: 'front'\n",
            "    tier: 'front'\n  namespace: prod\n"
        )
        .replace("  name: cfg\n", "  name: cfg\n  namespace: prod\n"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(package.join("fn-config.yaml")).unwrap(),
        SET_NAMESPACE
    );
}

#[test]
fn kpt_eval_takes_the_configmap_form_from_the_command_line() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), APP);
    let source = "for r in ctx.resource_list[\"items\"]:\n  if r[\"kind\"] == \"Deployment\":\n    r[\"spec\"][\"replicas\"] = int(ctx.resource_list[\"functionConfig\"][\"data\"][\"replicas\"])\n    r[\"spec\"][\"template\"][\"spec\"][\"containers\"].append({\"name\": \"log\", \"image\": \"fluentd:1\"})\n";
    let output = kpt_eval_exec(
        &package,
        "starlark",
        &[&format!("source={source}"), "replicas=5"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // A new container comes with its keys sorted, as the catalog's Go encoder writes them.
    assert_eq!(
        std::fs::read_to_string(package.join("app.yaml")).unwrap(),
        APP.replace("  replicas: 1\n", "  replicas: 5\n").replace(
            "        image: nginx:1.25 # pinned\n",
            "        image: nginx:1.25 # pinned\n      - image: fluentd:1\n        name: log\n"
        ),
        "{stderr}"
    );
}

/// The catalog's documented use of the schema (its starlark README and kpt's own test
/// `add_annotation_from_open_api`): a definition's description read from `ctx.open_api`.
#[test]
fn kpt_eval_reads_the_kubernetes_schema_from_ctx_open_api() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), APP);
    let source = "d = ctx.open_api[\"definitions\"][\"io.k8s.api.apps.v1.Deployment\"]\nfor r in ctx.resource_list[\"items\"]:\n  if r[\"kind\"] == \"Deployment\":\n    r[\"metadata\"].setdefault(\"annotations\", {})[\"about\"] = d[\"description\"]\n";
    let output = kpt_eval_exec(&package, "starlark", &[&format!("source={source}")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let app = std::fs::read_to_string(package.join("app.yaml")).unwrap();
    assert!(
        app.contains("about: Deployment enables declarative updates for Pods and ReplicaSets."),
        "{app}\n{stderr}"
    );
}

#[test]
fn kpt_render_stops_on_a_failing_validator_and_shows_the_message() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), APP);
    std::fs::write(
        package.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  validators:\n  - exec: \"{}\"\n    configMap:\n      source: |\n        for r in ctx.resource_list[\"items\"]:\n          if r[\"kind\"] == \"ConfigMap\" and \"key\" in r.get(\"data\", {{}}):\n            fail(\"ConfigMap \" + r[\"metadata\"][\"name\"] + \" holds a key\")\n",
            fn_command("starlark")
        ),
    )
    .unwrap();
    let output = kpt(&["fn", "render", package.to_str().unwrap(), "--allow-exec"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("fail: ConfigMap cfg holds a key"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(package.join("app.yaml")).unwrap(),
        APP
    );
}

/// Served, the program runs in a worker process, which reads the schema on its own.
#[tokio::test(flavor = "multi_thread")]
async fn grpc_programs_read_ctx_open_api_in_their_worker() {
    let server = Server::start("", &[]);
    let input = resource_list(&starlark_run(
        "d = ctx.open_api[\"definitions\"][\"io.k8s.api.apps.v1.DeploymentSpec\"]\nctx.resource_list[\"items\"][1][\"data\"][\"replicas\"] = d[\"properties\"][\"replicas\"][\"format\"]\n",
    ));
    let (response, evaluator) = server
        .call("gcr.io/kpt-fn/starlark:v0.5", input.as_bytes())
        .await
        .expect("the program runs");
    assert_eq!(evaluator, "starlark");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("    replicas: int32\n"), "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_runs_catalog_images_and_survives_runaway_programs() {
    let server = Server::start("", &[]);
    let input = resource_list(SET_NAMESPACE);
    let (response, evaluator) = server
        .call("gcr.io/kpt-fn/starlark:v0.5", input.as_bytes())
        .await
        .expect("the starlark plugin serves the catalog image");
    assert_eq!(evaluator, "starlark");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(
        output.contains("    name: cfg\n    namespace: prod\n"),
        "{output}"
    );

    // Each runaway ends with an error naming what ran out; the next call is served.
    for (source, expected) in [
        ("for i in range(1000000000):\n  pass\n", "tick"),
        ("def f(n):\n  return f(n + 1)\nf(0)\n", "stack overflow"),
        ("s = \"x\"\nfor i in range(64):\n  s = s + s\n", "heap"),
        // One expression asking for a petabyte: refused before it is allocated.
        (
            "s = (\"x\" * 1048576) * 1073741824\n",
            "prog:1:6: repeating a string would make 1125899906842624 bytes",
        ),
        // Text doubling with each level of nesting, and formatting a large shared string many
        // times: refused before the text is built.
        (
            "l = [\"x\"]\nfor i in range(64):\n  l = [l, l]\nprint(str(l))\n",
            "prog:4:7: `str()` of this value would make more than",
        ),
        (
            "s = \"x\" * 1048576\nt = \"%s\" % ([s] * 1000,)\n",
            "prog:2:5: formatting a string with `%` would make more than",
        ),
        // String methods squaring a string, and items sharing one list 2^40 times.
        (
            "s = \"x\" * 1048576\nt = s.replace(\"\", s)\n",
            "prog:2:5: `replace` would make 1099513724928 bytes",
        ),
        (
            "l = [1]\nfor i in range(40):\n  l = [l, l]\nctx.resource_list[\"items\"][0][\"x\"] = l\n",
            "ctx.resource_list would be written as more than",
        ),
    ] {
        let input = resource_list(&starlark_run(source));
        let started = Instant::now();
        let status = server
            .call(
                "ghcr.io/kptdev/krm-functions-catalog/starlark:v0.5.1",
                input.as_bytes(),
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        assert!(
            status.message().to_lowercase().contains(expected),
            "{source}: {}",
            status.message()
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{source}");
        server
            .call("starlark", resource_list(SET_NAMESPACE).as_bytes())
            .await
            .expect("still serving");
    }

    // The caller's deadline stops a long program at once.
    let endless = resource_list(&starlark_run(
        "for i in range(1000000000):\n  x = [i] * 10\n",
    ));
    let started = Instant::now();
    let status = call_with_remote_deadline(
        &server.endpoint(),
        EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: endless.into_bytes(),
            image: "starlark".into(),
        },
        "300m",
    )
    .await
    .unwrap_err();
    assert_deadline_answer(&status);
    assert!(started.elapsed() < Duration::from_secs(3));
    server
        .call("starlark", resource_list(SET_NAMESPACE).as_bytes())
        .await
        .expect("still serving after the deadline");
}

/// A ConfigMap carrying a zip archive (`conf/`, `conf/app.properties` deflated, `README`
/// stored) in `binaryData`, and another whose one entry declares 4026531840 bytes.
const ARCHIVES: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: archives
binaryData:
  conf.zip: UEsDBBQAAAAAAAAAIQAAAAAAAAAAAAAAAAAFAAAAY29uZi9QSwMEFAAAAAgApIR6XS1tr2AUAAAAEgAAABMAAABjb25mL2FwcC5wcm9wZXJ0aWVzS87PyS+yTcopTeUqzqxKtTXmAgBQSwMEFAAAAAAApIR6XSAwOjYGAAAABgAAAAYAAABSRUFETUVoZWxsbwpQSwECFAMUAAAAAAAAACEAAAAAAAAAAAAAAAAABQAAAAAAAAAAAAAAgAEAAAAAY29uZi9QSwECFAMUAAAACACkhHpdLW2vYBQAAAASAAAAEwAAAAAAAAAAAAAAgAEjAAAAY29uZi9hcHAucHJvcGVydGllc1BLAQIUAxQAAAAAAKSEel0gMDo2BgAAAAYAAAAGAAAAAAAAAAAAAACAAWgAAABSRUFETUVQSwUGAAAAAAMAAwCoAAAAkgAAAAAA
  bomb.zip: UEsDBBQAAAAIAKSEel0D2jiaCwAAAAAAAPAIAAAAYm9tYi50eHRLTBwFo2AUDHcAAFBLAQIUAxQAAAAIAKSEel0D2jiaCwAAAAAAAPAIAAAAAAAAAAAAAACAAQAAAABib21iLnR4dFBLBQYAAAAAAQABADYAAAAxAAAAAAA=
";

fn with_archives(function_config: &str) -> String {
    resource_list(function_config).replacen(
        "functionConfig:\n",
        &format!(
            "- {}\nfunctionConfig:\n",
            ARCHIVES.trim_end().replace('\n', "\n  ")
        ),
        1,
    )
}

/// The message of the one error result `krm-runner fn starlark` gives for `source`, which must
/// fail with exit status 1.
/// `krm-runner fn starlark` over `input`, which must succeed; its stdout.
fn succeeding_run(input: &str) -> String {
    let output = run_cli(&["fn", "starlark"], &[], input.as_bytes());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn error_message(input: &str) -> String {
    let output = run_cli(&["fn", "starlark"], &[], input.as_bytes());
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written: yaml_serde::Value = yaml_serde::from_slice(&output.stdout).unwrap();
    written["results"][0]["message"]
        .as_str()
        .expect("an error result")
        .to_owned()
}

#[test]
fn fn_starlark_reads_and_writes_csv_with_starlibs_library() {
    let input = resource_list(&starlark_run(
        "load('encoding/csv.star', 'csv')\nfor r in ctx.resource_list[\"items\"]:\n  if r[\"kind\"] == \"ConfigMap\":\n    rows = csv.read_all(\"name;port\\n# skipped\\nweb;80\\napi;\\\"8080\\\"\\n\", comma=\";\", comment=\"#\", skip=1)\n    r[\"data\"][\"ports\"] = csv.write_all([[n, int(p) + 1] for n, p in rows])\n",
    ));
    let stdout = succeeding_run(&input);
    assert_eq!(
        stdout,
        input.replace(
            "    key: \"value\"\n",
            "    key: \"value\"\n    ports: \"web,81\\napi,8081\\n\"\n"
        )
    );
    let message = error_message(&resource_list(&starlark_run(
        "load('encoding/csv.star', 'csv')\nrows = csv.read_all('a,b\\nc\\n')\n",
    )));
    assert_eq!(
        message,
        "prog:2:8: csv.read_all: record on line 2: wrong number of fields"
    );
}

#[test]
fn fn_starlark_reads_a_zip_archive_from_binary_data_and_refuses_a_bomb() {
    let source = "load('zipfile.star', 'ZipFile')\nload('encoding/base64.star', 'base64')\nfor r in ctx.resource_list[\"items\"]:\n  if r[\"metadata\"][\"name\"] == \"archives\":\n    z = ZipFile(base64.decode(r[\"binaryData\"][\"conf.zip\"]))\n    r[\"data\"] = {\"names\": \",\".join(z.namelist()), \"app\": z.open(\"conf/app.properties\").read()}\n";
    let input = with_archives(&starlark_run(source));
    let stdout = succeeding_run(&input);
    assert!(
        stdout.contains(
            "  data:\n    app: \"color=blue\\nsize=3\\n\"\n    names: conf/,conf/app.properties,README\n"
        ),
        "{stdout}"
    );
    let bomb = source
        .replace("conf.zip", "bomb.zip")
        .replace("conf/app.properties", "bomb.txt");
    let message = error_message(&with_archives(&starlark_run(&bomb)));
    assert!(
        message.starts_with("prog:6:")
            && message.contains(
                ": `read` of \"bomb.txt\" (11 bytes compressed) would make 4026531840 bytes, more than the "
            ),
        "{message}"
    );
}

#[test]
fn fn_starlark_explains_while_and_the_refused_libraries() {
    let message = error_message(&resource_list(&starlark_run(
        "n = 0\nwhile n < 3:\n  n = n + 1\n",
    )));
    assert!(
        message.starts_with(
            "prog:2:1: `while` loops are not supported: krm-runner's Starlark interpreter (starlark-rust) has no `while` statement"
        ),
        "{message}"
    );
    let message = error_message(&resource_list(&starlark_run(
        "load('xlsx.star', 'xlsx')\nf = xlsx.get_url(\"https://example.com/book.xlsx\")\n",
    )));
    assert_eq!(
        message,
        "prog:2:5: xlsx.get_url: the xlsx.star library is not available: its one function, get_url, downloads the workbook and network access is not allowed"
    );
}

#[test]
fn fn_starlark_queries_html_with_starlibs_html_and_bsoup() {
    let source = "load('html.star', 'html')\nload('bsoup.star', 'bsoup')\npage = '<html><body><div id=\"images\"><img src=\"nginx:1.27\" class=\"app main\"><img src=\"redis:7\"></div></body></html>'\nimages = html(page).find('#images img')\nsoup = bsoup.parseHtml(page)\nfor r in ctx.resource_list[\"items\"]:\n  if r[\"kind\"] == \"Deployment\":\n    r[\"spec\"][\"template\"][\"spec\"][\"containers\"][0][\"image\"] = images.first().attr(\"src\")\n  if r[\"kind\"] == \"ConfigMap\":\n    r[\"data\"][\"cache\"] = soup.find_all(\"img\")[1].attrs()[\"src\"]\n    r[\"data\"][\"main\"] = str(soup.find(\"\", {\"class\": \"main\"}))\n";
    let input = resource_list(&starlark_run(source));
    let stdout = succeeding_run(&input);
    assert_eq!(
        stdout,
        input
            .replace(
                "image: nginx:1.25 # pinned\n",
                "image: nginx:1.27 # pinned\n"
            )
            .replace(
                "    key: \"value\"\n",
                "    key: \"value\"\n    cache: redis:7\n    main: <img src=\"nginx:1.27\" class=\"app main\">\n"
            )
    );
    let message = error_message(&resource_list(&starlark_run(
        "load('html.star', 'html')\ndoc = html('<div>' * 1000)\n",
    )));
    assert_eq!(
        message,
        "prog:2:7: html: the document nests its nodes 1003 deep, more than the 512 levels krm-runner reads (a selector's cost grows with the depth)"
    );
}

#[test]
fn fn_starlark_places_geojson_features_with_starlibs_geo() {
    let source = r#"load('geo.star', 'geo')
region = geo.Polygon([[[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]]])
geoms, props = geo.parseGeoJSON('{"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {"name": "in"}, "geometry": {"type": "Point", "coordinates": [5, 5]}}, {"type": "Feature", "properties": {"name": "out"}, "geometry": {"type": "Point", "coordinates": [15, 5]}}]}')
for r in ctx.resource_list["items"]:
  if r["kind"] == "ConfigMap":
    r["data"]["inside"] = ",".join([props[i]["name"] for i in range(len(geoms)) if geo.within(geoms[i], region)])
    r["data"]["metres"] = str(geo.Point(0, 0).distanceGeodesic(geo.Point(1, 0)))
"#;
    let input = resource_list(&starlark_run(source));
    let stdout = succeeding_run(&input);
    assert_eq!(
        stdout,
        input.replace(
            "    key: \"value\"\n",
            "    key: \"value\"\n    inside: in\n    metres: \"111319.49079327357\"\n"
        )
    );
    let message = error_message(&resource_list(&starlark_run(
        "load('geo.star', 'geo')\nshape = geo.Polygon([[[0, 0], [0, 1], [1, 1]]])\n",
    )));
    assert_eq!(message, "prog:2:9: geo.Polygon: line 0 is not closed");
}
