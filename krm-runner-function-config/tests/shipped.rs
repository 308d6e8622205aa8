//! The FunctionConfigs krm-runner ships: `config/functions/` (read by the embedded default
//! configuration) loads without a problem, and `deploy/kubernetes/function-configs/` (mounted
//! into the runner's pod) holds the same files: kustomize reads no file outside its folder, so
//! the deployment keeps a copy.

use std::path::{Path, PathBuf};

use krm_runner_function_config::{RoutingTable, Sourced, load_paths};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn load(path: &str) -> Vec<Sourced> {
    let (objects, errors) = load_paths(&[repo(path)]);
    assert!(errors.is_empty(), "{path}: {errors:?}");
    objects
}

#[test]
fn shipped_function_configs_load_and_the_deployment_ships_the_same_files() {
    let files = load("config/functions");
    assert!(files.len() >= 10, "only {} FunctionConfigs", files.len());
    let (_, conflicts) = RoutingTable::build(
        files,
        "ghcr.io/kptdev/krm-functions-catalog/",
        Path::new("/"),
    );
    assert!(conflicts.is_empty(), "{conflicts:?}");
    let names = |dir: &str| {
        let mut names: Vec<_> = std::fs::read_dir(repo(dir))
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names("config/functions"),
        names("deploy/kubernetes/function-configs")
    );
    for name in names("config/functions") {
        let read = |dir: &str| std::fs::read_to_string(repo(dir).join(&name)).unwrap();
        assert!(
            read("config/functions") == read("deploy/kubernetes/function-configs"),
            "deploy/kubernetes/function-configs/{} differs from config/functions/: copy it",
            name.to_string_lossy()
        );
    }
}
