//! The `krm-runner` command line: start-up errors, configuration layers, `eval`, `plugins`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use krm_runner_tests::{
    Server, build_dir, previous_abi_plugin, repo_root, run_cli, run_cli_within, run_with_input,
    scratch,
};

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
fn a_plugins_config_keys_are_shown_with_an_example_instance() {
    let output = run_cli(&["plugins", "--config-schema", "exec"], &[], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "config keys:\n",
        "  functions_dir ",
        "  functions[].image ",
        "  max_output_bytes ",
        "example:\nevaluators:\n  exec:\n    plugin: exec\n    config:\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    // Each key is a line: name, type, description.
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("inherit_env "))
        .unwrap_or_else(|| panic!("inherit_env in {text}"));
    assert!(line.contains("list of string"), "{line}");

    let unknown = run_cli(&["plugins", "--config-schema", "no-such-plugin"], &[], b"");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown)
            .contains("--config-schema no-such-plugin: no-such-plugin not found in plugin_dirs"),
        "{}",
        stderr(&unknown)
    );
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
        text.contains("plugin ABI 2") && text.contains("plugin ABI 3"),
        "names both versions: {text}"
    );
}

/// A plugin's layout check is remembered per file (see `krm_plugin_loader::LayoutChecks`): the
/// second load of the same file skips it, and a file rewritten in place (same path and inode)
/// is checked again. The debug log says which.
#[test]
fn a_layout_check_is_remembered_for_the_same_file_only() {
    let dir = scratch();
    let cache = dir.path().join("cache");
    let library = dir.path().join("libkrm_plugin_testkit.so");
    let built = build_dir().join("libkrm_plugin_testkit.so");
    std::fs::copy(&built, &library).unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "log_level: debug\nevaluators:\n  kit:\n    plugin: {}\n",
            library.display()
        ),
    );
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let layout_check = || {
        let output = run_cli(&["--config-file", &config, "plugins"], &env, b"");
        assert!(output.status.success(), "{}", stderr(&output));
        let log = stderr(&output);
        let loaded = log
            .lines()
            .find(|line| {
                line.contains("plugin loaded") && line.contains(&*library.to_string_lossy())
            })
            .unwrap_or_else(|| panic!("no debug line for {}: {log}", library.display()))
            .to_owned();
        ["remembered", "done"]
            .into_iter()
            .find(|how| loaded.contains(&format!("layout_check={how}")))
            .unwrap_or_else(|| panic!("{loaded}"))
    };
    assert_eq!(layout_check(), "done", "first load");
    assert_eq!(layout_check(), "remembered", "same file");
    let remembered = std::fs::read_dir(cache.join("krm-runner/checked-layouts"))
        .expect("markers are written under XDG_CACHE_HOME")
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .any(|marker| marker.contains(&format!("library {}\n", library.display())));
    assert!(remembered, "a marker names {}", library.display());

    // The same bytes written again: the file's change time moves, so it is checked again.
    std::fs::write(&library, std::fs::read(&built).unwrap()).unwrap();
    assert_eq!(layout_check(), "done", "rewritten in place");
    assert_eq!(layout_check(), "remembered", "rewritten file, second load");
}

/// `fn NAME` loads the plugins it takes to find NAME and no others: the builtin alone for a
/// builtin function, and the starlark plugin alone for `starlark` (its instance is asked before
/// the `default` chain, which would load every plugin). The debug log names each load.
#[test]
fn fn_loads_only_the_plugin_that_implements_the_function() {
    let list = b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n";
    for (function, data, library) in [
        ("set-namespace", "namespace=x", "libkrm_plugin_builtin.so"),
        (
            "starlark",
            "source=ctx.resource_list",
            "libkrm_plugin_starlark.so",
        ),
    ] {
        let output = run_cli(
            &["fn", function, "--", data],
            &[("KRM_RUNNER_LOG_LEVEL", "debug")],
            list,
        );
        assert!(output.status.success(), "{function}: {}", stderr(&output));
        let log = stderr(&output);
        let loaded: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("plugin loaded"))
            .collect();
        assert!(
            loaded.len() == 1 && loaded[0].contains(library),
            "fn {function} loads {library} alone: {loaded:#?}"
        );
    }
}

