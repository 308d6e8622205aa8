//! Checking a function's output as krm-functions-sdk's `fn.ParseResourceList` does, with its
//! error messages, and formatting its structured results as the SDK's `Results.Error()`.

use yaml_serde::Value;

/// Ok when `output` is exactly one YAML (or JSON) object of kind `ResourceList`; otherwise the
/// SDK's error message.
pub fn check(output: &[u8]) -> Result<(), String> {
    let mut objects = Vec::new();
    for document in yaml_serde::Deserializer::from_slice(output) {
        let value = <Value as serde::Deserialize>::deserialize(document).map_err(|e| {
            format!("failed to parse input bytes: failed to parse input bytes: {e}")
        })?;
        match value {
            Value::Null => {}
            Value::Mapping(mapping) => objects.push(mapping),
            _ => {
                return Err(
                    "failed to parse input bytes: failed to extract objects: wrong node kind: \
                     expected MappingNode"
                        .to_owned(),
                );
            }
        }
    }
    let [object] = objects.as_slice() else {
        return Err(format!(
            "failed to parse input bytes: expected exactly one object, got {}",
            objects.len()
        ));
    };
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "ResourceList" {
        return Err(format!(
            "input was of unexpected kind {kind:?}; expected ResourceList"
        ));
    }
    Ok(())
}

/// The SDK's `Results.Error()`: each result on its own line, separated by a blank line.
pub fn results_text(output: &[u8]) -> String {
    krm_function_process::results::result_lines(output).join("\n\n")
}

/// Whether any result has severity `error` (the SDK's `Results.ExitCode() == 1`).
pub fn has_error_result(output: &[u8]) -> bool {
    krm_function_process::results::result_lines(output)
        .iter()
        .any(|line| line.starts_with("[error]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_as_the_sdk() {
        assert!(
            check(b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n").is_ok()
        );
        assert!(check(br#"{"kind":"ResourceList","items":[]}"#).is_ok());
        assert_eq!(
            check(b"").unwrap_err(),
            "failed to parse input bytes: expected exactly one object, got 0"
        );
        assert_eq!(
            check(b"kind: ResourceList\n---\nkind: ResourceList\n").unwrap_err(),
            "failed to parse input bytes: expected exactly one object, got 2"
        );
        assert_eq!(
            check(b"kind: ConfigMap\n").unwrap_err(),
            "input was of unexpected kind \"ConfigMap\"; expected ResourceList"
        );
        assert!(
            check(b"a: [")
                .unwrap_err()
                .starts_with("failed to parse input bytes: failed to parse input bytes: ")
        );
        assert!(
            check(b"garbage")
                .unwrap_err()
                .contains("failed to extract objects")
        );
    }

    #[test]
    fn results_joined_by_blank_line() {
        let output =
            b"kind: ResourceList\nresults:\n- message: a\n  severity: error\n- message: b\n";
        assert_eq!(results_text(output), "[error]: a\n\n[info]: b");
        assert!(has_error_result(output));
        assert_eq!(results_text(b"kind: ResourceList\n"), "");
    }
}
