//! The Kubernetes OpenAPI schema, in one home: the JSON schemas k8s-openapi generates for the
//! Kubernetes version it targets ([`KUBERNETES_VERSION`]), with field descriptions and formats.
//! The build script writes them deflated into the library; [`schema`] inflates and parses
//! them on the first call only, so a process that never asks pays nothing but the blob's
//! bytes on disk.
//!
//! The definitions are JSON Schema objects as schemars writes them: a field whose type is
//! another definition is `{"$ref": "#/definitions/<name>", "description": ...}`, the description
//! being the field's own. k8s-openapi does not carry the `x-kubernetes-*` extensions
//! (list-map keys, merge strategies), so neither does this schema.

use std::io::Read;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;

/// The Kubernetes version whose schema this is (`1.37`), as k8s-openapi's version feature
/// selects it.
pub const KUBERNETES_VERSION: &str = include_str!(concat!(env!("OUT_DIR"), "/kubernetes-version"));

static DEFLATED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kube-schema.json.z"));

/// The bytes the deflated schema adds to every binary that links this crate.
pub fn deflated_len() -> usize {
    DEFLATED.len()
}

/// Where a definition's references point.
const REF_PREFIX: &str = "#/definitions/";

/// The most the inflated document may grow to: a corrupt blob stops here.
const INFLATED_LIMIT: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("the built-in Kubernetes schema could not be inflated")]
    Inflate(#[source] std::io::Error),
    #[error("the built-in Kubernetes schema is larger than {INFLATED_LIMIT} bytes")]
    TooLarge,
    #[error("the built-in Kubernetes schema is not the expected JSON")]
    Parse(#[source] serde_json::Error),
    #[error("the built-in Kubernetes schema lacks its {0:?} object")]
    Layout(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("resource type {0:?} is not of the form apps/v1/Deployment")]
    ResourceTypeForm(String),
    #[error("resource type {0:?} is not in the Kubernetes {KUBERNETES_VERSION} schema")]
    UnknownResourceType(String),
    #[error("field {field:?} is not in {definition:?}")]
    UnknownField { field: String, definition: String },
    #[error("field {field:?} is inside a {kind} value")]
    Primitive { field: String, kind: String },
    #[error("reference {0:?} names no definition")]
    Reference(String),
}

/// The most violations one resource reports.
const MAX_VIOLATIONS: usize = 100;

/// The deepest a checked value may nest.
const MAX_DEPTH: usize = 128;

/// A field that does not hold to the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted, keys with dots escaped as `~1`; empty for the resource itself.
    pub path: String,
    pub message: String,
}

