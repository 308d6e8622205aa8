//! The typed-function executor's bounds, through `krm-runner do`: functions that multiply
//! their input refuse, naming `max_message_bytes`, before they build what they could not
//! answer; properties files whose model would outgrow them, paths the reader could not read
//! back and over-long LIKE patterns are refused naming their limit; messages never echo a
//! caller's long string whole. The runner runs under a hard address-space limit, so that a
//! regression fails the test instead of exhausting the machine.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use krm_runner_tests::{build_dir, run_with_input, runner_binary};

/// The runner's address space: ample for a bounded call (the binary, its threads and
/// allocator arenas), far below what an unbounded one would build.
const ADDRESS_SPACE_BYTES: u64 = 1 << 30;

/// `krm-runner ARGS` fed `stdin`, with `max_message_bytes` set and its address space capped.
fn run_capped(args: &[&str], max_message_bytes: usize, stdin: &[u8]) -> Output {
    let mut command = Command::new(runner_binary());
    command
        .arg("--plugin-dir")
        .arg(build_dir())
        .args(args)
        .env(
            "KRM_RUNNER_MAX_MESSAGE_BYTES",
            max_message_bytes.to_string(),
        )
        // Each glibc arena reserves 64 MiB of address space; two keep the cap about the heap.
        .env("MALLOC_ARENA_MAX", "2");
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_BYTES,
                rlim_max: ADDRESS_SPACE_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    run_with_input(&mut command, stdin)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The invocation failed (exit 1) with a message containing `expected`, and what was printed
/// is small: the message names the limit without echoing the input.
fn assert_refused(output: &Output, expected: &str) {
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {stdout:.2000}\nstderr: {:.2000}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains(expected),
        "{expected:?} not in {stdout:.2000}"
    );
    assert!(
        stdout.len() < 16 * 1024,
        "{} bytes printed: {stdout:.2000}",
        stdout.len()
    );
}

fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: {value}\n")
}

#[test]
fn search_replace_refuses_an_amplified_unit_before_building_it() {
    // 4,000 matches of a 100 kB replacement: 400 MB, against a 1 MiB limit.
    let unit = config_map("web", &"a".repeat(4000));
    let replacement = "b".repeat(100_000);
    let output = run_capped(
        &["do", "-", "web", "search-replace", "a", &replacement],
        1 << 20,
        unit.as_bytes(),
    );
    assert_refused(
        &output,
        "search-replace: the unit after search-replace would be 400",
    );
    assert_refused(&output, "bytes, more than max_message_bytes 1048576");
}

#[test]
fn replicate_refuses_copies_over_max_message_bytes_before_making_them() {
    // 1,000 copies of a 1 MB ConfigMap: 1 GB, against an 8 MiB limit.
    let unit = config_map("big", &"x".repeat(1_000_000));
    let output = run_capped(
        &["do", "-", "web", "replicate", "v1/ConfigMap", "big", "1000"],
        8 << 20,
        unit.as_bytes(),
    );
    assert_refused(
        &output,
        "replicate: the unit with 1000 copies of big would be 100",
    );
    assert_refused(&output, "more than max_message_bytes 8388608");
}

#[test]
fn set_string_path_refuses_a_value_multiplied_over_many_resources() {
    // A 100 kB value into 10,000 resources: 1 GB, against a 4 MiB limit.
    let unit: String = (0..10_000)
        .map(|i| config_map(&format!("c{i}"), "v"))
        .collect::<Vec<_>>()
        .join("---\n");
    let value = "v".repeat(100_000);
    let output = run_capped(
        &[
            "do",
            "-",
            "web",
            "set-string-path",
            "*",
            "data.value",
            &value,
        ],
        4 << 20,
        unit.as_bytes(),
    );
    assert_refused(
        &output,
        "set-string-path: the unit after the edits would be ",
    );
    assert_refused(&output, "more than max_message_bytes 4194304");
}

