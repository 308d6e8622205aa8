//! The builtin functions as kpt users meet them: `krm-runner fn NAME` run by the real `kpt`
//! (1.0.0-beta.56 on these machines) as an exec function, and the builtins over gRPC.

use std::process::Command;

use krm_runner_proto::krmrunner::v1::GetFunctionRequest;
use krm_runner_proto::krmrunner::v1::ListFunctionsRequest;
use krm_runner_proto::krmrunner::v1::function_catalog_client::FunctionCatalogClient;
use krm_runner_tests::{
    Server, fn_command, have_tool, kpt, kpt_eval_exec, kpt_package, run_cli, runner_binary, scratch,
};
use tonic::Code;

const PACKAGE: &str = "# the web app
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # keep me
  namespace: old
  labels:
    tier: 'front'
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
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

#[test]
fn kpt_fn_eval_runs_set_namespace_keeping_comments() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), PACKAGE);
    let output = kpt_eval_exec(&package, "set-namespace", &["namespace=prod"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let written = std::fs::read_to_string(package.join("app.yaml")).unwrap();
    // Exactly the two namespaces change; every comment, quote and key order stays.
    assert_eq!(
        written,
        PACKAGE.replace("namespace: old", "namespace: prod"),
        "{stderr}"
    );
}

#[test]
fn kpt_render_runs_a_kptfile_exec_pipeline() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), PACKAGE);
    std::fs::write(
        package.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  mutators:\n  - exec: \"{}\"\n    configMap:\n      color: blue\n  - exec: \"{}\"\n    configMap:\n      namespace: staging\n",
            fn_command("set-labels"),
            fn_command("set-namespace")
        ),
    )
    .unwrap();
    let output = kpt(&["fn", "render", package.to_str().unwrap(), "--allow-exec"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let written = std::fs::read_to_string(package.join("app.yaml")).unwrap();
    assert!(written.contains("namespace: staging"), "{written}");
    assert!(written.contains("color: blue"), "{written}");
    assert!(
        written.contains("# the web app") && written.contains("name: web # keep me"),
        "{written}"
    );
    assert!(written.contains("image: nginx:1.25 # pinned"), "{written}");
    let kptfile = std::fs::read_to_string(package.join("Kptfile")).unwrap();
    assert!(
        !kptfile.contains("namespace: staging\n  name"),
        "the local-config Kptfile keeps its own namespace-less metadata"
    );
}

#[test]
fn kpt_reports_a_failing_builtin_and_writes_nothing() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = kpt_package(dir.path(), PACKAGE);
    // set-labels without a functionConfig fails (exit 1) in the catalog.
    let output = kpt_eval_exec(&package, "set-labels", &[]);
    assert!(!output.status.success());
    assert_eq!(
        std::fs::read_to_string(package.join("app.yaml")).unwrap(),
        PACKAGE
    );
}

#[test]
fn fn_with_an_unknown_name_fails_clearly() {
    let output = Command::new(runner_binary())
        .args(["fn", "no-such-function"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no evaluator implements a function named \"no-such-function\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("set-namespace"),
        "lists the known ones: {stderr}"
    );
}

/// An image no evaluator lists goes to the served chain, as a gRPC call for it would; each of
/// its evaluators then says why it does not serve the image.
#[test]
fn fn_with_an_unknown_image_says_why_each_evaluator_refused_it() {
    let output = run_cli(
        &["fn", "example.com/nothing:v1"],
        &[],
        b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("function \"example.com/nothing:v1\" not found"),
        "{stderr}"
    );
    assert!(
        stderr.contains("exec: no executable is mapped to this image"),
        "{stderr}"
    );
}

#[test]
fn functions_lists_signatures() {
    let output = Command::new(runner_binary())
        .args(["functions", "set-namespace"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("namespace (string, required)"), "{text}");
    assert!(
        text.contains("ghcr.io/kptdev/krm-functions-catalog/set-namespace:"),
        "{text}"
    );
    let output = Command::new(runner_binary())
        .arg("functions")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    for name in [
        "set-namespace",
        "set-labels",
        "set-annotations",
        "set-image",
        "apply-setters",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn builtins_answer_catalog_images_over_grpc_and_decline_others() {
    let server = Server::start("", &[]);
    let input = format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: fn}}\n  data: {{namespace: prod}}\n",
        PACKAGE
            .split("---\n")
            .map(|doc| format!("- {}", doc.trim_end().replace('\n', "\n  ")) + "\n")
            .collect::<String>()
    );
    let (response, evaluator) = server
        .call(
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1",
            input.as_bytes(),
        )
        .await
        .expect("builtin serves the catalog image");
    assert_eq!(evaluator, "builtin");
    assert!(
        String::from_utf8(response.resource_list)
            .unwrap()
            .contains("namespace: prod")
    );
    // A tag whose behaviour is not reproduced falls through to exec, which declines it too.
    let status = server
        .call(
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v9.9.9",
            input.as_bytes(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut catalog = FunctionCatalogClient::new(channel);
    let list = catalog
        .list_functions(ListFunctionsRequest {})
        .await
        .unwrap()
        .into_inner();
    let listed = |name: &str| {
        list.functions
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} is not listed"))
    };
    let set_namespace = listed("set-namespace");
    assert_eq!(set_namespace.evaluator, "builtin");
    // Listed on the first request: ConfigHub's typed functions, which their plugin builds on
    // first use, are there too.
    assert_eq!(listed("set-replicas").evaluator, "confighub");
    let parameter = set_namespace
        .parameters
        .iter()
        .find(|p| p.name == "namespace")
        .expect("parameter");
    assert!(parameter.required && parameter.r#type == "string");
    // Found by any image it answers to, not only by its short name.
    let set_labels = list
        .functions
        .iter()
        .find(|f| f.name == "set-labels")
        .expect("listed");
    let image = set_labels
        .images
        .iter()
        .find(|i| i.starts_with("gcr.io/kpt-fn/"))
        .expect("a gcr.io image");
    let one = catalog
        .get_function(GetFunctionRequest {
            name: image.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.name, "set-labels");
    let missing = catalog
        .get_function(GetFunctionRequest {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}
