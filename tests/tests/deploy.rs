//! One `kubectl apply -k deploy/kubernetes`, with the real kubectl, against a fresh Kubernetes API
//! stand-in; and the example overlay, whose runner configuration the runner itself reads.

use std::path::Path;
use std::process::{Command, Output};

use krm_kube_standin::StandIn;
use krm_runner_tests::{have_tool, run_cli, scratch};

use krm_runner_tests::repo_root as repo;

fn kubectl(kubeconfig: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new("kubectl");
    if let Some(kubeconfig) = kubeconfig {
        command.arg("--kubeconfig").arg(kubeconfig);
    }
    command.args(args).output().expect("kubectl")
}

fn succeeded(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The documents `kubectl kustomize DIR` renders.
fn rendered(dir: &Path) -> Vec<yaml_serde::Value> {
    let text = succeeded(
        &kubectl(None, &["kustomize", dir.to_str().unwrap()]),
        "kubectl kustomize",
    );
    text.split("\n---\n")
        .map(|document| yaml_serde::from_str(document).expect("rendered YAML"))
        .collect()
}

fn find<'a>(documents: &'a [yaml_serde::Value], kind: &str, name: &str) -> &'a yaml_serde::Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The container's images and its WRAPPER_SERVER_IMAGE, of the runner Deployment.
fn runner_images(documents: &[yaml_serde::Value]) -> (String, String, String) {
    let deployment = find(documents, "Deployment", "function-runner");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let wrapper_env = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|env| env["name"] == "WRAPPER_SERVER_IMAGE")
        .expect("WRAPPER_SERVER_IMAGE")["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let template = find(documents, "PodTemplate", "base-pod-template");
    let init = template["template"]["spec"]["initContainers"][0]["image"]
        .as_str()
        .unwrap()
        .to_owned();
    (
        container["image"].as_str().unwrap().to_owned(),
        wrapper_env,
        init,
    )
}