/// `krm-runner fn` runs the call itself: with only the builtin plugin beside it, and no
/// `krm-runner-server`, it still serves a builtin function. Every other command line runs
/// through `krm-runner-server`, and without it fails at once, naming the missing file.
#[test]
fn fn_runs_without_the_server_executable_and_other_commands_name_it() {
    let dir = scratch();
    for file in ["krm-runner", "libkrm_plugin_builtin.so"] {
        std::fs::copy(build_dir().join(file), dir.path().join(file)).unwrap();
    }
    let runner = dir.path().join("krm-runner");
    let list = b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n";
    let output = run_with_input(
        std::process::Command::new(&runner).args(["fn", "set-namespace", "--", "namespace=x"]),
        list,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("namespace: x"),
        "{}",
        stdout(&output)
    );
    let server = dir.path().join("krm-runner-server");
    for args in [
        &["plugins"][..],
        &["--log-level", "5", "fn", "set-namespace"],
        &[],
    ] {
        let output = run_with_input(std::process::Command::new(&runner).args(args), b"");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let text = stderr(&output);
        assert!(
            text.starts_with(&format!("krm-runner: cannot run {}: ", server.display())),
            "{args:?}: {text}"
        );
    }
}

/// `krm-runner` starts from C's `main` rather than std's, so it ignores SIGPIPE itself, as
/// std's start would: a reader that goes away makes writing the output fail with an error the
/// call reports, instead of killing the process with a signal.
#[test]
fn fn_whose_reader_goes_away_fails_with_an_error_not_a_signal() {
    let big: Vec<u8> = [
        &b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"[..],
        &b"- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n".repeat(20_000),
    ]
    .concat();
    let mut child = std::process::Command::new(krm_runner_tests::runner_binary())
        .args(["fn", "--plugin-dir"])
        .arg(build_dir())
        .args(["set-namespace", "--", "namespace=x"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Output larger than a pipe holds, and nobody left to read it.
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, &big).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{:?}", output.status);
    assert!(
        stderr(&output).contains("Broken pipe"),
        "{}",
        stderr(&output)
    );
}

/// `eval` makes one call, so it builds the served chain's instances as the call reaches them:
/// a builtin function loads the chain (`multi`) and the builtin alone, and an instance the call
/// never reaches cannot fail it, while one it does reach fails it naming the problem. With
/// FunctionConfigs in force every instance starts at once (routing picks among them by the
/// functions they implement), and the broken one is reported before any call.
#[test]
fn eval_loads_only_the_plugins_the_call_reaches() {
    let dir = scratch();
    let broken_exec = "evaluators:\n  exec:\n    config:\n      no_such_setting: 1\n";
    let config = write_config(dir.path(), broken_exec);
    let list = b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n";
    let eval = |config: &str, image: &str| {
        run_cli(
            &[
                "--config-file",
                config,
                "eval",
                "--image",
                image,
                "--",
                "namespace=x",
            ],
            &[("KRM_RUNNER_LOG_LEVEL", "debug")],
            list,
        )
    };
    let loaded = |output: &std::process::Output| -> Vec<String> {
        let mut libraries: Vec<String> = stderr(output)
            .lines()
            .filter(|line| line.contains("plugin loaded"))
            .filter_map(|line| line.split("libkrm_plugin_").nth(1))
            .map(|rest| rest.split(".so").next().unwrap_or(rest).to_owned())
            .collect();
        libraries.sort();
        libraries
    };

    let output = eval(&config, "set-namespace");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("namespace: x"),
        "{}",
        stdout(&output)
    );
    assert_eq!(loaded(&output), ["builtin", "multi"], "{}", stderr(&output));

    let output = eval(&config, "example.com/not-in-any-catalog");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(
        log.contains("evaluator \"exec\" could not start")
            && log.contains("evaluators.exec.config")
            && log.contains("no_such_setting"),
        "{log}"
    );
    assert_eq!(
        loaded(&output),
        ["builtin", "confighub", "exec", "multi", "starlark"],
        "{log}"
    );

    let functions = repo_root().join("config/functions");
    let routed = write_config(
        dir.path(),
        &format!(
            "{broken_exec}function_configs:\n  paths: [{}]\n",
            functions.display()
        ),
    );
    let output = eval(&routed, "set-namespace");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no_such_setting"),
        "{}",
        stderr(&output)
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

/// A plugin's settings are JSON values; the printed configuration shows their numbers as
/// numbers, as the file wrote them.
#[test]
fn config_prints_plugin_numbers_as_numbers() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  exec:\n    plugin: exec\n    config:\n      functions: []\n      \
         max_output_bytes: 1000\n",
    );
    let output = run_cli(&["--config-file", &config, "config"], &[], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines().any(|l| l.trim() == "max_output_bytes: 1000"),
        "{text}"
    );
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

