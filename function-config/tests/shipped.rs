//! The FunctionConfigs krm-runner ships: `config/functions/` (read by the embedded default
//! configuration) and `deploy/kubernetes/function-configs/` (applied to a cluster) load without
//! a problem and say the same thing.

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
fn shipped_function_configs_load_and_agree() {
    let files = load("config/functions");
    let cluster = load("deploy/kubernetes/function-configs");
    assert!(files.len() >= 10, "only {} FunctionConfigs", files.len());
    let (_, conflicts) = RoutingTable::build(
        files.clone(),
        "ghcr.io/kptdev/krm-functions-catalog/",
        Path::new("/"),
    );
    assert!(conflicts.is_empty(), "{conflicts:?}");
    assert_eq!(files.len(), cluster.len());
    for (file, applied) in files.iter().zip(&cluster) {
        let (file, applied) = (file.object(), applied.object());
        assert_eq!(file.metadata.name, applied.metadata.name);
        assert_eq!(
            applied.metadata.namespace.as_deref(),
            Some("porch-fn-system")
        );
        assert_eq!(file.spec, applied.spec, "{:?}", file.metadata.name);
    }
}