impl Violation {
    fn new(path: &str, message: String) -> Self {
        Self {
            path: path.to_owned(),
            message,
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A value as a message quotes it: at most [`SHOWN_CHARS`] characters of it.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((end, _)) => format!("'{}...'", &text[..end]),
        None => format!("'{text}'"),
    }
}

/// The most of a value a violation quotes.
const SHOWN_CHARS: usize = 64;

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The parsed schema.
#[derive(Debug)]
pub struct Schema {
    /// `group/version/Kind` (`v1/Pod` for the core group) -> definition name.
    resources: Map<String, Value>,
    /// Laid out as Kubernetes serves its Swagger document: `swagger`, `info` and
    /// `definitions`, definition name (`io.k8s.api.apps.v1.Deployment`) -> JSON schema.
    openapi: Value,
}

/// The schema, inflated and parsed on the first call; later calls share it.
pub fn schema() -> Result<&'static Schema, &'static SchemaError> {
    static SCHEMA: OnceLock<Result<Schema, SchemaError>> = OnceLock::new();
    SCHEMA.get_or_init(Schema::load).as_ref()
}

impl Schema {
    fn load() -> Result<Self, SchemaError> {
        let mut json = Vec::new();
        flate2::read::ZlibDecoder::new(DEFLATED)
            .take(INFLATED_LIMIT + 1)
            .read_to_end(&mut json)
            .map_err(SchemaError::Inflate)?;
        if json.len() as u64 > INFLATED_LIMIT {
            return Err(SchemaError::TooLarge);
        }
        let Value::Object(mut document) =
            serde_json::from_slice(&json).map_err(SchemaError::Parse)?
        else {
            return Err(SchemaError::Layout("document"));
        };
        let mut take = |key: &'static str| match document.remove(key) {
            Some(Value::Object(map)) => Ok(map),
            _ => Err(SchemaError::Layout(key)),
        };
        let resources = take("resources")?;
        let definitions = take("definitions")?;
        let openapi = serde_json::json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": format!("v{KUBERNETES_VERSION}")},
            "definitions": definitions,
        });
        Ok(Self { resources, openapi })
    }

    /// The resource types the schema knows (`apps/v1/Deployment`), sorted.
    pub fn resource_types(&self) -> impl Iterator<Item = &str> {
        self.resources.keys().map(String::as_str)
    }

    /// The schema as a Swagger 2.0 document (`definitions` by name, references between
    /// them as `#/definitions/<name>`), what kpt gives starlark programs as `ctx.open_api`.
    pub fn openapi(&self) -> &Value {
        &self.openapi
    }

    /// The definition name of a resource type (`apps/v1/Deployment`).
    pub fn definition_name(&self, resource_type: &str) -> Option<&str> {
        self.resources.get(resource_type).and_then(Value::as_str)
    }

    /// The schema of a field (`spec.template.spec.containers.*.image`) of a resource type,
    /// walked as kubectl's OpenAPI model walks it, which is how ConfigHub finds its
    /// descriptions (`function/internal/handlers/kubernetes/schema.go`, LookupPath): `*`
    /// as the resource type means `v1/Pod`; a segment's `#part` is dropped; an array or a
    /// map consumes one segment, whatever it is; a reference is followed only when the path
    /// goes on, so a path ending on a reference gives the field's own schema (and its
    /// description), not the referenced definition's.
    pub fn lookup(&self, resource_type: &str, path: &str) -> Result<&Value, LookupError> {
        let resource_type = if resource_type == "*" {
            "v1/Pod"
        } else {
            resource_type
        };
        if !(2..=3).contains(&resource_type.split('/').count()) {
            return Err(LookupError::ResourceTypeForm(resource_type.to_owned()));
        }
        let name = self
            .definition_name(resource_type)
            .ok_or_else(|| LookupError::UnknownResourceType(resource_type.to_owned()))?;
        let mut current = self.definition(name)?;
        let mut current_name = name;
        let segments: Vec<String> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('.').map(|s| s.replace("~1", ".")).collect()
        };
        let mut segments = segments.iter().peekable();
        while let Some(segment) = segments.peek() {
            let field = segment.split('#').next().unwrap_or_default();
            if let Some(reference) = current.get("$ref").and_then(Value::as_str) {
                let target = reference.strip_prefix(REF_PREFIX).unwrap_or(reference);
                current = self.definition(target)?;
                current_name = target;
                continue;
            }
            if let Some(properties) = current.get("properties").and_then(Value::as_object) {
                current = properties
                    .get(field)
                    .ok_or_else(|| LookupError::UnknownField {
                        field: field.to_owned(),
                        definition: current_name.to_owned(),
                    })?;
            } else if let Some(items) = current.get("items") {
                current = items;
            } else if let Some(values) = current.get("additionalProperties")
                && values.is_object()
            {
                current = values;
            } else {
                return Err(LookupError::Primitive {
                    field: field.to_owned(),
                    kind: current
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("untyped")
                        .to_owned(),
                });
            }
            segments.next();
        }
        Ok(current)
    }

    /// The description of a field, when the schema has one and it is not empty.
    pub fn description(&self, resource_type: &str, path: &str) -> Option<&str> {
        self.lookup(resource_type, path)
            .ok()
            .and_then(|s| s.get("description"))
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
    }

    /// Checks a resource against its type's schema, as ConfigHub's Kubernetes `validate` does
    /// with kubeconform in strict mode: each field's type (`null` is allowed anywhere, an
    /// int-or-string field takes either), required fields, and no field the schema does not
    /// name. `None` when the schema has no such type (kubeconform's IgnoreMissingSchemas);
    /// otherwise the violations, each naming its path.
    pub fn validate(&self, resource_type: &str, resource: &Value) -> Option<Vec<Violation>> {
        let name = self.definition_name(resource_type)?;
        let mut violations = Vec::new();
        let root = Value::String(format!("{REF_PREFIX}{name}"));
        let schema = serde_json::json!({ "$ref": root });
        self.check(&schema, resource, &mut String::new(), 0, &mut violations);
        Some(violations)
    }

    fn check(
        &self,
        schema: &Value,
        value: &Value,
        path: &mut String,
        depth: usize,
        out: &mut Vec<Violation>,
    ) {
        if value.is_null() || out.len() >= MAX_VIOLATIONS {
            return;
        }
        if depth > MAX_DEPTH {
            out.push(Violation::new(
                path,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
            return;
        }
        let mut schema = schema;
        while let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let target = reference.strip_prefix(REF_PREFIX).unwrap_or(reference);
            match self.definition(target) {
                Ok(definition) => schema = definition,
                Err(_) => return,
            }
        }
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            if !(value.is_string() || value.is_i64() || value.is_u64()) {
                out.push(Violation::new(
                    path,
                    format!("expected integer or string, but got {}", kind_of(value)),
                ));
            }
            return;
        }
        let expected = schema.get("type").and_then(Value::as_str);
        let fits = match expected {
            None => true,
            Some("object") => value.is_object(),
            Some("array") => value.is_array(),
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            Some(_) => true,
        };
        if !fits {
            out.push(Violation::new(
                path,
                format!(
                    "expected {}, but got {}",
                    expected.unwrap_or_default(),
                    kind_of(value)
                ),
            ));
            return;
        }
        if let Some(text) = value.as_str()
            && schema.get("format").and_then(Value::as_str) == Some("date-time")
            && time::OffsetDateTime::parse(text, &Rfc3339).is_err()
        {
            out.push(Violation::new(
                path,
                format!("{} is not valid 'date-time'", shown(text)),
            ));
            return;
        }
        let len = path.len();
        if let Some(map) = value.as_object() {
            let properties = schema.get("properties").and_then(Value::as_object);
            let values = schema.get("additionalProperties").filter(|v| v.is_object());
            if properties.is_none() && values.is_none() {
                return;
            }
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                let missing: Vec<String> = required
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|field| map.get(*field).is_none_or(Value::is_null))
                    .map(|field| format!("'{field}'"))
                    .collect();
                if !missing.is_empty() {
                    out.push(Violation::new(
                        path,
                        format!("missing properties: {}", missing.join(", ")),
                    ));
                }
            }
            for (key, item) in map {
                let field = properties.and_then(|p| p.get(key)).or(values);
                let Some(field) = field else {
                    out.push(Violation::new(
                        path,
                        format!("additional property '{key}' not allowed"),
                    ));
                    continue;
                };
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.replace('.', "~1"));
                self.check(field, item, path, depth + 1, out);
                path.truncate(len);
            }
        } else if let (Some(list), Some(items)) = (value.as_array(), schema.get("items")) {
            for (i, item) in list.iter().enumerate() {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&i.to_string());
                self.check(items, item, path, depth + 1, out);
                path.truncate(len);
            }
        }
    }

    fn definition(&self, name: &str) -> Result<&Value, LookupError> {
        self.openapi["definitions"]
            .get(name)
            .ok_or_else(|| LookupError::Reference(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_validated_strictly() {
        let schema = schema().expect("the built-in schema loads");
        let good = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"a": "b"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                "template": {"spec": {"containers": [{"name": "w", "image": "nginx",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "1", "memory": 512}}}]}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}}
        });
        assert_eq!(schema.validate("apps/v1/Deployment", &good), Some(vec![]));
        let bad = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": "two", "template": {"spec": {"containers": [{"name": "w", "imag": "nginx"}]}},
                "strategy": {"rollingUpdate": {"maxSurge": 1.5}}}
        });
        let found: Vec<String> = schema
            .validate("apps/v1/Deployment", &bad)
            .expect("a known type")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "spec: missing properties: 'selector'",
                "spec.replicas: expected integer, but got string",
                "spec.strategy.rollingUpdate.maxSurge: expected integer or string, but got number",
                "spec.template.spec.containers.0: additional property 'imag' not allowed",
            ]
        );
        assert_eq!(schema.validate("example.com/v1/Widget", &bad), None);
    }

    #[test]
    fn times_are_rfc_3339_date_times() {
        let schema = schema().expect("the built-in schema loads");
        let namespace = |created: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "a", "creationTimestamp": created}})
        };
        for good in ["2026-12-06T06:05:50Z", "2026-12-06T06:05:50.123+01:00"] {
            assert_eq!(
                schema.validate("v1/Namespace", &namespace(good)),
                Some(vec![])
            );
        }
        let long = "9".repeat(100);
        for (bad, shown) in [
            ("yesterday", "'yesterday'"),
            ("2026-13-06T06:05:50Z", "'2026-13-06T06:05:50Z'"),
            ("2026-12-06 06:05:50", "'2026-12-06 06:05:50'"),
            (long.as_str(), &format!("'{}...'", &long[..64])),
        ] {
            let found = schema.validate("v1/Namespace", &namespace(bad));
            assert_eq!(
                found,
                Some(vec![Violation::new(
                    "metadata.creationTimestamp",
                    format!("{shown} is not valid 'date-time'")
                )]),
                "{bad}"
            );
        }
    }

    #[test]
    fn field_descriptions_are_kubernetes_own() {
        let schema = schema().expect("the built-in schema loads");
        assert_eq!(
            schema.description("apps/v1/Deployment", "spec.replicas"),
            Some(
                "Number of desired pods. This is a pointer to distinguish between explicit zero and not specified. Defaults to 1."
            )
        );
        // Arrays consume the selecting segment; the accessor part is dropped.
        let image = schema
            .description(
                "apps/v1/Deployment",
                "spec.template.spec.containers.*?name:container-name.image#uri",
            )
            .expect("a container's image is described");
        assert!(image.starts_with("Container image name."), "{image}");
        // A path ending on a reference gives the field's description, not the definition's.
        let selector = schema
            .description("apps/v1/Deployment", "spec.selector")
            .expect("described");
        assert!(
            selector.starts_with("Label selector for pods."),
            "{selector}"
        );
        // `*` is a Pod; the core group has no group segment.
        assert!(schema.description("*", "spec.containers.0.name").is_some());
        let port = schema
            .lookup("v1/Service", "spec.ports.0.port")
            .expect("found");
        assert_eq!(port.get("format").and_then(Value::as_str), Some("int32"));
    }

    #[test]
    fn unknown_types_fields_and_forms_are_named() {
        let schema = schema().expect("the built-in schema loads");
        assert_eq!(
            schema.lookup("Deployment", "spec"),
            Err(LookupError::ResourceTypeForm("Deployment".into()))
        );
        assert_eq!(
            schema.lookup("example.com/v1/Widget", "spec"),
            Err(LookupError::UnknownResourceType(
                "example.com/v1/Widget".into()
            ))
        );
        assert!(matches!(
            schema.lookup("apps/v1/Deployment", "spec.nope"),
            Err(LookupError::UnknownField { field, .. }) if field == "nope"
        ));
        assert!(matches!(
            schema.lookup("apps/v1/Deployment", "spec.replicas.deeper"),
            Err(LookupError::Primitive { field, .. }) if field == "deeper"
        ));
        // A map's values are whatever key is asked.
        assert!(schema.lookup("v1/ConfigMap", "data.anything").is_ok());
        assert!(
            schema
                .resource_types()
                .any(|t| t == "networking.k8s.io/v1/Ingress")
        );
        assert!(KUBERNETES_VERSION.starts_with("1."));
        assert_eq!(
            schema.openapi()["definitions"]["io.k8s.api.apps.v1.Deployment"]["description"],
            "Deployment enables declarative updates for Pods and ReplicaSets."
        );
    }
}
