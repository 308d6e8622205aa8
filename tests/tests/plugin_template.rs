//! The standalone plugin template (`plugin-template/`), built outside the workspace the way a
//! platform team builds its plugin, loaded by the real runner from its file.

use krm_runner_tests::{Server, repo_root, run_cli, scratch, template_plugin};

const DEPLOYMENT: &[u8] = b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
";

fn config(library: &std::path::Path, stamp_config: &str) -> String {
    format!(
        "evaluators:\n  stamp:\n    plugin: {}\n    config: {stamp_config}\n  default:\n    plugin: multi\n    config: {{chain: [stamp, builtin, exec]}}\n",
        library.display()
    )
}

const STAMP: &str = "{images: [example.com/stamp:v1], annotations: {team: platform}}";

/// `krm-runner --config-file F ARGS` with the template (built to `panic_strategy`) configured
/// as `stamp_config`.
fn run_with(panic_strategy: &str, stamp_config: &str, args: &[&str]) -> std::process::Output {
    let dir = scratch();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        config(&template_plugin(panic_strategy), stamp_config),
    )
    .unwrap();
    let mut all = vec!["--config-file", file.to_str().unwrap()];
    all.extend_from_slice(args);
    run_cli(&all, &[], b"")
}

#[test]
fn the_runner_loads_the_template_and_serves_its_image_over_grpc() {
    let server = Server::start(&config(&template_plugin("unwind"), STAMP), &[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (response, evaluator) = runtime
        .block_on(server.call("example.com/stamp:v1", DEPLOYMENT))
        .unwrap();
    assert_eq!(evaluator, "stamp");
    let text = String::from_utf8(response.resource_list).unwrap();
    assert!(text.contains("team: platform"), "{text}");
    assert_eq!(response.log, b"stamped 1 annotation(s)\n");

    // Declined images fall through the chain to the builtin.
    let (_, evaluator) = runtime
        .block_on(server.call(
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1",
            b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {namespace: x}}\n",
        ))
        .unwrap();
    assert_eq!(evaluator, "builtin");
}

/// The template README's configuration, with its plugin pointed at the built template, is one
/// the runner accepts over the embedded default: its chain names only instances that exist.
#[test]
fn the_template_readmes_configuration_passes_config_check() {
    let readme = std::fs::read_to_string(repo_root().join("plugin-template/README.md")).unwrap();
    let yaml = readme
        .split("```yaml\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("a yaml block in plugin-template/README.md");
    // The runner's --plugin-dir (given by `run_cli`) replaces `plugin_dirs`: name the file.
    let plugin = "plugin: stamp\n";
    assert!(yaml.contains(plugin), "{yaml}");
    let library = template_plugin("unwind");
    let dir = scratch();
    let file = dir.path().join("runner.yaml");
    std::fs::write(
        &file,
        yaml.replace(plugin, &format!("plugin: {}\n", library.display())),
    )
    .unwrap();
    let output = run_cli(
        &["--config-file", file.to_str().unwrap(), "config", "check"],
        &[],
        b"",
    );
    assert!(
        output.status.success(),
        "{yaml}{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_template_is_listed_with_its_function_and_example() {
    let output = run_with("unwind", STAMP, &["functions", "stamp"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("adds team: platform"), "{text}");
}

#[test]
fn every_problem_in_the_templates_config_is_reported_one_per_line() {
    let output = run_with(
        "unwind",
        "{images: ['', ' '], annotations: {team: x}}",
        &["plugins"],
    );
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stderr);
    for line in [
        "evaluators.stamp.config: images[0]: is empty",
        "evaluators.stamp.config: images[1]: is empty",
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().trim_start_matches("- ").contains(line)),
            "{line} in {text}"
        );
    }
}

#[test]
fn a_plugin_built_to_abort_on_panic_is_refused_naming_the_fix() {
    let output = run_with("abort", STAMP, &["plugins"]);
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("plugin stamp 0.1.0 was built with panic = \"abort\"")
            && text.contains("build it with panic = \"unwind\""),
        "{text}"
    );
}

#[test]
fn the_templates_config_keys_are_shown_from_its_schema() {
    // A config that does not start (the template's config is broken) still shows the schema.
    let output = run_with(
        "unwind",
        "{images: []}",
        &["plugins", "--config-schema", "stamp"],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.starts_with("plugin stamp 0.1.0 ("), "{text}");
    let key_line = |key: &str| {
        text.lines()
            .find(|line| line.trim_start().starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_owned()
    };
    assert!(key_line("images").contains("list of string"), "{text}");
    assert!(
        key_line("images").contains("(required) The images this instance answers"),
        "{text}"
    );
    assert!(key_line("annotations").contains("map of string"), "{text}");
    assert!(
        text.contains("example:\nevaluators:\n  stamp:\n    plugin: stamp\n    config:\n"),
        "{text}"
    );
}
