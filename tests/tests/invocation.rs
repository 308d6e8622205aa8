//! The command line's manners: each subcommand's `--help` lists its own flags (the server's and
//! Porch's under `serve`), every flag says what it does, and every bad invocation exits 2.

use krm_runner_tests::{run_cli, scratch};

fn help(args: &[&str]) -> String {
    let output = run_cli(args, &[], b"");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// `--flag` names listed in a help text, each with the text describing it (empty if none):
/// on the same line, or on the next (clap's long help puts it there).
fn flags(help: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = help.lines().collect();
    let mut flags = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix("--").or_else(|| {
            line.split_once(", --")
                .filter(|(short, _)| short.starts_with('-'))
                .map(|(_, rest)| rest)
        }) else {
            continue;
        };
        let name = rest.split([' ', '=', '[', '<']).next().unwrap().to_owned();
        let next_line = lines
            .get(index + 1)
            .map(|next| next.trim())
            .filter(|next| !next.is_empty() && !next.starts_with('-'))
            .unwrap_or_default();
        let description = rest
            .split_once("  ")
            .map(|(_, text)| text.trim())
            .unwrap_or(next_line)
            .to_owned();
        flags.push((name, description));
    }
    flags
}

const SERVER_ONLY: &[&str] = &[
    "port",
    "listen",
    "pod-ttl",
    "max-request-body-size",
    "config",
];

#[test]
fn subcommands_list_only_their_own_flags() {
    let serve = flags(&help(&["serve", "--help"]));
    let names: Vec<&str> = serve.iter().map(|(name, _)| name.as_str()).collect();
    for flag in SERVER_ONLY {
        assert!(
            names.contains(flag),
            "serve --help lacks --{flag}: {names:?}"
        );
    }
    for subcommand in ["eval", "plugins", "functions", "fn", "config"] {
        let text = help(&[subcommand, "--help"]);
        let names: Vec<String> = flags(&text).into_iter().map(|(name, _)| name).collect();
        for flag in SERVER_ONLY {
            assert!(
                !names.iter().any(|name| name == flag),
                "{subcommand} --help lists --{flag}:\n{text}"
            );
        }
        assert!(
            names.iter().any(|name| name == "config-file"),
            "{subcommand} --help keeps the runner's own flags:\n{text}"
        );
    }
    let eval = help(&["eval", "--help"]);
    assert!(eval.contains("--server <ADDR>"), "{eval}");
}

#[test]
fn every_flag_has_a_description() {
    for args in [&["--help"][..], &["serve", "--help"], &["eval", "--help"]] {
        let text = help(args);
        let undescribed: Vec<String> = flags(&text)
            .into_iter()
            .filter(|(_, description)| description.is_empty())
            .map(|(name, _)| name)
            .collect();
        assert!(
            undescribed.is_empty(),
            "{args:?}: no description for {undescribed:?}:\n{text}"
        );
    }
}

#[test]
fn bad_invocations_exit_2_naming_the_problem() {
    let dir = scratch();
    let not_yaml = dir.path().join("fn-config.yaml");
    std::fs::write(&not_yaml, "a: [").unwrap();
    let input = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    let cases: &[(&[&str], &[u8], &str)] = &[
        (&["--no-such-flag"], b"", "--no-such-flag"),
        (&["eval"], b"", "--image"),
        (&["no-such-command"], b"", "no-such-command"),
        (
            &["eval", "--image", "x", "-i", "/nonexistent/input.yaml"],
            b"",
            "/nonexistent/input.yaml",
        ),
        (
            &["eval", "--image", "x", "--", "novalue"],
            input,
            "\"novalue\" is not key=value",
        ),
        (
            &[
                "eval",
                "--image",
                "x",
                "--fn-config",
                not_yaml.to_str().unwrap(),
            ],
            input,
            "not valid YAML",
        ),
        (&["eval", "--image", "x"], b"- 1\n", "not a YAML mapping"),
        (
            &["eval", "--image", "x", "--server", "a b c"],
            input,
            "--server",
        ),
        (&["fn", "no-such-function"], input, "no-such-function"),
        (&["functions", "no-such-function"], b"", "no-such-function"),
        (&["--port", "many"], b"", "many"),
    ];
    for (args, stdin, named) in cases {
        let output = run_cli(args, &[], stdin);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} should name {named:?}: {stderr}"
        );
    }
}
