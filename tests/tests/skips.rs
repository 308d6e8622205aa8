//! A test that needs a tool this machine lacks says so in cargo's output (not only under
//! `--nocapture`), and fails under `CI=true`. Proven by running this test binary again, with
//! the harness capturing output as `cargo test` does, on a test that needs a tool nobody has.

use std::process::Command;

use krm_runner_tests::have_tool;

const MISSING_TOOL: &str = "krm-runner-test-tool-nobody-has";

/// Run only by `skipped_tests_are_visible_and_fail_under_ci`, in a child process.
#[test]
#[ignore = "a fixture: run by skipped_tests_are_visible_and_fail_under_ci"]
fn needs_a_missing_tool() {
    if !have_tool(MISSING_TOOL) {
        return;
    }
    panic!("{MISSING_TOOL} exists?");
}

fn run_fixture(ci: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "needs_a_missing_tool",
            "--ignored",
            "--test-threads=1",
        ])
        .env("CI", ci)
        .output()
        .expect("run this test binary")
}

#[test]
fn skipped_tests_are_visible_and_fail_under_ci() {
    let output = run_fixture("false");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("test needs_a_missing_tool ... ok"),
        "{stdout}"
    );
    assert_eq!(
        stderr.trim(),
        format!(
            "SKIPPED needs_a_missing_tool: {MISSING_TOOL} is not on PATH; this test needs the real {MISSING_TOOL}"
        ),
        "one line, outside the harness's capture"
    );

    let output = run_fixture("true");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains("test needs_a_missing_tool ... FAILED"),
        "{stdout}"
    );
    assert!(stdout.contains("required under CI=true"), "{stdout}");
}