/// Porch's Deployment passes `--max-grpc-retries`; a runner refusing it would crash-loop.
#[test]
fn porch_max_grpc_retries_sets_the_pod_instances_retries() {
    let dir = scratch();
    let config = write_config(
        dir.path(),
        "evaluators:\n  pod:\n    plugin: pod\n    config: {wrapper_server_image: w:v1}\n",
    );
    for flag in ["--max-grpc-retries=5", "-max-grpc-retries=5"] {
        let output = run_cli(&["--config-file", &config, flag, "config"], &[], b"");
        assert!(output.status.success(), "{flag}: {}", stderr(&output));
        let text = stdout(&output);
        assert!(
            text.contains("# evaluators.pod.config.max_grpc_retries = 5  <- command line"),
            "{flag}:\n{text}"
        );
    }
    let help = stdout(&run_cli(&["serve", "--help"], &[], b""));
    assert!(help.contains("--max-grpc-retries <N>"), "{help}");

    // Without a pod instance (the embedded configuration) the runner serves all the same.
    let server = Server::start("", &["--max-grpc-retries=2"]);
    assert!(
        server
            .stderr()
            .contains("--max-grpc-retries ignored: no evaluator instance named \"pod\""),
        "{}",
        server.stderr()
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
    assert_eq!(rows[2][..3], ["confighub", "2", "confighub"], "{text}");
    assert_eq!(rows[3][..3], ["starlark", "3", "starlark"], "{text}");
    assert_eq!(rows[4][..3], ["exec", "4", "exec"], "{text}");
    assert!(
        rows[3]
            .last()
            .unwrap()
            .ends_with("libkrm_plugin_starlark.so"),
        "{text}"
    );
    assert!(
        rows[4].last().unwrap().ends_with("libkrm_plugin_exec.so"),
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

/// Long enough for any start-up on a loaded machine; a hang (a FIFO read, an endless device)
/// or a server that started when it should have refused runs into it.
const START_UP_LIMIT: Duration = Duration::from_secs(60);

/// The `krm-runner: ` lines of stderr: the problems, without log lines.
fn problems(output: &std::process::Output) -> Vec<String> {
    stderr(output)
        .lines()
        .filter_map(|line| line.strip_prefix("krm-runner: "))
        .map(str::to_owned)
        .collect()
}

/// A copy of the test plugin cut to half its size, as a failed copy or a full disk leaves it.
fn truncated_plugin(dir: &Path) -> PathBuf {
    let whole = std::fs::read(build_dir().join("libkrm_plugin_testkit.so")).unwrap();
    let path = dir.join("libkrm_plugin_truncated.so");
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    path
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
}

#[test]
fn truncated_plugin_file_exits_2_naming_it() {
    let dir = scratch();
    let library = truncated_plugin(dir.path());
    let config = write_config(
        dir.path(),
        &format!(
            "evaluators:\n  kit:\n    plugin: {}\n  default:\n    plugin: multi\n    config: {{chain: [kit, exec]}}\n",
            library.display()
        ),
    );
    let output = run_cli_within(&["--config-file", &config, "plugins"], START_UP_LIMIT);
    assert_eq!(output.status.code(), Some(2), "no crash: {output:?}");
    assert_eq!(
        problems(&output),
        [format!(
            "evaluators.kit.plugin: {}: not a loadable plugin library: not a complete ELF file \
             (Invalid ELF section header offset/size/alignment)",
            library.display()
        )]
    );
    // Any other file is refused the same way, never mapped.
    std::fs::write(&library, b"#!/bin/sh\n").unwrap();
    let output = run_cli_within(&["--config-file", &config, "plugins"], START_UP_LIMIT);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        problems(&output)[0].contains("not a loadable plugin library: not a complete ELF file"),
        "{output:?}"
    );
}

#[test]
fn special_files_as_configuration_are_refused_at_once() {
    let dir = scratch();
    let fifo = dir.path().join("config.fifo");
    mkfifo(&fifo);
    let fifo = fifo.display().to_string();
    for (file, kind) in [("/dev/zero", "character device"), (fifo.as_str(), "FIFO")] {
        let output = run_cli_within(&["--config-file", file, "plugins"], START_UP_LIMIT);
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        assert_eq!(
            problems(&output),
            [format!("{file}: not a regular file (a {kind})")]
        );
    }
}

#[test]
fn oversized_and_deeply_nested_configuration_is_refused() {
    let dir = scratch();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(5 << 20)).unwrap();
    let output = run_cli_within(
        &["--config-file", &big.display().to_string(), "plugins"],
        START_UP_LIMIT,
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        problems(&output),
        [format!(
            "{}: larger than 4194304 bytes, the limit for configuration files",
            big.display()
        )]
    );

    let config = write_config(dir.path(), &format!("listen: {}", "[".repeat(40_000)));
    let output = run_cli_within(&["--config-file", &config, "plugins"], START_UP_LIMIT);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        problems(&output),
        [format!(
            "{config}: not valid YAML: nested deeper than 64 levels at line 1, column 264"
        )]
    );
}

