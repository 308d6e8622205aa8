//! The path registry: attribute name -> resource type -> unresolved path -> what is there.
//! Path-visitor functions (`get-replicas`, `set-image`, ...) are generated from it, and
//! `listpaths` shows it (the JSON layout is ConfigHub's).

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::api::{AttributeDetails, DataType, FunctionInvocation};

/// Matches every resource type.
pub const ANY_RESOURCE_TYPE: &str = "*";

/// How a part of a scalar is reached (`image#reference`): a regular expression whose named
/// groups are the parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EmbeddedAccessorType {
    Regexp,
}

/// One registered path (ConfigHub's PathVisitorInfo).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PathVisitorInfo {
    /// Unresolved; `%s` placeholders take the path parameters in order; `#part` selects a
    /// named group of the embedded accessor.
    pub path: String,
    pub attribute_name: String,
    pub data_type: DataType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<AttributeDetails>,
    /// Resource types a `*` registration skips (a JSON object of empty objects, as Go writes
    /// a set).
    #[serde(
        default,
        skip_serializing_if = "BTreeSet::is_empty",
        with = "set_as_object"
    )]
    pub type_exceptions: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedded_accessor_type: Option<EmbeddedAccessorType>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub embedded_accessor_config: String,
}

impl PathVisitorInfo {
    pub fn new(attribute_name: &str, path: &str, data_type: DataType) -> Self {
        Self {
            path: path.to_owned(),
            attribute_name: attribute_name.to_owned(),
            data_type,
            info: None,
            type_exceptions: BTreeSet::new(),
            embedded_accessor_type: None,
            embedded_accessor_config: String::new(),
        }
    }

    /// Names the getter and setters that read and write this attribute.
    pub fn with_functions(mut self, getter: Option<&str>, setters: &[&str]) -> Self {
        self.info = Some(AttributeDetails {
            getter_invocation: getter.map(|g| FunctionInvocation::new(g, Vec::new())),
            setter_invocations: setters
                .iter()
                .map(|s| FunctionInvocation::new(*s, Vec::new()))
                .collect(),
            ..AttributeDetails::default()
        });
        self
    }

    pub fn except(mut self, resource_types: &[&str]) -> Self {
        self.type_exceptions
            .extend(resource_types.iter().map(|t| (*t).to_owned()));
        self
    }

    pub fn with_accessor(mut self, regexp: &str) -> Self {
        self.embedded_accessor_type = Some(EmbeddedAccessorType::Regexp);
        self.embedded_accessor_config = regexp.to_owned();
        self
    }
}

mod set_as_object {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, Default)]
    struct Empty {}

    pub fn serialize<S: Serializer>(
        set: &BTreeSet<String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&String, Empty> = set.iter().map(|k| (k, Empty {})).collect();
        map.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeSet<String>, D::Error> {
        let map: Option<BTreeMap<String, Empty>> = Option::deserialize(deserializer)?;
        Ok(map.unwrap_or_default().into_keys().collect())
    }
}

/// Resource type -> unresolved path -> entry.
pub type ResourceTypePaths = BTreeMap<String, BTreeMap<String, PathVisitorInfo>>;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("attribute {attribute:?}, path {path:?}: embedded accessor regexp is invalid")]
    Accessor {
        attribute: String,
        path: String,
        #[source]
        source: regex::Error,
    },
}

/// Attribute name -> resource type -> path -> entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PathRegistry {
    attributes: BTreeMap<String, ResourceTypePaths>,
}

impl PathRegistry {
    /// Registers `entry` for each of `resource_types`.
    pub fn register(
        &mut self,
        resource_types: &[&str],
        entry: PathVisitorInfo,
    ) -> Result<(), RegistryError> {
        if !entry.embedded_accessor_config.is_empty() {
            Regex::new(&entry.embedded_accessor_config).map_err(|source| {
                RegistryError::Accessor {
                    attribute: entry.attribute_name.clone(),
                    path: entry.path.clone(),
                    source,
                }
            })?;
        }
        let types = self
            .attributes
            .entry(entry.attribute_name.clone())
            .or_default();
        for resource_type in resource_types {
            types
                .entry((*resource_type).to_owned())
                .or_default()
                .insert(entry.path.clone(), entry.clone());
        }
        Ok(())
    }

