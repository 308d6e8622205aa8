//! ConfigHub's typed functions through the real binary: `krm-runner do`, `doseq`, `list` and
//! `listpaths`, in fctl's layout, checked against the executor's reviewed golden cases and
//! against fctl-layout golden files of their own (`tests/tests/confighub/`, rewritten with
//! `KRM_UPDATE_GOLDEN=1`).

use std::path::{Path, PathBuf};

use krm_runner_tests::{have_tool, repo_root, run_cli, scratch};
use serde_json::Value;

fn executor_golden_dir() -> PathBuf {
    repo_root().join("krm-function-executor/tests/golden")
}

fn cli_golden_dir() -> PathBuf {
    repo_root().join("tests/tests/confighub")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The executor's golden cases run with fctl's context IDs instead of theirs.
fn with_fctl_ids(text: &str) -> String {
    text.replace(
        "5837950a-0000-4000-8000-000000000001",
        "5837950a-619e-44da-9b75-f957c2aee14c",
    )
    .replace(
        "c73bbc39-0000-4000-8000-000000000002",
        "c73bbc39-7ad1-4f32-aba0-1ef0789c9571",
    )
}

/// What an executor golden file says about a response.
#[derive(Debug, PartialEq)]
struct Expected {
    success: bool,
    /// Joined by `; `, as the golden file has them.
    errors: Option<String>,
    output: Option<String>,
    data: String,
}

fn read_executor_golden(golden: &str, input: &str) -> Expected {
    let first = golden.lines().next().unwrap_or_default();
    let success = first == "SUCCESS  true";
    // fctl shows the messages only when an invocation failed (a failed validation has one too).
    let errors = golden
        .lines()
        .find_map(|line| line.strip_prefix("ERRORMESSAGES  "))
        .filter(|_| !success)
        .map(str::to_owned);
    let output = golden.split_once("\n------\n").map(|(before, rest)| {
        assert!(before.contains("\nOUTPUT  "), "{golden}");
        let end = ["\n\nMUTATIONS\n---------\n", "\n\nCONFIGDATA\n----------\n"]
            .iter()
            .filter_map(|marker| rest.find(marker))
            .min()
            .unwrap_or(rest.len() - 1);
        rest[..end].to_owned()
    });
    let data = golden
        .split_once("\nCONFIGDATA\n----------\n")
        .map_or_else(|| input.to_owned(), |(_, data)| data.to_owned());
    Expected {
        success,
        errors,
        output,
        data,
    }
}

/// What `krm-runner do`/`doseq` printed, read back from fctl's layout.
fn read_cli_output(stdout: &str, input: &str) -> Expected {
    let mut rest = stdout;
    let mut success = None;
    let mut errors = None;
    while let Some((line, after)) = rest.split_once('\n') {
        if let Some(value) = line.strip_prefix("SUCCESS") {
            success = Some(value.trim() == "true");
        } else if let Some(value) = line.strip_prefix("ERRORMESSAGES") {
            let joined = value.trim();
            errors = Some(joined.strip_suffix(';').unwrap_or(joined).to_owned());
        } else {
            break;
        }
        rest = after;
    }
    let (data, output) = match rest.split_once("OUTPUT\n------\n") {
        Some((before, output)) => (before, Some(output.to_owned())),
        None => (rest, None),
    };
    let data = match data.strip_prefix("CONFIGDATA\n---------\n") {
        Some(data) => data.to_owned(),
        None => {
            assert!(data.is_empty(), "unexpected text before OUTPUT: {data:?}");
            input.to_owned()
        }
    };
    Expected {
        success: success.expect("a SUCCESS row"),
        errors,
        output,
        data,
    }
}

/// The command line that runs an executor golden case, or `None` when the CLI cannot express
/// it (a validation list, approvers, a live state).
fn command_line(case: &Value, input: &Path) -> Option<Vec<String>> {
    if case.get("combine_validation_results") == Some(&Value::Bool(false))
        || case.get("approved_by").is_some_and(|v| !v.is_null())
        || case.get("live_state").is_some_and(|v| !v.is_null())
    {
        return None;
    }
    let invocations = case["invocations"].as_array()?;
    let num_filters = case.get("num_filters").and_then(Value::as_u64).unwrap_or(0);
    let stop = case.get("stop_on_error").and_then(Value::as_bool) == Some(true);
    let toolchain = case
        .get("toolchain")
        .and_then(Value::as_str)
        .map(|name| vec!["--toolchain".to_owned(), name.to_owned()])
        .unwrap_or_default();
    let input = input.display().to_string();
    let all_strings = invocations.iter().all(|invocation| {
        invocation["Arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|argument| argument["Value"].is_string())
    });
    // Command-line arguments are strings; other values go through doseq's JSON.
    if invocations.len() == 1 && num_filters == 0 && !stop && all_strings {
        let invocation = &invocations[0];
        let mut line = vec!["do".to_owned()];
        line.extend(toolchain);
        line.extend([input, "golden".to_owned(), "--".to_owned()]);
        line.push(invocation["FunctionName"].as_str()?.to_owned());
        for argument in invocation["Arguments"].as_array().into_iter().flatten() {
            let value = argument["Value"].as_str()?.to_owned();
            match argument.get("ParameterName").and_then(Value::as_str) {
                Some(name) if !name.is_empty() => line.push(format!("--{name}={value}")),
                _ => line.push(value),
            }
        }
        return Some(line);
    }
    let mut line = vec!["doseq".to_owned()];
    line.extend(toolchain);
    line.extend([input, "golden".to_owned()]);
    line.push(serde_json::to_string(invocations).ok()?);
    line.extend(["--num-filters".to_owned(), num_filters.to_string()]);
    if stop {
        line.push("--stop".to_owned());
    }
    Some(line)
}

#[test]
fn do_and_doseq_agree_with_the_executor_golden_cases() {
    let cases_dir = executor_golden_dir().join("cases");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&cases_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    cases.sort();
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in &cases {
        let case: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let input_path = executor_golden_dir()
            .join("inputs")
            .join(case["input"].as_str().unwrap());
        let input = text(&std::fs::read(&input_path).unwrap());
        let golden =
            with_fctl_ids(&std::fs::read_to_string(path.with_extension("golden")).unwrap());
        let Some(line) = command_line(&case, &input_path) else {
            continue;
        };
        let args: Vec<&str> = line.iter().map(String::as_str).collect();
        let output = run_cli(&args, &[], b"");
        let stdout = text(&output.stdout);
        if let Some(reason) = golden.strip_prefix("REQUEST ERROR  ") {
            // A request the executor refuses is a bad invocation, named on stderr.
            let stderr = text(&output.stderr);
            if output.status.code() != Some(2) || !stderr.contains(reason.trim()) {
                failures.push(format!(
                    "{}: expected exit 2 with {reason:?}, got {:?}: {stderr}",
                    path.display(),
                    output.status.code()
                ));
            }
            checked += 1;
            continue;
        }
        let expected = read_executor_golden(&golden, &input);
        let actual = read_cli_output(&stdout, &input);
        let code = if expected.success { 0 } else { 1 };
        if output.status.code() != Some(code) || actual != expected {
            failures.push(format!(
                "{}: krm-runner {line:?} exited {:?} (expected {code})\nexpected {expected:#?}\nactual {actual:#?}\nstderr {}",
                path.display(),
                output.status.code(),
                text(&output.stderr)
            ));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(checked >= 80, "only {checked} cases could be run");
}

/// A CLI golden file: `NAME.args` holds one argument per line (`$INPUTS` is the executor's
/// golden inputs folder); `NAME.txt` the exact stdout and `NAME.code` the exit status.
#[test]
fn fctl_layout_golden_files() {
    let update = std::env::var_os("KRM_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let inputs = executor_golden_dir().join("inputs");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(cli_golden_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "args"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 6, "CLI golden cases missing");
    let mut failures = Vec::new();
    for case in &cases {
        let args: Vec<String> = std::fs::read_to_string(case)
            .unwrap()
            .lines()
            .map(|line| line.replace("$INPUTS", &inputs.display().to_string()))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run_cli(&args, &[], b"");
        let actual = format!(
            "{}EXIT {}\n",
            text(&output.stdout),
            output.status.code().unwrap_or(-1)
        );
        let golden = case.with_extension("txt");
        if update {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}: differs\n--- expected\n{expected}\n--- actual\n{actual}\n--- stderr\n{}",
                golden.display(),
                text(&output.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn list_shows_every_function_with_its_parameters() {
    let output = run_cli(&["list"], &[], b"");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("FUNCTIONNAME    "), "{}", lines[0]);
    let names: Vec<&str> = lines[1..]
        .iter()
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "rows by name");
    assert!(names.len() >= 52, "{names:?}");
    let replicas = lines
        .iter()
        .find(|line| line.starts_with("set-replicas "))
        .unwrap();
    let cells: Vec<&str> = replicas
        .split("    ")
        .filter(|c| !c.trim().is_empty())
        .collect();
    assert_eq!(
        cells[..7].iter().map(|c| c.trim()).collect::<Vec<_>>(),
        [
            "set-replicas",
            "1",
            "false",
            "true",
            "false",
            "true",
            "true"
        ],
        "{replicas}"
    );
    assert!(replicas.contains("replicas:\""), "{replicas}");
    assert!(replicas.contains("\"(req), "), "{replicas}");
    // Every line is as wide as the header: padded cells, fctl's table.
    let width = lines[0].len();
    assert!(lines.iter().all(|line| line.chars().count() == width));
}

#[test]
fn listpaths_prints_the_registry_as_json() {
    let output = run_cli(&["listpaths"], &[], b"");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let registry: Value = serde_json::from_slice(&output.stdout).unwrap();
    let replicas = &registry["replicas"]["apps/v1/Deployment"]["spec.replicas"];
    assert_eq!(replicas["AttributeName"], "replicas", "{replicas}");
    assert_eq!(replicas["DataType"], "int", "{replicas}");
    // kustomize's name references, filed as ConfigHub's initStandardFunctions files them: a
    // RoleBinding's roleRef names a Role or a ClusterRole; the Role's entry is the needed
    // value's, with both setters, the ClusterRole's has its own alone.
    let binding = "rbac.authorization.k8s.io/v1/RoleBinding";
    let setters = |attribute: &str| -> Vec<Value> {
        let entry = &registry[attribute][binding]["roleRef.name"];
        let setters = entry["Info"]["SetterInvocations"].as_array();
        let setters = setters.unwrap_or_else(|| panic!("{attribute}: {entry}"));
        setters
            .iter()
            .map(|setter| setter["Arguments"][0]["Value"].clone())
            .collect()
    };
    let role = "rbac.authorization.k8s.io/v1/Role";
    let cluster_role = "rbac.authorization.k8s.io/v1/ClusterRole";
    assert_eq!(setters("needed-value"), [role, cluster_role]);
    assert_eq!(
        setters(&format!("resource-name/{role}")),
        [role, cluster_role]
    );
    assert_eq!(
        setters(&format!("resource-name/{cluster_role}")),
        [cluster_role]
    );
    let policy_type = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    let policy = &registry["provided-value"][policy_type]["metadata.name"];
    let getter = &policy["Info"]["GetterInvocation"];
    assert_eq!(getter["FunctionName"], "get-resources-of-type", "{policy}");
    assert!(text(&output.stdout).starts_with("{\n  \""));

    // The embedded accessors are ConfigHub's patterns, which its set-image and set-hostname
    // also check their arguments with: signatures.json has them from ConfigHub's code.
    let signatures: Value = serde_json::from_slice(
        &std::fs::read(repo_root().join("tests/tests/confighub/signatures.json")).unwrap(),
    )
    .unwrap();
    let pattern = |function: &str, parameter: usize| {
        signatures["Kubernetes/YAML"][function]["Parameters"][parameter]["Regexp"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let accessor = |attribute: &str, resource_type: &str, path: &str| {
        let entry = &registry[attribute][resource_type][path];
        assert_eq!(entry["EmbeddedAccessorType"], "Regexp", "{entry}");
        entry["EmbeddedAccessorConfig"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        accessor(
            "container-image-reference",
            "apps/v1/Deployment",
            "spec.template.spec.containers.?name:container-name=%s.image#reference"
        ),
        pattern("set-image", 1)
    );
    // set-hostname's argument pattern is the accessor anchored once more.
    let hostname = accessor(
        "subdomain",
        "networking.k8s.io/v1/Ingress",
        "spec.rules.*.host#subdomain",
    );
    assert_eq!(format!("^{hostname}$"), pattern("set-hostname", 0));
}

#[test]
fn stdin_input_and_named_arguments_after_the_separator() {
    let unit = b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # keep\nspec:\n  replicas: 1\n";
    let output = run_cli(
        &[
            "do",
            "--data-only",
            "-",
            "Web",
            "--",
            "set-replicas",
            "--replicas=4",
        ],
        &[],
        unit,
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # keep\nspec:\n  replicas: 4\n"
    );
    // Unchanged data is still printed with --data-only; nothing else is.
    let output = run_cli(
        &["do", "-", "Web", "get-replicas", "--data-only"],
        &[],
        unit,
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(output.stdout, unit);
    let output = run_cli(
        &["do", "--output-only", "-", "Web", "get-replicas"],
        &[],
        unit,
    );
    let attributes: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(attributes[0]["Value"], 1, "{attributes}");
}

#[test]
fn a_failed_invocation_exits_1_and_changes_nothing() {
    let unit =
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";
    let output = run_cli(&["do", "-", "web", "set-replicas", "-3"], &[], unit);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("SUCCESS          false    "),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("ERRORMESSAGES    set-replicas: parameter replicas: -3 "),
        "the parameter is named: {stdout}"
    );
    assert_eq!(lines[0].len(), lines[1].len(), "padded cells: {stdout}");
    assert!(!stdout.contains("CONFIGDATA"), "{stdout}");
    let output = run_cli(&["do", "-", "web", "no-such-function"], &[], unit);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stdout).contains("invoke no-such-function: function does not exist; "),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn doseq_filters_and_stop_on_error() {
    let unit =
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";
    let sequence = r#"[
        {"FunctionName": "where-filter", "Arguments": [{"Value": "apps/v1/Deployment"}, {"Value": "spec.replicas > 3"}]},
        {"FunctionName": "set-replicas", "Arguments": [{"Value": 9}]}
    ]"#;
    // The filter fails: the sequence ends quietly, the data unchanged.
    let output = run_cli(
        &["doseq", "--num-filters", "1", "-", "web", sequence],
        &[],
        unit,
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "SUCCESS    true    \n");
    // Without the filter, where-filter is a validation and set-replicas runs.
    let output = run_cli(&["doseq", "-", "web", sequence], &[], unit);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("  replicas: 9\n"), "{stdout}");
    // Stop on error: the invocation after the failing one does not run.
    let failing = r#"[
        {"FunctionName": "set-replicas", "Arguments": [{"Value": "many"}]},
        {"FunctionName": "set-replicas", "Arguments": [{"Value": 2}]}
    ]"#;
    let output = run_cli(&["doseq", "--stop", "-", "web", failing], &[], unit);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        !text(&output.stdout).contains("CONFIGDATA"),
        "{}",
        text(&output.stdout)
    );
    let output = run_cli(&["doseq", "-", "web", failing], &[], unit);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stdout).contains("  replicas: 2\n"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn bad_invocations_exit_2_naming_the_thing_at_fault() {
    let dir = scratch();
    let unparsable = dir.path().join("broken.yaml");
    std::fs::write(&unparsable, "kind: [unclosed\n").unwrap();
    let unparsable = unparsable.display().to_string();
    let huge = dir.path().join("huge.yaml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    let huge = huge.display().to_string();
    let missing = dir.path().join("missing.yaml").display().to_string();
    let bad_escape = dir.path().join("bad.properties");
    std::fs::write(&bad_escape, "name=ok\nbroken=\\u12Z4\n").unwrap();
    let bad_escape = bad_escape.display().to_string();
    let huge_properties = dir.path().join("huge.properties");
    std::fs::write(&huge_properties, "k=v\n".repeat(4 * 1024 * 1024 + 1)).unwrap();
    let huge_properties = huge_properties.display().to_string();
    let properties = ["--toolchain", "AppConfig/Properties"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["do", &missing, "u", "get-replicas"],
            "missing.yaml: cannot read",
        ),
        (
            vec!["do", &unparsable, "u", "get-replicas"],
            "broken.yaml: configuration data parsing error",
        ),
        (
            vec!["do", &huge, "u", "get-replicas"],
            "huge.yaml: config data is more than the limit",
        ),
        (
            vec!["do", "-", "u", "Get_Replicas"],
            "function name \"Get_Replicas\"",
        ),
        (vec!["do", "-", "u/x", "get-replicas"], "unit name \"u/x\""),
        (
            vec!["do", "-", "u", "--", "set-label", "--label-key=a", "b"],
            "positional argument \"b\" cannot follow named",
        ),
        (
            vec![
                "do",
                "--toolchain",
                "OpenTofu/HCL",
                "-",
                "u",
                "get-replicas",
            ],
            "--toolchain: toolchain \"OpenTofu/HCL\" is not supported",
        ),
        (
            vec![
                "do",
                "--data-only",
                "--output-only",
                "-",
                "u",
                "get-replicas",
            ],
            "cannot be used with",
        ),
        (
            vec!["doseq", "-", "u", "{\"FunctionName\": 1}"],
            "INVOCATIONS is not a FunctionInvocationList",
        ),
        (
            vec!["doseq", "-", "u", "[{\"FunctionName\": \"Bad Name\"}]"],
            "function name \"Bad Name\"",
        ),
        (
            vec!["listpaths", "--toolchain", "AppConfig/INI"],
            "--toolchain: toolchain \"AppConfig/INI\" is not supported; supported: Kubernetes/YAML, AppConfig/Properties",
        ),
        (
            [
                &["do"],
                &properties[..],
                &[&bad_escape, "u", "get-string-path", "*", "name"],
            ]
            .concat(),
            "bad.properties: configuration data parsing error: line 2: Malformed \\uxxxx encoding: not hex.",
        ),
        (
            [
                &["do"],
                &properties[..],
                &[&huge_properties, "u", "get-string-path", "*", "k"],
            ]
            .concat(),
            "huge.properties: configuration data parsing error: properties data is 16777220 bytes, more than the limit of 16777216",
        ),
        (vec!["do", "-", "u"], "FUNCTION"),
    ];
    for (args, expected) in cases {
        let output = run_cli(&args, &[], b"kind: ConfigMap\n");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "{args:?}: {}",
            text(&output.stdout)
        );
    }
}

const DECLARED_TEAM: &str = "\
executor:
  attributes:
  - name: team
    description: the owning team
    upsert: true
    paths:
      apps/v1/Deployment: [metadata.labels.team, spec.template.metadata.labels.team]
      v1/Service: [metadata.labels.team]
";

#[test]
fn attributes_declared_in_the_configuration_add_functions() {
    let dir = scratch();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, DECLARED_TEAM).unwrap();
    let config = config.display().to_string();
    let input = executor_golden_dir().join("inputs/workloads.yaml");
    let input = input.display().to_string();

    let output = run_cli(&["--config-file", &config, "list"], &[], b"");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    for name in ["get-team ", "set-team "] {
        assert!(
            stdout.lines().any(|l| l.starts_with(name)),
            "{name}\n{stdout}"
        );
    }

    let output = run_cli(&["--config-file", &config, "listpaths"], &[], b"");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let registry: Value = serde_json::from_slice(&output.stdout).unwrap();
    let entry = &registry["team"]["apps/v1/Deployment"]["metadata.labels.team"];
    assert_eq!(entry["AttributeName"], "team", "{entry}");
    assert_eq!(entry["Info"]["Description"], "the owning team", "{entry}");

    let output = run_cli(
        &[
            "--config-file",
            &config,
            "do",
            "--data-only",
            &input,
            "u",
            "set-team",
            "payments",
        ],
        &[],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let data = text(&output.stdout);
    assert_eq!(data.matches("team: payments").count(), 3, "{data}");
    // Everything else is as it was: comments and quoting included.
    assert!(data.contains("  name: web # the front end\n"), "{data}");
    assert!(data.contains("example.com/owner: \"team-a\""), "{data}");

    let sequence = r#"[{"FunctionName": "set-team", "Arguments": [{"Value": "payments"}]},
                       {"FunctionName": "get-team", "Arguments": []}]"#;
    let output = run_cli(
        &["--config-file", &config, "doseq", &input, "u", sequence],
        &[],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let json = &stdout[stdout.find("\n[").unwrap()..];
    let values: Value = serde_json::from_str(json).unwrap();
    assert_eq!(values.as_array().unwrap().len(), 3, "{values}");
    assert!(
        values
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["Value"] == "payments")
    );

    // Without the configuration there is no such function.
    let output = run_cli(&["do", &input, "u", "get-team"], &[], b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stdout).contains("get-team: function does not exist"));
}

#[test]
fn declared_attribute_problems_are_reported_at_once_naming_each_field() {
    let dir = scratch();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "\
executor:
  attributes:
  - name: replicas
    paths: {apps/v1/Deployment: [spec.replicas]}
  - name: port
    parameters: [container-name]
    paths:
      apps v1: [spec.x]
      v1/Service: ['spec..x']
  - name: Tier
    paths: {}
",
    )
    .unwrap();
    let config = config.display().to_string();
    let output = run_cli(&["--config-file", &config, "list"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    for expected in [
        "executor.attributes[0].name: get-replicas already exists",
        "executor.attributes[0].name: set-replicas already exists",
        "executor.attributes[1].paths[\"apps v1\"]: \"apps v1\" is not a resource type",
        "executor.attributes[1].paths[\"apps v1\"][0]: \"spec.x\" has 0 %s, but 1 parameters are declared",
        "executor.attributes[1].paths[\"v1/Service\"][0]:",
        "executor.attributes[2].name: \"Tier\" is not a name",
        "executor.attributes[2].paths: empty",
    ] {
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
    }

    // A value of the wrong type is named by its key too.
    std::fs::write(
        dir.path().join("config.yaml"),
        "executor:\n  attributes:\n  - name: size\n    data_type: float\n    paths: {v1/Service: [spec.size]}\n",
    )
    .unwrap();
    let output = run_cli(&["--config-file", &config, "list"], &[], b"");
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("executor.attributes") && stderr.contains("float"),
        "{stderr}"
    );
}

/// Values of every kind kyaml keeps the written form of: comments (line, head, foot, nested),
/// anchors, aliases and tags, literal and folded block scalars with their indicators, flow
/// collections written over several lines, quoted and complex keys, escapes.
const WRITTEN_VALUES: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: values
data:
  literal: | # kept
    line one
      indented
    last
  strip: |-
    x
    y
  keep: |+
    x

  folded: >
    a folded line
    continues

    paragraph
  lead: |2
      indented first
    second
  anchored: &a 1
  alias: *a
  tagged: !!str 5
  anchoredLiteral: &lit |-
    x
    y
  anchoredMap: &m
    k: v
    'q': \"w\"
  flowMap: {a: b,
    c: [1,   2]}
  flowSeq: [1, 2,
     3]   # after the flow
  flowComment: [1, # one
    2]
  flowHead: [1,
    # head of 2
    2, 3]
  flowLast: [1, 2 # after two
    ]
  flowMapComment: {a: 1, # one
    b: 2}
  flowMapLast: {a: 1, b: 2 # c
    }
  flowNested: {a: [1, # x
      2], b: 3}
  flowFirstHead: [
    # head of the first
    1, 2]
  flowBracketComment: [ # dropped by yaml.v3
    1, 2]
  flowAfterNested: {a: [1], # after a nested one
    b: 2}
  flowLastNested: [[1] # after the last, nested
    ]
  plain: this is
    on two lines
  double: \"tab\\there
    caf\\u00e9 \\x41 \\U0001F600\"
  single: 'it''s
    two'
  emoji: plain 😀 text
  tabbed: 'single\twith a tab'
  trailingSpace: |
    a line ending in a space\x20
    next
  commented: # on the key
    # head of k
    k: v  # line of v
    # foot of k

    # head of j
    j: w
    # after j
  # head of list
  list:
  # head of item 0
  - a # line a
  # foot a

  # head b
  - b
      # deep comment
  - k: v  # lc
    # inner
    z: y
  - - nested
    - items
  - |
    literal item
  - # on the dash
    # below the dash
    k: v
  -
    below: dash
  wide:
    # head of the first item
    - name: a # c
      image: x
      env:
        - name: A
          value: \"1\"
          # after the last env entry
    # head of b
    - b
    -
  withEmpty:
    a:
    b: 1
  anchoredComment: &ac # after the anchor, to the first value below
    q: 1
  taggedList: !!seq # after the tag, to the first item
  - a
  taggedListOwn: !!seq # after the tag, to the first item, which has its own
  - a # own, below it
  - b
  taggedListFlow: !!seq # lost at a flow item with its own
  - [1] # own
  - b
  anchoredNested: &an # to the key below
    q:
      r: 1
  anchoredCarried: &acc # after the anchor, carried past a value with its own
    k: v # own
    j: w
  anchoredCarriedFar: &acf # carried past values with their own
    k: v # own
    j: w # own too
    i: z
  anchoredCarriedToMap: &acm # carried to a key whose value is a block collection
    k: v # own
    j:
      q: 1
  anchoredPastFlow: &apf # carried past a one-line flow collection
    k: [1]
    j: w
  anchoredPastAlias: &apa # carried past an alias with its own
    k: *a # own
    j: w
  anchoredToEmpty: &ate # to an empty value
    k:
    j: w
  anchoredPastFlowFar: &apff # past a flow collection, to a later key's empty value
    k: v # own
    j: [1]
    i:
  anchoredToBlockScalar: &atb # to a block scalar's header
    k: |
      lit
    j: w
  carriedOut:
    m: &co # carried out of its map, to the next key around it
      k: v # own
    n: 1
  ownKeyComment: &okc # lost at a key with a comment of its own
    k: v # own
    j: # own too
      q: 1
    i: 2
  anchoredLeaving: &al # carried out of the value, to the next key's line
    k: v # own
  afterLeaving:
    q: 1
  anchoredFlow: &af # lost before a flow collection
    q: [1,
      2]
  complexKeys:
    ? [complex, key]
    : flow key
    \"multi\\nline\": escaped key
  containers:
    - name: b
      value: >-
        folded
        text
    # after the folded value, carried to the next item's first key

    - name: c
      image: y
    # after a mapping item, before a scalar one

    # head of d
    - d
  \"quoted key\": 1
  ? complex
  : 2
  last: done
";

/// The text kpt (kyaml) writes for the value of `key` under `data:` in its re-encoding of a
/// resource (`kpt fn source`), as the value would be written alone: the lines below the key,
/// taken back to the indentation of a document's root.
fn kpt_value(encoded: &str, key: &str) -> String {
    let lines: Vec<&str> = encoded.lines().collect();
    let data = lines
        .iter()
        .position(|line| line.trim_end() == "  data:")
        .expect("data in kpt's output");
    let (at, indent, rest) = lines[data + 1..]
        .iter()
        .enumerate()
        .find_map(|(i, line)| {
            let indent = line.len() - line.trim_start().len();
            let rest = line.trim_start().strip_prefix(key)?.strip_prefix(':')?;
            (indent == 4).then(|| (data + 1 + i, indent, rest.trim_start()))
        })
        .unwrap_or_else(|| panic!("{key} in kpt's output:\n{encoded}"));
    let indent_of = |line: &str| line.len() - line.trim_start().len();
    // A flow collection that comments break over lines: up to its closing bracket, which a
    // mapping's is written at the first column.
    let open = |line: &str| -> isize {
        let code = line.split(" #").next().unwrap_or_default();
        code.matches(['[', '{']).count() as isize - code.matches([']', '}']).count() as isize
    };
    if rest.starts_with(['[', '{']) && open(rest) > 0 {
        let mut depth = open(rest);
        let mut value = format!("{rest}\n");
        for line in &lines[at + 1..] {
            value.push_str(line.get(indent.min(indent_of(line))..).unwrap_or_default());
            value.push('\n');
            depth += open(line);
            if depth <= 0 {
                break;
            }
        }
        return value;
    }
    let mut below: Vec<&str> = lines[at + 1..]
        .iter()
        .copied()
        .take_while(|line| {
            line.trim().is_empty()
                || indent_of(line) > indent
                || (indent_of(line) == indent && line.trim_start().starts_with(['-', '#']))
        })
        .collect();
    // Comments at the key's indentation after the value are the next key's head.
    while below
        .last()
        .is_some_and(|l| indent_of(l) == indent && l.trim_start().starts_with('#'))
    {
        below.pop();
    }
    let code = rest.split(" #").next().unwrap_or_default();
    let block_scalar = code
        .split_whitespace()
        .next_back()
        .is_some_and(|indicator| indicator.starts_with(['|', '>']));
    let sequence = below
        .iter()
        .find(|l| !l.trim_start().starts_with('#'))
        .is_some_and(|l| indent_of(l) == indent && l.trim_start().starts_with('-'));
    // A blank line after a foot comment belongs to what follows at its indentation; only a
    // block scalar's trailing lines are its own.
    while !block_scalar && below.last().is_some_and(|l| l.trim().is_empty()) {
        below.pop();
    }
    let strip = if block_scalar || sequence {
        indent
    } else {
        indent + 2
    };
    let mut value = String::new();
    if !rest.is_empty() && !rest.starts_with('#') {
        value.push_str(rest);
        value.push('\n');
    }
    for line in below {
        value.push_str(line.get(strip..).unwrap_or_default());
        value.push('\n');
    }
    value
}

#[test]
fn mutation_values_are_written_as_kyaml_writes_them() {
    if !have_tool("kpt") {
        return;
    }
    let dir = scratch();
    let package = dir.path().join("package");
    std::fs::create_dir(&package).unwrap();
    std::fs::write(package.join("values.yaml"), WRITTEN_VALUES).unwrap();
    let source = std::process::Command::new("kpt")
        .args(["fn", "source"])
        .arg(&package)
        .output()
        .expect("run kpt");
    assert!(source.status.success(), "{}", text(&source.stderr));
    let encoded = text(&source.stdout);

    let keys: Vec<&str> = WRITTEN_VALUES
        .split_once("\ndata:\n")
        .unwrap()
        .1
        .lines()
        .filter_map(|line| {
            let key = line.strip_prefix("  ")?.split_once(':')?.0;
            (!key.is_empty() && !key.starts_with([' ', '#', '-', '?'])).then_some(key)
        })
        .chain(["complex"])
        .collect();
    // Every value was `0` before: each is one Update holding the new node's text.
    let mut previous = WRITTEN_VALUES.split_once("\ndata:\n").unwrap().0.to_owned();
    previous.push_str("\ndata:\n");
    for key in &keys {
        previous.push_str(&format!("  {key}: 0\n"));
    }
    let output = run_cli(
        &[
            "do",
            "--output-only",
            package.join("values.yaml").to_str().unwrap(),
            "values",
            "--",
            "compute-mutations",
            &previous,
            "0",
        ],
        &[],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let mutations: Value = serde_json::from_slice(&output.stdout).unwrap();
    let paths = &mutations[0]["PathMutationMap"];
    assert_eq!(
        paths.as_object().map(|paths| paths.len()),
        Some(keys.len()),
        "{paths:#}"
    );
    for key in keys {
        let path = format!("data.{}", key.trim_matches('"'));
        let recorded = paths[&path]["Value"].as_str().unwrap_or_default();
        let expected = kpt_value(&encoded, key);
        assert_eq!(recorded, expected, "{path}; kpt wrote:\n{encoded}");
    }
}
