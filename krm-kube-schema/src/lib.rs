//! The Kubernetes OpenAPI schema, in one home: the JSON schemas k8s-openapi generates for the
//! Kubernetes version it targets ([`KUBERNETES_VERSION`]), with field descriptions and formats.
//! The build script writes them deflated into the library; [`schema`] inflates and parses
//! them on the first call only, so a process that never asks pays nothing but the blob's
//! bytes on disk.
//!
//! The definitions are JSON Schema objects as schemars writes them: a field whose type is
//! another definition is `{"$ref": "#/$defs/<name>", "description": ...}`, the description
//! being the field's own. k8s-openapi does not carry the `x-kubernetes-*` extensions
//! (list-map keys, merge strategies), so neither does this schema.

use std::io::Read;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The Kubernetes version whose schema this is (`1.37`), as k8s-openapi's version feature
/// selects it.
pub const KUBERNETES_VERSION: &str = include_str!(concat!(env!("OUT_DIR"), "/kubernetes-version"));

static DEFLATED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kube-schema.json.z"));

/// Where a definition's references point.
const REF_PREFIX: &str = "#/$defs/";

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

/// The parsed schema.
#[derive(Debug)]
pub struct Schema {
    /// `group/version/Kind` (`v1/Pod` for the core group) -> definition name.
    resources: Map<String, Value>,
    /// Definition name (`io.k8s.api.apps.v1.Deployment`) -> JSON schema.
    definitions: Map<String, Value>,
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
        Ok(Self {
            resources: take("resources")?,
            definitions: take("definitions")?,
        })
    }

    /// The resource types the schema knows (`apps/v1/Deployment`), sorted.
    pub fn resource_types(&self) -> impl Iterator<Item = &str> {
        self.resources.keys().map(String::as_str)
    }

    /// Every definition by name (`io.k8s.api.core.v1.PodSpec`), references between them as
    /// `#/$defs/<name>`.
    pub fn definitions(&self) -> &Map<String, Value> {
        &self.definitions
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

    fn definition(&self, name: &str) -> Result<&Value, LookupError> {
        self.definitions
            .get(name)
            .ok_or_else(|| LookupError::Reference(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