#[test]
fn one_kubectl_apply_k_creates_everything_on_a_fresh_api_server() {
    if !have_tool("kubectl") {
        return;
    }
    let dir = scratch();
    let standin = StandIn::start(&dir.path().join("standin")).expect("stand-in");
    let kubeconfig = Some(standin.kubeconfig.as_path());
    let base = repo().join("deploy/kubernetes");
    let output = kubectl(kubeconfig, &["apply", "-k", base.to_str().unwrap()]);
    succeeded(&output, "kubectl apply -k deploy/kubernetes");
    let applied = String::from_utf8_lossy(&output.stdout);

    // Every rendered object was applied by that one command, and each exists now.
    let documents = rendered(&base);
    assert!(documents.len() >= 10, "{}", documents.len());
    for document in &documents {
        let kind = document["kind"].as_str().unwrap();
        let name = document["metadata"]["name"].as_str().unwrap();
        let namespace = document["metadata"]["namespace"].as_str();
        let mut args = vec!["get", kind, name, "-o", "name"];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        succeeded(&kubectl(kubeconfig, &args), &format!("get {kind} {name}"));
        assert!(
            applied.contains(&format!("/{name} created")),
            "{kind} {name} not created by the apply: {applied}"
        );
    }

    // Applying again changes nothing, as on a real cluster.
    let again = succeeded(
        &kubectl(kubeconfig, &["apply", "-k", base.to_str().unwrap()]),
        "second apply",
    );
    assert!(
        again.lines().all(|line| line.ends_with(" unchanged")),
        "{again}"
    );

    // The images are named once: the default names, and WRAPPER_SERVER_IMAGE follows the
    // PodTemplate's init container.
    let (runner, wrapper_env, wrapper) = runner_images(&documents);
    assert_eq!(runner, "krm-runner:latest");
    assert_eq!(wrapper, "krm-wrapper-server:latest");
    assert_eq!(wrapper_env, wrapper);

    // The container is bounded in memory (the runner and its workers share it) and restarted
    // when its health service stops answering, asked as the readiness probe asks it.
    let container = &find(&documents, "Deployment", "function-runner")["spec"]["template"]["spec"]
        ["containers"][0];
    assert!(
        container["resources"]["limits"]["memory"]
            .as_str()
            .is_some(),
        "no memory limit: {container:?}"
    );
    let command = |probe: &str| container[probe]["exec"]["command"].clone();
    assert!(command("livenessProbe").is_sequence(), "{container:?}");
    assert_eq!(command("livenessProbe"), command("readinessProbe"));

    // The runner, given the folder its Deployment mounts, reads the shipped FunctionConfigs
    // from it and routes by them, next to the cluster's (the stand-in's, none yet).
    let etc = dir.path().join("etc");
    let config_file = mount_config_volume(&documents, &etc);
    let kubeconfig = standin.kubeconfig.to_str().unwrap();
    let telemetry = telemetry_env(&documents);
    let mut env = vec![
        ("KUBECONFIG", kubeconfig),
        ("WRAPPER_SERVER_IMAGE", wrapper.as_str()),
    ];
    env.extend(telemetry.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let config_file = config_file.to_str().unwrap();
    let check = run_cli(
        &["--config-file", config_file, "config", "check"],
        &env,
        b"",
    );
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let resolve = run_cli(
        &[
            "--config-file",
            config_file,
            "functions",
            "--resolve",
            "gcr.io/kpt-fn/set-namespace:v0.4.1",
        ],
        &env,
        b"",
    );
    let explained = String::from_utf8_lossy(&resolve.stdout);
    assert!(
        resolve.status.success(),
        "{explained}{}",
        String::from_utf8_lossy(&resolve.stderr)
    );
    assert!(
        explained.contains("functions/builtins.yaml") && explained.contains("builtin"),
        "{explained}"
    );
}

/// The Deployment's `OTEL_*` variables (checked by `config check` with the rest), after checking
/// that the metrics port they name is the container's, the Service's and the scrape
/// annotation's.
fn telemetry_env(documents: &[yaml_serde::Value]) -> Vec<(String, String)> {
    let pod = &find(documents, "Deployment", "function-runner")["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let env: Vec<(String, String)> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|entry| {
            let name = entry["name"].as_str()?;
            let value = entry["value"].as_str()?;
            name.starts_with("OTEL_")
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect();
    let port = env
        .iter()
        .find(|(name, _)| name == "OTEL_EXPORTER_PROMETHEUS_PORT")
        .map(|(_, port)| port.clone())
        .expect("OTEL_EXPORTER_PROMETHEUS_PORT in the Deployment");
    let named = |ports: &yaml_serde::Value, key: &str| {
        ports
            .as_sequence()
            .unwrap()
            .iter()
            .find(|port| port["name"] == "metrics")
            .map(|port| port[key].as_u64().unwrap().to_string())
    };
    assert_eq!(
        named(&container["ports"], "containerPort"),
        Some(port.clone())
    );
    let service = find(documents, "Service", "function-runner");
    assert_eq!(named(&service["spec"]["ports"], "port"), Some(port.clone()));
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/port"].as_str(),
        Some(port.as_str())
    );
    env
}

/// Lays out the runner Deployment's `config` volume as the kubelet would (each projected
/// ConfigMap's keys, or the listed items at their paths) under `etc`, points the config file's
/// `/etc/krm-runner/` paths there, and returns the config file.
fn mount_config_volume(documents: &[yaml_serde::Value], etc: &Path) -> std::path::PathBuf {
    let deployment = find(documents, "Deployment", "function-runner");
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == "config")
        .expect("config volume");
    for source in volume["projected"]["sources"].as_sequence().unwrap() {
        let name = source["configMap"]["name"].as_str().unwrap();
        let data = &find(documents, "ConfigMap", name)["data"];
        let files: Vec<(String, String)> = match source["configMap"]["items"].as_sequence() {
            Some(items) => items
                .iter()
                .map(|item| {
                    let key = item["key"].as_str().unwrap();
                    (item["path"].as_str().unwrap().to_owned(), key.to_owned())
                })
                .collect(),
            None => data
                .as_mapping()
                .unwrap()
                .keys()
                .map(|key| {
                    (
                        key.as_str().unwrap().to_owned(),
                        key.as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
        };
        for (path, key) in files {
            let text = data[key.as_str()].as_str().unwrap();
            let path = etc.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }
    let config_file = etc.join("config.yaml");
    let config = std::fs::read_to_string(&config_file).expect("config.yaml in the volume");
    let relocated = config.replace("/etc/krm-runner/", &format!("{}/", etc.display()));
    std::fs::write(&config_file, relocated).unwrap();
    config_file
}

#[test]
fn the_example_overlay_moves_registry_namespace_resources_and_chain() {
    if !have_tool("kubectl") {
        return;
    }
    let documents = rendered(&repo().join("deploy/overlays/example"));
    let (runner, wrapper_env, wrapper) = runner_images(&documents);
    assert_eq!(runner, "registry.example.com/krm/krm-runner:v0.1.0");
    assert_eq!(
        wrapper,
        "registry.example.com/krm/krm-wrapper-server:v0.1.0"
    );
    assert_eq!(wrapper_env, wrapper);
    for document in &documents {
        let namespace = &document["metadata"]["namespace"];
        assert!(
            namespace.is_null() || namespace == "krm",
            "{:?} in {namespace:?}",
            document["metadata"]["name"]
        );
    }
    let namespaces: Vec<_> = documents
        .iter()
        .filter(|d| d["kind"] == "Namespace")
        .map(|d| d["metadata"]["name"].clone())
        .collect();
    assert_eq!(namespaces, ["krm"]);
    let binding = find(&documents, "RoleBinding", "porch-function-executor");
    assert_eq!(binding["subjects"][0]["namespace"], "krm");

    // The runner reads what the overlay gives it: the ConfigMap's file, the container's
    // arguments and its environment, as in the pod.
    let deployment = find(&documents, "Deployment", "function-runner");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["resources"]["requests"]["memory"], "256Mi",
        "{container:?}"
    );
    let dir = scratch();
    let config_file = mount_config_volume(&documents, &dir.path().join("etc"));
    let mut args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|arg| {
            arg.as_str()
                .unwrap()
                .replace("/etc/krm-runner/config.yaml", config_file.to_str().unwrap())
        })
        .collect();
    assert_eq!(args.pop().as_deref(), Some("serve"));
    args.push("config".into());
    let env: Vec<(String, String)> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|env| {
            Some((
                env["name"].as_str()?.to_owned(),
                env["value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run_cli(&args, &env, b"");
    let merged = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{merged}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let merged: yaml_serde::Value =
        yaml_serde::from_str(merged.split("# where each value").next().unwrap()).unwrap();
    assert_eq!(
        merged["evaluators"]["default"]["config"]["chain"],
        yaml_serde::from_str::<yaml_serde::Value>("[builtin, confighub, starlark, pod]").unwrap()
    );
    assert_eq!(
        merged["evaluators"]["pod"]["config"]["pod_namespace"],
        "krm"
    );
    assert_eq!(merged["function_configs"]["cluster"]["namespace"], "krm");
}
