//! Reading the structured `results` a KRM function printed, for error messages.

use serde::Deserialize;

#[derive(Deserialize)]
struct ResourceListResults {
    #[serde(default)]
    results: Option<ResultsField>,
}

/// The spec's flat list, or the older kyaml-framework `{name, items}` shape (kpt accepts both).
#[derive(Deserialize)]
#[serde(untagged)]
enum ResultsField {
    Flat(Vec<KrmResult>),
    Framework { items: Vec<KrmResult> },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KrmResult {
    #[serde(default)]
    message: String,
    #[serde(default)]
    severity: Option<String>,
    #[serde(default)]
    resource_ref: Option<ResourceRef>,
    #[serde(default)]
    field: Option<FieldRef>,
    #[serde(default)]
    file: Option<FileRef>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceRef {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    /// The legacy kyaml shape nests name and namespace under `metadata`.
    #[serde(default)]
    metadata: Option<LegacyMetadata>,
}

#[derive(Deserialize)]
struct LegacyMetadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
struct FieldRef {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct FileRef {
    #[serde(default)]
    path: String,
}

/// How a failed function is described to the caller, as Porch words it: `<status> (<log>)`
/// (`exit status 1 (namespace missing)`), then one line per structured result it printed on
/// stdout, which Porch drops.
pub fn failure_detail(status: &str, log: &[u8], stdout: &[u8]) -> String {
    let mut detail = format!("{status} ({})", String::from_utf8_lossy(log).trim());
    let results = result_lines(stdout);
    if !results.is_empty() {
        detail.push_str("\nresults:");
        for line in results {
            detail.push_str("\n  ");
            detail.push_str(&line);
        }
    }
    detail
}

/// One line per result in `resource_list`, formatted as the KRM SDKs do:
/// `[<severity>] <apiVersion/kind/namespace/name> <field path>: <message>`. An unreadable
/// ResourceList has no results.
pub fn result_lines(resource_list: &[u8]) -> Vec<String> {
    let Ok(parsed) = yaml_serde::from_slice::<ResourceListResults>(resource_list) else {
        return Vec::new();
    };
    let results = match parsed.results {
        Some(ResultsField::Flat(results) | ResultsField::Framework { items: results }) => results,
        None => return Vec::new(),
    };
    results.iter().map(format_result).collect()
}

fn format_result(result: &KrmResult) -> String {
    let severity = result
        .severity
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("info");
    let mut line = format!("[{severity}]");
    if let Some(reference) = &result.resource_ref {
        let (name, namespace) = match &reference.metadata {
            Some(meta) if reference.name.is_empty() => {
                (meta.name.as_str(), meta.namespace.as_str())
            }
            _ => (reference.name.as_str(), reference.namespace.as_str()),
        };
        let parts = [
            reference.api_version.as_str(),
            &reference.kind,
            namespace,
            name,
        ];
        let joined = parts
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        if !joined.is_empty() {
            line.push(' ');
            line.push_str(&joined);
        }
    }
    if let Some(field) = result.field.as_ref().filter(|f| !f.path.is_empty()) {
        line.push(' ');
        line.push_str(&field.path);
    }
    if let Some(file) = result.file.as_ref().filter(|f| !f.path.is_empty()) {
        line.push_str(&format!(" ({})", file.path));
    }
    line.push_str(": ");
    line.push_str(&result.message);
    line
}

#[cfg(test)]
mod tests {
    use super::result_lines;

    #[test]
    fn flat_and_framework_shapes() {
        let flat = br#"
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items: []
results:
- message: namespace is required
  severity: error
  resourceRef: {apiVersion: v1, kind: ConfigMap, name: cfg, namespace: ns}
  field: {path: data.namespace}
- message: plain
"#;
        assert_eq!(
            result_lines(flat),
            vec![
                "[error] v1/ConfigMap/ns/cfg data.namespace: namespace is required",
                "[info]: plain"
            ]
        );
        let framework = br#"{"kind":"ResourceList","items":[],"results":{"name":"fn","items":[{"message":"m","severity":"warning","resourceRef":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}]}}"#;
        assert_eq!(result_lines(framework), vec!["[warning] v1/Pod/p: m"]);
        assert!(result_lines(b"not: [yaml").is_empty());
    }
}
