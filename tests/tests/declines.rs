//! Why nothing served: NOT_FOUND answers name each evaluator's reason for declining, and
//! `krm-runner functions --resolve` predicts the same answer as a real call. Also `eval
//! --server`, which sends the call to a running runner.

use krm_runner_tests::{Server, resource_list, run_cli, scratch};

/// The embedded default (builtin, then exec with the sample identity function), no
/// FunctionConfig files: the runner as a newcomer first meets it.
const DEFAULT: &str = "log_level: warn\nfunction_configs: {paths: []}\n";

fn resolve(config: &str, image: &str) -> String {
    let dir = scratch();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let output = run_cli(
        &[
            "--config-file",
            path.to_str().unwrap(),
            "functions",
            "--resolve",
            image,
        ],
        &[],
        b"",
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn outcome_line(resolution: &str) -> &str {
    resolution
        .lines()
        .find_map(|line| line.strip_prefix("outcome:"))
        .unwrap_or_else(|| panic!("no outcome line in:\n{resolution}"))
        .trim()
}

#[tokio::test]
async fn not_found_names_each_reason_and_resolve_predicts_it() {
    let server = Server::start(DEFAULT, &[]);
    let image = "gcr.io/kpt-fn/set-labels:v0.1";
    let status = server
        .call(image, &resource_list(&["a"]))
        .await
        .expect_err("no evaluator serves this tag");
    assert_eq!(status.code(), tonic::Code::NotFound);
    let message = status.message();
    assert!(
        message.starts_with(&format!("function \"{image}\" not found: ")),
        "Porch's wording first: {message}"
    );
    assert!(
        message.contains(
            "builtin: set-labels is reproduced for tags v0.2, v0.2.0, v0.2.1, v0.2.2, v0.2.3, not v0.1"
        ),
        "{message}"
    );
    assert!(
        message.contains("exec: no executable is mapped to this image"),
        "{message}"
    );
    assert!(message.len() <= 1024, "bounded: {}", message.len());

    let resolution = resolve(DEFAULT, image);
    assert_eq!(
        outcome_line(&resolution),
        format!("NOT_FOUND {message}"),
        "{resolution}"
    );
    assert!(
        resolution.contains("declines:        builtin: set-labels is reproduced"),
        "{resolution}"
    );

    // The unknown-function case, with its own reason.
    let image = "ghcr.io/kptdev/krm-functions-catalog/no-such-fn:v1";
    let status = server
        .call(image, &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert!(
        status
            .message()
            .contains("builtin: \"no-such-fn\" is not one of its functions"),
        "{}",
        status.message()
    );
    assert_eq!(
        outcome_line(&resolve(DEFAULT, image)),
        format!("NOT_FOUND {}", status.message())
    );
}

#[tokio::test]
async fn resolve_names_the_evaluator_a_call_is_served_by() {
    let server = Server::start(DEFAULT, &[]);
    for (image, evaluator) in [
        ("krm-runner/identity", "exec"),
        ("gcr.io/kpt-fn/set-labels:v0.2.0", "builtin"),
    ] {
        let mut input = resource_list(&["a"]);
        input.extend_from_slice(
            b"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: fc}\n  data: {color: blue}\n",
        );
        let (_, served_by) = server
            .call(image, &input)
            .await
            .unwrap_or_else(|status| panic!("{image}: {status:?}"));
        assert_eq!(served_by, evaluator, "{image}");
        let resolution = resolve(DEFAULT, image);
        assert_eq!(
            outcome_line(&resolution),
            format!("served by {served_by:?}"),
            "{resolution}"
        );
    }
}

#[test]
fn a_disabled_evaluator_says_so() {
    let dir = scratch();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("{DEFAULT}disabled: [exec]\n")).unwrap();
    let output = run_cli(
        &[
            "--config-file",
            config.to_str().unwrap(),
            "eval",
            "--image",
            "krm-runner/identity",
        ],
        &[],
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exec: disabled (`disabled:` or --disable-runtimes)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("builtin: not an image under the prefixes it answers to"),
        "{stderr}"
    );
}

#[test]
fn eval_lists_the_reasons_and_exits_1() {
    let output = run_cli(
        &["eval", "--image", "gcr.io/kpt-fn/set-namespace:v0.1"],
        &[],
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("krm-runner eval: function \"gcr.io/kpt-fn/set-namespace:v0.1\" not found: builtin: set-namespace is reproduced for tags "),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            ", not v0.1; confighub: \"gcr.io/kpt-fn/set-namespace:v0.1\" is not one of its \
             functions, which answer to NAME and confighub/NAME only, without a registry or tag; \
             starlark: \"set-namespace\" is not one of its functions (`krm-runner functions` \
             lists them); exec: "
        ),
        "{stderr}"
    );
}

#[test]
fn eval_server_sends_the_call_to_the_running_runner() {
    let server = Server::start(DEFAULT, &[]);
    let address = format!("127.0.0.1:{}", server.port);
    let input = b"# kept\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n";
    let output = run_cli(
        &[
            "eval",
            "--server",
            &address,
            "--image",
            "krm-runner/identity",
        ],
        &[],
        input,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "krm-runner eval: served by exec at http://{address}"
        )),
        "{stderr}"
    );
    assert!(
        stdout.contains("kind: ResourceList") && stdout.contains("# kept"),
        "{stdout}"
    );

    // A builtin with key=value pairs, over the wire.
    let output = run_cli(
        &[
            "eval",
            "--server",
            &address,
            "--image",
            "set-namespace",
            "--",
            "namespace=prod",
        ],
        &[],
        input,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{:?}", output);
    assert!(stdout.contains("namespace: prod"), "{stdout}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("served by builtin"));

    // A decline comes back with its reasons and exit status 1.
    let output = run_cli(
        &[
            "eval",
            "--server",
            &address,
            "--image",
            "example.com/nope:v1",
        ],
        &[],
        input,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("answered NotFound: function \"example.com/nope:v1\" not found: builtin: "),
        "{stderr}"
    );

    drop(server);
    let output = run_cli(
        &[
            "eval",
            "--server",
            &address,
            "--image",
            "krm-runner/identity",
        ],
        &[],
        input,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach a runner at http://{address}")),
        "{stderr}"
    );
}