    pub fn attribute(&self, attribute_name: &str) -> Option<&ResourceTypePaths> {
        self.attributes.get(attribute_name)
    }

    /// The entries of `attribute_name` that apply to `resource_type`: its own, then the `*`
    /// ones it is not an exception to.
    pub fn paths_for<'r>(
        &'r self,
        attribute_name: &str,
        resource_type: &str,
    ) -> Vec<&'r PathVisitorInfo> {
        let Some(types) = self.attributes.get(attribute_name) else {
            return Vec::new();
        };
        let own = types
            .get(resource_type)
            .into_iter()
            .flat_map(|p| p.values());
        let any = types
            .get(ANY_RESOURCE_TYPE)
            .into_iter()
            .flat_map(|p| p.values())
            .filter(|entry| !entry.type_exceptions.contains(resource_type));
        own.chain(any).collect()
    }

    /// The resource types an attribute is registered for (`*` included).
    pub fn resource_types(&self, attribute_name: &str) -> Vec<String> {
        self.attributes
            .get(attribute_name)
            .map(|types| types.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn attributes(&self) -> impl Iterator<Item = (&String, &ResourceTypePaths)> {
        self.attributes.iter()
    }
}

/// Kubernetes attribute names (ConfigHub's where it has one).
pub mod attribute {
    pub const REPLICAS: &str = "replicas";
    pub const CONTAINER_NAME: &str = "container-name";
    pub const CONTAINER_IMAGE: &str = "container-image";
    pub const CONTAINER_REPOSITORY_URI: &str = "container-repository-uri";
    pub const CONTAINER_IMAGE_REFERENCE: &str = "container-image-reference";
    pub const ENV_VALUE: &str = "env-value";
    pub const LABEL_VALUE: &str = "label-value";
    pub const ANNOTATION_VALUE: &str = "annotation-value";
    pub const NAMESPACE_REFERENCE: &str = "namespace-name-reference";
    pub const HOSTNAME: &str = "hostname";
    pub const SUBDOMAIN: &str = "subdomain";
    pub const DOMAIN: &str = "domain";
    pub const GENERAL: &str = "attribute-value";
    pub const PROVIDED: &str = "provided-value";
}

/// Workload controllers whose pods come from `spec.template`.
pub const POD_TEMPLATE_TYPES: &[&str] = &[
    "apps/v1/Deployment",
    "apps/v1/ReplicaSet",
    "apps/v1/StatefulSet",
    "apps/v1/DaemonSet",
    "batch/v1/Job",
];

/// Controllers with a `spec.replicas`.
pub const REPLICATED_TYPES: &[&str] = &[
    "apps/v1/Deployment",
    "apps/v1/ReplicaSet",
    "apps/v1/StatefulSet",
];

/// Kinds without a namespace (their `metadata.namespace` is not touched).
pub const CLUSTER_SCOPED_TYPES: &[&str] = &[
    "v1/Namespace",
    "v1/Node",
    "v1/PersistentVolume",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "apiextensions.k8s.io/v1/CustomResourceDefinition",
    "storage.k8s.io/v1/StorageClass",
    "scheduling.k8s.io/v1/PriorityClass",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "networking.k8s.io/v1/IngressClass",
];

/// An image: `[registry/]repository` then `:tag` and/or `@digest`.
pub const IMAGE_ACCESSOR: &str = r"^(?P<uri>[^@:]+(?::[0-9]+/[^@:]+)?)(?P<reference>(?::[^@/]+)?(?:@[A-Za-z0-9_+.-]+:[A-Fa-f0-9]+)?)$";

/// A DNS name: its first label, and the rest.
pub const HOSTNAME_ACCESSOR: &str = r"^(?P<subdomain>[^.]+)\.(?P<domain>.+)$";

/// The annotation external-dns reads a Service's hostname from.
pub const EXTERNAL_DNS_HOSTNAME: &str =
    "metadata.annotations.external-dns~1alpha~1kubernetes~1io/hostname";

/// Where the pod spec sits in each pod-owning type.
pub fn pod_spec_prefixes() -> Vec<(&'static str, &'static str)> {
    let mut prefixes: Vec<_> = POD_TEMPLATE_TYPES
        .iter()
        .map(|t| (*t, "spec.template.spec"))
        .collect();
    prefixes.push(("v1/Pod", "spec"));
    prefixes.push(("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec"));
    prefixes
}

impl PathRegistry {
    /// The registry for Kubernetes resources in YAML.
    pub fn kubernetes() -> Self {
        let mut registry = Self::default();
        let mut add = |types: &[&str], entry: PathVisitorInfo| {
            registry
                .register(types, entry)
                .expect("built-in accessors compile");
        };
        use attribute::*;
        add(
            REPLICATED_TYPES,
            PathVisitorInfo::new(REPLICAS, "spec.replicas", DataType::Int)
                .with_functions(Some("get-replicas"), &["set-replicas"]),
        );
        for (resource_type, pod_spec) in pod_spec_prefixes() {
            for list in ["containers", "initContainers"] {
                let container = format!("{pod_spec}.{list}.?name:container-name=%s");
                add(
                    &[resource_type],
                    PathVisitorInfo::new(
                        CONTAINER_NAME,
                        &format!("{pod_spec}.{list}.*.name"),
                        DataType::String,
                    )
                    .with_functions(Some("get-container-name"), &[]),
                );
                add(
                    &[resource_type],
                    PathVisitorInfo::new(
                        CONTAINER_IMAGE,
                        &format!("{container}.image"),
                        DataType::String,
                    )
                    .with_functions(Some("get-image"), &["set-image"]),
                );
                add(
                    &[resource_type],
                    PathVisitorInfo::new(
                        CONTAINER_REPOSITORY_URI,
                        &format!("{container}.image#uri"),
                        DataType::String,
                    )
                    .with_accessor(IMAGE_ACCESSOR)
                    .with_functions(Some("get-image-uri"), &["set-image-uri"]),
                );
                add(
                    &[resource_type],
                    PathVisitorInfo::new(
                        CONTAINER_IMAGE_REFERENCE,
                        &format!("{container}.image#reference"),
                        DataType::String,
                    )
                    .with_accessor(IMAGE_ACCESSOR)
                    .with_functions(Some("get-image-reference"), &["set-image-reference"]),
                );
                add(
                    &[resource_type],
                    PathVisitorInfo::new(
                        ENV_VALUE,
                        &format!("{container}.env.?name:env-var=%s.value"),
                        DataType::String,
                    )
                    .with_functions(Some("get-env-var"), &["set-env-var"]),
                );
            }
        }
        add(
            &[ANY_RESOURCE_TYPE],
            PathVisitorInfo::new(
                LABEL_VALUE,
                "metadata.labels.@%s:label-key",
                DataType::String,
            )
            .with_functions(Some("get-label"), &["set-label"]),
        );
        add(
            &[ANY_RESOURCE_TYPE],
            PathVisitorInfo::new(
                ANNOTATION_VALUE,
                "metadata.annotations.@%s:annotation-key",
                DataType::String,
            )
            .with_functions(Some("get-annotation"), &["set-annotation"]),
        );
        add(
            &[ANY_RESOURCE_TYPE],
            PathVisitorInfo::new(NAMESPACE_REFERENCE, "metadata.namespace", DataType::String)
                .except(CLUSTER_SCOPED_TYPES)
                .with_functions(Some("get-namespace"), &["set-namespace"]),
        );
        add(
            &[
                "rbac.authorization.k8s.io/v1/RoleBinding",
                "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
            ],
            PathVisitorInfo::new(
                NAMESPACE_REFERENCE,
                "subjects.*.namespace",
                DataType::String,
            )
            .with_functions(Some("get-namespace"), &["set-namespace"]),
        );
        // `get-attributes` reads everything registered under the general attribute.
        add(
            REPLICATED_TYPES,
            PathVisitorInfo::new(GENERAL, "spec.replicas", DataType::Int)
                .with_functions(Some("get-replicas"), &["set-replicas"]),
        );
        for (resource_type, pod_spec) in pod_spec_prefixes() {
            add(
                &[resource_type],
                PathVisitorInfo::new(
                    GENERAL,
                    &format!("{pod_spec}.containers.*?name:container-name.image"),
                    DataType::String,
                )
                .with_functions(Some("get-image"), &["set-image"]),
            );
        }
        add(
            &[ANY_RESOURCE_TYPE],
            PathVisitorInfo::new(GENERAL, "metadata.namespace", DataType::String)
                .except(CLUSTER_SCOPED_TYPES)
                .with_functions(Some("get-namespace"), &["set-namespace"]),
        );
        // Names other resources refer to: what `get-provided` offers for needed values.
        add(
            &[
                "v1/Namespace",
                "v1/ServiceAccount",
                "v1/ConfigMap",
                "v1/Secret",
                "v1/Service",
                "v1/PersistentVolumeClaim",
                "rbac.authorization.k8s.io/v1/Role",
                "rbac.authorization.k8s.io/v1/ClusterRole",
                "scheduling.k8s.io/v1/PriorityClass",
                "storage.k8s.io/v1/StorageClass",
            ],
            PathVisitorInfo::new(PROVIDED, "metadata.name", DataType::String),
        );
        let hostname_paths = [
            ("networking.k8s.io/v1/Ingress", "spec.rules.*.host"),
            ("networking.k8s.io/v1/Ingress", "spec.tls.*.hosts.*"),
            ("v1/Service", EXTERNAL_DNS_HOSTNAME),
        ];
        for (resource_type, path) in hostname_paths {
            for attribute in [HOSTNAME, GENERAL] {
                add(
                    &[resource_type],
                    PathVisitorInfo::new(attribute, path, DataType::String)
                        .with_functions(Some("get-hostname"), &["set-hostname"]),
                );
            }
            for (attribute, part) in [(SUBDOMAIN, "subdomain"), (DOMAIN, "domain")] {
                add(
                    &[resource_type],
                    PathVisitorInfo::new(attribute, &format!("{path}#{part}"), DataType::String)
                        .with_accessor(HOSTNAME_ACCESSOR)
                        .with_functions(
                            Some(&format!("get-hostname-{part}")),
                            &[&format!("set-hostname-{part}")],
                        ),
                );
            }
        }
        registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_type_entries_skip_their_exceptions() {
        let registry = PathRegistry::kubernetes();
        let paths = |t: &str| -> Vec<String> {
            registry
                .paths_for(attribute::NAMESPACE_REFERENCE, t)
                .iter()
                .map(|e| e.path.clone())
                .collect()
        };
        assert_eq!(paths("apps/v1/Deployment"), ["metadata.namespace"]);
        assert!(paths("v1/Namespace").is_empty());
        assert_eq!(
            paths("rbac.authorization.k8s.io/v1/RoleBinding"),
            ["subjects.*.namespace", "metadata.namespace"]
        );
    }

    #[test]
    fn bad_accessors_are_refused_naming_the_path() {
        let mut registry = PathRegistry::default();
        let err = registry
            .register(
                &["v1/Pod"],
                PathVisitorInfo::new("x", "spec.x#y", DataType::String).with_accessor("(unclosed"),
            )
            .unwrap_err();
        assert!(err.to_string().contains("\"spec.x#y\""), "{err}");
    }

    #[test]
    fn the_image_accessor_splits_uri_and_reference() {
        let re = Regex::new(IMAGE_ACCESSOR).unwrap();
        for (image, uri, reference) in [
            ("nginx", "nginx", ""),
            ("nginx:1.25", "nginx", ":1.25"),
            ("registry:5000/team/app:v2", "registry:5000/team/app", ":v2"),
            ("ghcr.io/a/b@sha256:abcd", "ghcr.io/a/b", "@sha256:abcd"),
            (
                "ghcr.io/a/b:v1@sha256:abcd",
                "ghcr.io/a/b",
                ":v1@sha256:abcd",
            ),
        ] {
            let caps = re.captures(image).unwrap();
            assert_eq!(&caps["uri"], uri, "{image}");
            assert_eq!(&caps["reference"], reference, "{image}");
        }
    }
}
