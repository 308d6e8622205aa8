//! The Kubernetes/YAML toolchain: the model is the data, a resource per document, named by
//! its `metadata`.

use crate::api::ResourceInfo;
use crate::resource::Element;
use crate::yaml::{Doc, NodeId};

/// The category ConfigHub gives Kubernetes objects.
pub const CATEGORY_RESOURCE: &str = "Resource";

/// A document's resource: typed `apiVersion/kind`, named `namespace/name`.
pub fn element(doc: &Doc, document: usize, root: NodeId) -> Element {
    let mut element = Element {
        document,
        root,
        info: ResourceInfo {
            resource_category: CATEGORY_RESOURCE.to_owned(),
            ..ResourceInfo::default()
        },
        problem: None,
    };
    if !doc.is_map(root) {
        element.problem = Some("not a mapping".to_owned());
        return element;
    }
    let api_version = doc.get_str(root, &["apiVersion"]).unwrap_or_default();
    let kind = doc.get_str(root, &["kind"]).unwrap_or_default();
    let name = doc.get_str(root, &["metadata", "name"]).unwrap_or_default();
    let namespace = doc
        .get_str(root, &["metadata", "namespace"])
        .unwrap_or_default();
    // Built by hand rather than with `format!`: every element of every parse is identified.
    element.info.resource_type = joined(api_version, kind);
    element.info.resource_name = joined(namespace, name);
    element.info.resource_name_without_scope = name.to_owned();
    element.problem = match (api_version.is_empty(), kind.is_empty()) {
        (true, _) => Some("no apiVersion".to_owned()),
        (_, true) => Some("no kind".to_owned()),
        _ => None,
    };
    element
}

/// `first/second`.
fn joined(first: &str, second: &str) -> String {
    let mut out = String::with_capacity(first.len() + 1 + second.len());
    out.push_str(first);
    out.push('/');
    out.push_str(second);
    out
}

/// Types of one structure that a resource may change between (k8skit's workload, config,
/// role and role binding sets).
const SIMILAR_TYPES: [&[&str]; 4] = [
    &[
        "apps/v1/Deployment",
        "apps/v1/ReplicaSet",
        "apps/v1/DaemonSet",
        "apps/v1/StatefulSet",
        "batch/v1/Job",
        "batch/v1/CronJob",
    ],
    &["v1/ConfigMap", "v1/Secret"],
    &[
        "rbac.authorization.k8s.io/v1/Role",
        "rbac.authorization.k8s.io/v1/ClusterRole",
    ],
    &[
        "rbac.authorization.k8s.io/v1/RoleBinding",
        "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    ],
];

/// k8skit's `ResourceTypesAreSimilar`: the same kind in any group and version, or two types
/// of one of [`SIMILAR_TYPES`].
pub fn types_similar(a: &str, b: &str) -> bool {
    fn kind(resource_type: &str) -> &str {
        resource_type.rsplit('/').next().unwrap_or_default()
    }
    a == b
        || kind(a) == kind(b)
        || SIMILAR_TYPES
            .iter()
            .any(|set| set.contains(&a) && set.contains(&b))
}
