//! The `grpc-health-probe` binary and `wrapper-server install DIR`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;

fn probe(binary: &str, args: &[&str]) -> std::process::Output {
    run_bounded(Command::new(binary).args(args), BOUND)
}

#[test]
fn probe_exits_zero_against_a_running_wrapper() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(dir.path(), "fn.sh", "cat\n");
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let port = wrapper.port.to_string();
    for args in [
        vec!["-addr".to_owned(), format!("localhost:{port}")],
        vec![
            format!("--addr=127.0.0.1:{port}"),
            "-service".into(),
            "x".into(),
        ],
        vec![
            "-addr".into(),
            format!("[::1]:{port}"),
            "-connect-timeout".into(),
            "5s".into(),
            "-rpc-timeout=5s".into(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = probe(PROBE, &args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        if args[1].starts_with("[::1]") && output.status.code() == Some(2) {
            // A machine without IPv6 loopback.
            eprintln!(
                "no IPv6 loopback here: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            continue;
        }
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(stdout, "status: SERVING\n");
    }
}

#[test]
fn probe_fails_against_a_closed_port_and_without_addr() {
    let port = free_port();
    let output = probe(PROBE, &["-addr", &format!("localhost:{port}")]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("failed to connect"));

    let output = probe(PROBE, &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("-addr not specified"));
    let output = probe(PROBE, &["-addr", "localhost:1", "-tls"]);
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn install_copies_both_binaries_with_mode_0555() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("shared/wrapper-server-tools");
    let output = run_bounded(
        Command::new(WRAPPER).args(["install", target.to_str().unwrap()]),
        BOUND,
    );
    assert!(output.status.success(), "{output:?}");
    for name in ["wrapper-server", "grpc-health-probe"] {
        let installed = target.join(name);
        let metadata = std::fs::metadata(&installed).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o7777, 0o555, "{name}");
        let source = match name {
            "wrapper-server" => WRAPPER,
            _ => PROBE,
        };
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(source).unwrap(),
            "{name} differs from its source"
        );
    }
    // Installing again (a restarted init container) replaces the read-only files.
    let again = run_bounded(
        Command::new(WRAPPER).args(["install", target.to_str().unwrap()]),
        BOUND,
    );
    assert!(again.status.success(), "{again:?}");
    // The copies work: the installed wrapper serves, the installed probe sees it.
    let function = script(dir.path(), "fn.sh", "cat\n");
    let wrapper = Wrapper::start_binary(
        target.join("wrapper-server").to_str().unwrap(),
        &["/bin/sh", &function],
    );
    let output = probe(
        target.join("grpc-health-probe").to_str().unwrap(),
        &["-addr", &format!("localhost:{}", wrapper.port)],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");

    let output = run_bounded(Command::new(WRAPPER).args(["install"]), BOUND);
    assert_eq!(output.status.code(), Some(2));
}