#[test]
fn set_string_path_refuses_paths_the_reader_would_refuse() {
    // 200 segments: more than a property key may have.
    let deep = vec!["k"; 200].join(".");
    let output = run_capped(
        &[
            "do",
            "--toolchain",
            "AppConfig/Properties",
            "-",
            "app",
            "set-string-path",
            "*",
            &deep,
            "v",
        ],
        1 << 20,
        b"a=1\n",
    );
    assert_refused(
        &output,
        "its property key has more than 64 dot-separated segments",
    );
    // 600 segments: deeper than YAML is read.
    let deep = vec!["k"; 600].join(".");
    let output = run_capped(
        &["do", "-", "web", "set-string-path", "*", &deep, "v"],
        1 << 20,
        config_map("web", "v").as_bytes(),
    );
    assert_refused(
        &output,
        "600 segments would nest deeper than the 512 levels YAML is read to",
    );
}

#[test]
fn a_properties_model_that_would_outgrow_its_file_is_refused() {
    // 10,000 keys of 64 one-letter segments sharing only their first: 1.3 MB of file, a
    // model over 40 MB.
    let tail = vec!["s"; 63].join(".");
    let file: String = (0..10_000).map(|i| format!("k{i}.{tail}=v\n")).collect();
    let output = run_capped(
        &[
            "do",
            "--toolchain",
            "AppConfig/Properties",
            "-",
            "app",
            "get-string-path",
            "*",
            "a",
        ],
        8 << 20,
        file.as_bytes(),
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr:.2000}");
    let limit = 4 * file.len() + 256 * 1024;
    let expected = format!(
        "the YAML model of the file would be more than {limit} bytes (4 per byte of the file and 262144 more): keys nest too deeply without sharing prefixes"
    );
    assert!(stderr.contains(&expected), "{stderr:.2000}");
}

#[test]
fn like_patterns_are_compiled_once_and_bounded() {
    // 10,000 resources and a 3,000-character pattern: one compilation, not one per resource.
    let unit: String = (0..10_000)
        .map(|i| config_map(&format!("c{i}"), "v"))
        .collect::<Vec<_>>()
        .join("---\n");
    let pattern = format!("c{}%", "_".repeat(2998));
    let expression = format!("metadata.name LIKE '{pattern}'");
    let output = run_capped(
        &[
            "do",
            "--timeout",
            "120",
            "--output-only",
            "-",
            "web",
            "where-filter",
            "v1/ConfigMap",
            &expression,
        ],
        8 << 20,
        unit.as_bytes(),
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {:.2000}\nstderr: {:.2000}",
        text(&output.stdout),
        text(&output.stderr)
    );
    let verdict: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(verdict["Passed"], false, "{verdict}");
    let expression = format!("metadata.name LIKE '{}'", "%".repeat(5000));
    let output = run_capped(
        &[
            "do",
            "-",
            "web",
            "where-filter",
            "v1/ConfigMap",
            &expression,
        ],
        8 << 20,
        unit.as_bytes(),
    );
    assert_refused(
        &output,
        "the pattern for \"metadata.name\" is 5000 bytes, more than the limit of 4096",
    );
}

#[test]
fn long_caller_strings_are_cut_in_messages() {
    let unit = config_map("web", "v");
    let long = "z".repeat(100_000);
    for (args, expected) in [
        (vec![long.as_str()], "function does not exist"),
        (vec!["set-replicas", long.as_str()], "is not an integer"),
        (
            vec!["get-string-path", "*", long.as_str()],
            "longer than 4096 bytes",
        ),
        (vec!["delete-resource", long.as_str(), "web"], "not found"),
    ] {
        let mut all = vec!["do", "-", "web", "--"];
        all.extend(args);
        let output = run_capped(&all, 1 << 20, unit.as_bytes());
        assert_refused(&output, expected);
        assert_refused(&output, "more bytes)");
    }
}