#[test]
fn porch_exec_map_is_validated_as_such() {
    let dir = scratch();
    // A krm-runner configuration file is not an exec map.
    let runner_config = write_config(dir.path(), "listen: 127.0.0.1:9445\nfunctions: []\n");
    for (file, expected) in [
        ("/etc/hostname", "invalid type: string"),
        (runner_config.as_str(), "unknown field `listen`"),
    ] {
        let output = run_cli_within(&["--config", file, "config", "check"], START_UP_LIMIT);
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let problems = problems(&output);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!(
                "evaluators.exec.config: porch_config_file: {file}: not Porch's exec map \
                 (`functions: [{{function, images}}]`): "
            )) && problems[0].contains(expected),
            "{problems:?}"
        );
    }
    let exec_map = dir.path().join("exec-map.yaml");
    std::fs::write(
        &exec_map,
        "functions:\n  - function: cat\n    images: [example.com/cat:v1]\n",
    )
    .unwrap();
    let output = run_cli_within(
        &[
            "--config",
            &exec_map.display().to_string(),
            "--functions",
            "/bin",
            "config",
            "check",
        ],
        START_UP_LIMIT,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// Plugin settings reach the plugin as JSON text, read with serde_json's `arbitrary_precision`
/// on (the starlark plugin's interpreter turns it on for the workspace build): a number that
/// does not fit its setting is still named with its value and what was expected.
#[test]
fn plugin_setting_numbers_that_do_not_fit_are_named() {
    let dir = scratch();
    for (settings, expected) in [
        (
            "{tags_page_size: -1, max_waitlist_length: 3}",
            "evaluators.pod.config: tags_page_size: invalid value: integer `-1`, expected usize",
        ),
        (
            "{max_queued_calls: 2.5}",
            "evaluators.pod.config: max_queued_calls: invalid type: floating point `2.5`, \
             expected usize",
        ),
    ] {
        let config = write_config(
            dir.path(),
            &format!("evaluators:\n  pod:\n    plugin: pod\n    config: {settings}\n"),
        );
        let output = run_cli_within(
            &["--config-file", &config, "config", "check"],
            START_UP_LIMIT,
        );
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let problems = problems(&output);
        assert!(
            problems.iter().any(|p| p.starts_with(expected)),
            "{problems:?}"
        );
    }
}

/// Configurations `serve` refuses: `config check` refuses each of them too, with the same
/// problems, all of them, host-level and plugin-level.
#[test]
fn config_check_and_serve_agree_on_broken_configurations() {
    let dir = scratch();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let library = truncated_plugin(dir.path());
    std::fs::create_dir(dir.path().join("fc")).unwrap();
    std::fs::write(
        dir.path().join("fc/deep.yaml"),
        format!("apiVersion: {}", "[".repeat(40_000)),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("fc/typo.yaml"),
        "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata: {name: t}\nspec:\n  image: t\n  podExectuor: {}\n",
    )
    .unwrap();
    mkfifo(&dir.path().join("fifo"));
    std::fs::write(path("runner.yaml"), "listen: 127.0.0.1:9445\n").unwrap();

    let broken: Vec<(&str, String, Vec<String>)> = vec![
        (
            "a multi chain naming a missing instance",
            "evaluators:\n  default: {plugin: multi, config: {chain: [exec, nowhere]}}\n".into(),
            vec![
                "evaluators.default.config: chain[1]: no evaluator instance named \"nowhere\""
                    .into(),
            ],
        ),
        (
            "a truncated plugin file",
            format!(
                "evaluators:\n  kit: {{plugin: {}}}\n  default: {{plugin: multi, config: {{chain: [kit]}}}}\n",
                library.display()
            ),
            vec![format!(
                "evaluators.kit.plugin: {}: not a loadable plugin library",
                library.display()
            )],
        ),
        (
            "host-level and plugin-level problems together",
            format!(
                "listen: nowhere\nlog_format: xml\nmax_message_bytes: lots\n\
                 evaluators:\n  kit: {{plugin: {}}}\n  extra: {{plugin: no-such-plugin}}\n  \
                 default: {{plugin: multi, config: {{chain: [exec, missing]}}}}\n\
                 function_configs: {{paths: [{}]}}\n",
                library.display(),
                path("fc"),
            ),
            vec![
                "listen: \"nowhere\" is not an address".into(),
                "log_format: unknown variant: found `xml`".into(),
                "max_message_bytes: invalid type: found string \"lots\"".into(),
                format!(
                    "evaluators.kit.plugin: {}: not a loadable plugin library",
                    library.display()
                ),
                "evaluators.extra.plugin: no-such-plugin not found in plugin_dirs".into(),
                "evaluators.default.config: chain[1]: no evaluator instance named \"missing\""
                    .into(),
                format!(
                    "function_configs.paths: {}, document 1: not valid YAML (rest of the file skipped): nested deeper than 64 levels",
                    path("fc/deep.yaml")
                ),
                format!(
                    "function_configs.paths: {}, document 1: spec.podExectuor: unknown field",
                    path("fc/typo.yaml")
                ),
            ],
        ),
        (
            "a FIFO as a FunctionConfig file",
            format!("function_configs: {{paths: [{}]}}\n", path("fifo")),
            vec![format!(
                "function_configs.paths: {}: not a regular file (a FIFO)",
                path("fifo")
            )],
        ),
        (
            "a krm-runner configuration file as Porch's exec map",
            format!(
                "evaluators:\n  exec: {{plugin: exec, config: {{porch_config_file: {}}}}}\n",
                path("runner.yaml")
            ),
            vec![format!(
                "evaluators.exec.config: porch_config_file: {}: not Porch's exec map",
                path("runner.yaml")
            )],
        ),
    ];
    for (case, text, expected) in broken {
        let config = write_config(dir.path(), &text);
        let check = run_cli_within(
            &["--config-file", &config, "config", "check"],
            START_UP_LIMIT,
        );
        let serve = run_cli_within(&["--config-file", &config, "serve"], START_UP_LIMIT);
        assert_eq!(
            check.status.code(),
            Some(2),
            "{case}: config check: {check:?}"
        );
        assert_eq!(serve.status.code(), Some(2), "{case}: serve: {serve:?}");
        let problems_found = problems(&check);
        assert_eq!(
            problems_found,
            problems(&serve),
            "{case}: the same problems"
        );
        for problem in &expected {
            assert!(
                problems_found
                    .iter()
                    .any(|found| found.starts_with(problem.as_str())),
                "{case}: {problem:?} missing from {problems_found:#?}"
            );
        }
        assert_eq!(
            problems_found.len(),
            expected.len(),
            "{case}: one line per problem: {problems_found:#?}"
        );
    }
}

/// `krm-runner plugins | head -1`: a reader that stops early ends a listing quietly, as it
/// ends `ls`, instead of a panic about a failed print.
#[test]
fn listings_end_quietly_when_their_reader_stops() {
    use std::os::unix::process::ExitStatusExt;
    for command in [&["plugins"][..], &["list"], &["functions"], &["config"]] {
        let mut child = std::process::Command::new(krm_runner_tests::runner_binary())
            .args(command)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader leaves before the command prints: the whole listing meets a closed pipe.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let text = stderr(&output);
        assert!(!text.contains("panicked"), "{command:?}: {text}");
        assert_eq!(
            output.status.signal(),
            Some(libc::SIGPIPE),
            "{command:?}: {:?} {text}",
            output.status
        );
    }
}

/// What a newcomer typed first, answered with where to go: plain documents to `fn` without
/// `--`, a misspelt typed function, a runner that is not there.
#[test]
fn mistakes_get_a_pointer_to_what_works() {
    let dir = scratch();
    let documents = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n";
    let output = run_cli(&["fn", "set-namespace"], &[], documents);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("`krm-runner fn set-namespace -- key=value`"),
        "{}",
        stderr(&output)
    );
    // The same documents with the config after `--` are wrapped and served.
    let output = run_cli(
        &["fn", "set-namespace", "--", "namespace=x"],
        &[],
        documents,
    );
    assert!(output.status.success(), "{}", stderr(&output));

    let unit = dir.path().join("unit.yaml");
    std::fs::write(&unit, documents).unwrap();
    let unit = unit.display().to_string();
    let output = run_cli(&["do", &unit, "u", "set-namspace", "x"], &[], b"");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "no typed function \"set-namspace\": did you mean set-namespace? \
             `krm-runner list` lists them"
        ),
        "{}",
        stderr(&output)
    );

    let refused = format!("127.0.0.1:{}", krm_runner_tests::free_port());
    let output = run_cli(
        &[
            "eval",
            "--server",
            &refused,
            "--image",
            "set-namespace",
            "--",
            "namespace=x",
        ],
        &[],
        documents,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("cannot reach a runner"), "{text}");
    assert_eq!(text.matches("tcp connect error").count(), 1, "{text}");
}
