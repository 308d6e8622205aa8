//! Property tests of FunctionConfig loading: whatever a file holds (a valid object mutated byte
//! by byte, YAML-ish noise, deep nesting), loading returns without panicking, and every error
//! is bounded and names the file and the document, field or position at fault.
//!
//! `cargo test` runs a bounded smoke run; `PROPTEST_CASES=100000 cargo test -p
//! krm-runner-function-config --test loading_properties` runs a longer one.

use std::path::Path;

use krm_runner_function_config::config_file::{self, MAX_YAML_DEPTH, YamlError};
use krm_runner_function_config::{FunctionConfigLoadError, load_paths};
use proptest::prelude::*;

const SAMPLE: &str = "\
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: set-namespace
spec:
  image: set-namespace
  prefixes: [\"\", ghcr.io/kptdev/krm-functions-catalog]
  goExecutor:
    tags: [v0.4, v0.4.5]
  binaryExecutor: {tags: [v0.4.1], path: set-namespace}
  podExecutor:
    tags: []
    timeToLive: 30m
    maxParallelExecutions: 2
    templateOverrides:
      container:
        env: [{name: A, value: b}]
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: second}
spec: {image: second, goExecutor: {tags: [v1]}}
";

/// The longest message an error may have beyond the file's path: errors quote at most a
/// field name or a short excerpt, never the input.
const MESSAGE_LIMIT: usize = 1024;

/// Applies (position, byte, operation) edits: 0 replaces, 1 inserts, 2 deletes.
fn mutate(text: &str, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for &(position, byte, operation) in edits {
        if bytes.is_empty() {
            bytes.push(byte);
            continue;
        }
        let position = position % bytes.len();
        match operation {
            0 => bytes[position] = byte,
            1 => bytes.insert(position, byte),
            _ => {
                bytes.remove(position);
            }
        }
    }
    bytes
}

/// Loads `content` from a file and checks every error it yields.
fn load_and_check(content: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fns.yaml");
    std::fs::write(&file, content).unwrap();
    let (loaded, errors) = load_paths(std::slice::from_ref(&file));
    prop_assert!(loaded.len() <= content.len());
    for error in &errors {
        check_error(error, &file)?;
    }
    Ok(())
}

fn check_error(error: &FunctionConfigLoadError, file: &Path) -> Result<(), TestCaseError> {
    let message = error.to_string();
    let file = file.display().to_string();
    prop_assert!(message.starts_with(&file), "names the file: {message}");
    prop_assert!(
        message.len() <= file.len() + MESSAGE_LIMIT,
        "bounded: {} bytes: {message}",
        message.len()
    );
    let names_the_place = match error {
        FunctionConfigLoadError::File(_) => message.contains("not UTF-8 text"),
        FunctionConfigLoadError::Yaml { .. } => {
            message.contains(", document ") && message.contains("line ")
        }
        FunctionConfigLoadError::NotFunctionConfig { .. } => message.contains(", document "),
        FunctionConfigLoadError::Decode { field, .. } => {
            message.contains(", document ") && !field.is_empty()
        }
        FunctionConfigLoadError::Invalid { errors, .. } => {
            message.contains(", document ") && errors.iter().all(|e| !e.field.is_empty())
        }
        FunctionConfigLoadError::Missing { .. } | FunctionConfigLoadError::Read { .. } => false,
    };
    prop_assert!(names_the_place, "names the document and place: {message}");
    Ok(())
}

/// Flow and block collections, scalars and YAML's indicators, so that the noise reaches deep
/// into the parser rather than failing on the first byte.
fn yaml_noise() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("["),
        Just("]"),
        Just("{"),
        Just("}"),
        Just(", "),
        Just(": "),
        Just("- "),
        Just("\n"),
        Just("\n  "),
        Just("---\n"),
        Just("&a "),
        Just("*a"),
        Just("!tag "),
        Just("? "),
        Just("|\n  "),
        Just("\""),
        Just("'"),
        Just("# c\n"),
        Just("apiVersion"),
        Just("config.porch.kpt.dev/v1alpha1"),
        Just("kind"),
        Just("FunctionConfig"),
        Just("spec"),
        Just("image"),
        Just("goExecutor"),
        Just("tags"),
        Just("x"),
        Just("1"),
    ];
    prop::collection::vec(piece, 0..200).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_function_configs_load_or_fail_naming_the_place(
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..12)
    ) {
        load_and_check(&mutate(SAMPLE, &edits))?;
    }

    #[test]
    fn yaml_noise_loads_or_fails_naming_the_place(text in yaml_noise()) {
        load_and_check(text.as_bytes())?;
    }

    #[test]
    fn nesting_is_refused_exactly_past_the_limit(
        depth in 1usize..400,
        opener in prop_oneof![Just("["), Just("{"), Just("- ")],
    ) {
        let text = format!("{}x", opener.repeat(depth));
        let checked = config_file::check_yaml_depth(&text);
        if depth > MAX_YAML_DEPTH {
            let refused = matches!(checked, Err(YamlError::TooDeep { document: 1, line: 1, .. }));
            prop_assert!(refused, "{checked:?}");
        } else {
            prop_assert!(checked.is_ok(), "{checked:?}");
        }
    }
}
