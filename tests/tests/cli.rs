//! The `krm-runner` command line: start-up errors, configuration layers, `eval`, `plugins`.

use krm_runner_tests::{previous_abi_plugin, run_cli, scratch};

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn write_config(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn missing_plugin_exits_2_naming_it() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  default:\n    plugin: no-such-plugin\n    config: {chain: [exec]}\n",
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("evaluators.default.plugin: no-such-plugin not found in plugin_dirs ["),
        "{text}"
    );
}

#[test]
fn every_config_problem_is_reported_at_once() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "listen: nowhere\nserve: missing\nevaluatorz: {}\nevaluators:\n  exec:\n    plugin: exec\n    config: {functionz: []}\n",
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(text.contains("evaluatorz"), "typo named: {text}");
    let output = run_cli(
        &[
            "--config-file",
            &write_config(dir.path(), "listen: nowhere\nserve: missing\n"),
            "plugins",
        ],
        &[],
        b"",
    );
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(text.contains("listen: \"nowhere\""), "{text}");
    assert!(
        text.contains("serve: no evaluator instance named \"missing\""),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2, "one line per problem: {text}");
}

#[test]
fn plugin_config_errors_name_the_field() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  exec:\n    plugin: exec\n    config:\n      functions:\n        - {image: a, path: /bin/cat, colour: red}\n",
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(
        text.contains("evaluators.exec.config: functions[0]"),
        "{text}"
    );
    assert!(text.contains("colour"), "{text}");
}

#[test]
fn plugin_that_panics_while_building_is_a_start_up_error() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  kit:\n    plugin: testkit\n    config: {panic_on_build: true}\n  default:\n    plugin: multi\n    config: {chain: [kit]}\n",
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("evaluators.kit.config: plugin testkit panicked while building"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn delegation_loops_are_refused() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  a:\n    plugin: multi\n    config: {chain: [b]}\n  b:\n    plugin: multi\n    config: {chain: [a]}\n  default:\n    plugin: multi\n    config: {chain: [a]}\n",
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("delegation loops: a -> b -> a"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plugin_built_against_the_previous_abi_is_refused_in_one_paragraph() {
    let library = previous_abi_plugin();
    let dir = scratch();
    let config = write_config(
        dir.path(),
        &format!(
            "evaluators:\n  old:\n    plugin: {}\n  default:\n    plugin: multi\n    config: {{chain: [old, exec]}}\n",
            library.display()
        ),
    );
    let output = run_cli(&["--config-file", &config, "plugins"], &[], b"");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert_eq!(
        text.lines().count(),
        1,
        "one paragraph, not a layout report: {text}"
    );
    assert!(
        text.contains(&library.display().to_string()),
        "names the file: {text}"
    );
    assert!(text.contains("plugin testkit"), "names the plugin: {text}");
    assert!(
        text.contains("plugin ABI 1") && text.contains("plugin ABI 2"),
        "names both versions: {text}"
    );
}

#[test]
fn config_layers_file_then_env_then_flags() {
    let dir = scratch();
    let config = write_config(dir.path(), "max_message_bytes: 1000000\n");
    let value = |env: &[(&str, &str)], flags: &[&str]| {
        let mut args = vec!["--config-file", config.as_str()];
        args.extend_from_slice(flags);
        args.push("config");
        let output = run_cli(&args, env, b"");
        assert!(output.status.success(), "{}", stderr(&output));
        let text = stdout(&output);
        let line = text
            .lines()
            .find(|l| l.starts_with("max_message_bytes:"))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned();
        let source = text
            .lines()
            .find(|l| l.starts_with("# max_message_bytes ="))
            .unwrap_or_default()
            .to_owned();
        (line, source)
    };
    let (line, source) = value(&[], &[]);
    assert_eq!(line, "max_message_bytes: 1000000");
    assert!(source.contains(&config), "{source}");
    let env = [("KRM_RUNNER_MAX_MESSAGE_BYTES", "2000000")];
    let (line, source) = value(&env, &[]);
    assert_eq!(line, "max_message_bytes: 2000000");
    assert!(source.contains("KRM_RUNNER_"), "{source}");
    let (line, source) = value(&env, &["--max-request-body-size", "3000000"]);
    assert_eq!(line, "max_message_bytes: 3000000");
    assert!(source.contains("command line"), "{source}");
    // Nested keys through the environment.
    let (line, _) = {
        let output = run_cli(
            &["--config-file", &config, "config"],
            &[(
                "KRM_RUNNER_EVALUATORS__DEFAULT__CONFIG__CHAIN",
                "[exec, exec2]",
            )],
            b"",
        );
        (stdout(&output), ())
    };
    assert!(line.contains("- exec2"), "{line}");
}

#[test]
fn porch_flags_map_onto_the_config() {
    let dir = scratch();
    let config = write_config(dir.path(), "");
    let output = run_cli(
        &[
            "--config-file",
            &config,
            "-port",
            "9999",
            "--functions",
            "/opt/fns",
            "--log-level",
            "4",
            "--pod-ttl",
            "10m",
            "config",
        ],
        &[],
        b"",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("listen: 0.0.0.0:9999"), "{text}");
    assert!(text.contains("functions_dir: /opt/fns"), "{text}");
    assert!(
        text.contains("log_level: '4'") || text.contains("log_level: \"4\""),
        "{text}"
    );
    assert!(
        stderr(&output).contains("--pod-ttl ignored"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plugins_lists_instances_in_chain_order() {
    let output = run_cli(&["plugins"], &[], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..3], ["default", "0", "multi"], "{text}");
    assert_eq!(rows[1][..3], ["builtin", "1", "builtin"], "{text}");
    assert_eq!(rows[2][..3], ["exec", "2", "exec"], "{text}");
    assert!(
        rows[2].last().unwrap().ends_with("libkrm_plugin_exec.so"),
        "{text}"
    );
}

#[test]
fn eval_runs_the_sample_function_on_plain_documents() {
    let input = b"# a comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n";
    let output = run_cli(&["eval", "--image", "krm-runner/identity"], &[], input);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n"),
        "{text}"
    );
    assert!(
        text.contains("# a comment") && text.contains("name: b"),
        "{text}"
    );
}

#[test]
fn eval_builds_a_configmap_function_config_from_pairs() {
    let input = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";
    let output = run_cli(
        &[
            "eval",
            "--image",
            "krm-runner/identity",
            "--",
            "namespace=prod",
        ],
        &[],
        input,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("functionConfig:") && text.contains("namespace: prod"),
        "{text}"
    );
}

#[test]
fn eval_rejects_malformed_input_clearly() {
    for (input, expected) in [
        (
            &b"apiVersion: v1\nkind: [unclosed\n"[..],
            "input document 1: not valid YAML",
        ),
        (
            b"- just\n- a list\n",
            "input document 1: not a YAML mapping",
        ),
        (
            b"apiVersion: v1\nkind: A\n---\nfoo: bar\n",
            "input document 2: not a KRM resource (no apiVersion)",
        ),
    ] {
        let output = run_cli(&["eval", "--image", "krm-runner/identity"], &[], input);
        assert!(!output.status.success());
        assert!(stderr(&output).contains(expected), "{}", stderr(&output));
    }
}

#[test]
fn eval_of_an_unknown_image_fails() {
    let output = run_cli(
        &["eval", "--image", "nobody/knows:v1"],
        &[],
        b"apiVersion: v1\nkind: A\n",
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("function \"nobody/knows:v1\" not found"),
        "{}",
        stderr(&output)
    );
}
