//! Kustomize-style field specs (`group/version/kind` + slash path with `[]` for lists) and the
//! SDK's table of namespace scopes.

use crate::rl::Obj;
use crate::yaml::{Doc, NodeId};

#[derive(Debug, Clone, serde::Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct FieldSpec {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub path: String,
    pub create: bool,
}

impl FieldSpec {
    pub fn new(group: &str, version: &str, kind: &str, path: &str, create: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            path: path.into(),
            create,
        }
    }

    /// Empty fields match anything, as in kustomize's `Gvk.IsSelected`.
    pub fn selects(&self, obj: &Obj) -> bool {
        (self.group.is_empty() || self.group == obj.group())
            && (self.version.is_empty() || self.version == obj.version())
            && (self.kind.is_empty() || self.kind == obj.kind())
    }

    pub fn segments(&self) -> Vec<&str> {
        split_path(&self.path)
    }
}

/// Splits a kustomize path on `/`, keeping `[...]` markers attached to their segment.
pub fn split_path(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// A place reached by walking a field spec path.
pub enum Hit {
    /// The parent map and the final key; `value` is the existing node if any.
    Field {
        map: NodeId,
        key: String,
        value: Option<NodeId>,
        /// Dotted path of the field, with list indices (for results).
        dotted: String,
    },
}

/// Walks `segments` from `node`, fanning out over `name[]` lists; calls `visit` for each final
/// field (existing or not). Missing intermediate maps stop the walk (callers that create create
/// them through the editor themselves).
pub fn walk(
    doc: &Doc,
    node: NodeId,
    segments: &[&str],
    dotted: String,
    visit: &mut dyn FnMut(Hit),
) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    let (key, is_list) = match first.strip_suffix("[]") {
        Some(key) => (key, true),
        None => (*first, false),
    };
    let path = if dotted.is_empty() {
        key.to_owned()
    } else {
        format!("{dotted}.{key}")
    };
    if rest.is_empty() && !is_list {
        visit(Hit::Field {
            map: node,
            key: key.to_owned(),
            value: doc.get(node, key),
            dotted: path,
        });
        return;
    }
    let Some(child) = doc.get(node, key) else {
        if rest.is_empty() || !is_list {
            // Report the missing map so that a creating caller can build it.
            visit(Hit::Field {
                map: node,
                key: key.to_owned(),
                value: None,
                dotted: path,
            });
        }
        return;
    };
    if is_list {
        for (i, &item) in doc.items(child).iter().enumerate() {
            let path = format!("{path}.{i}");
            if rest.is_empty() {
                continue;
            }
            if doc.is_map(item) {
                walk(doc, item, rest, path, visit);
            }
        }
    } else if doc.is_map(child) {
        walk(doc, child, rest, path, visit);
    } else if doc.is_null(child) {
        visit(Hit::Field {
            map: node,
            key: key.to_owned(),
            value: Some(child),
            dotted: path,
        });
    }
}

/// Namespace scope from the SDK's built-in table; `None` for kinds it does not know.
pub fn known_namespaced(group: &str, kind: &str) -> Option<bool> {
    let namespaced = match (group, kind) {
        (
            "",
            "Binding"
            | "ConfigMap"
            | "Endpoints"
            | "Event"
            | "LimitRange"
            | "PersistentVolumeClaim"
            | "Pod"
            | "PodTemplate"
            | "ReplicationController"
            | "ResourceQuota"
            | "Secret"
            | "Service"
            | "ServiceAccount",
        ) => true,
        ("", "ComponentStatus" | "Namespace" | "Node" | "PersistentVolume") => false,
        (
            "apps" | "extensions",
            "ControllerRevision" | "DaemonSet" | "Deployment" | "ReplicaSet" | "StatefulSet",
        ) => true,
        ("autoscaling", "HorizontalPodAutoscaler") => true,
        ("batch", "CronJob" | "Job") => true,
        ("coordination.k8s.io", "Lease") => true,
        ("discovery.k8s.io", "EndpointSlice") => true,
        ("events.k8s.io", "Event") => true,
        ("networking.k8s.io" | "extensions", "Ingress" | "NetworkPolicy") => true,
        ("networking.k8s.io", "IngressClass") => false,
        ("policy", "PodDisruptionBudget") => true,
        ("policy" | "extensions", "PodSecurityPolicy") => false,
        ("rbac.authorization.k8s.io", "Role" | "RoleBinding") => true,
        ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding") => false,
        ("authorization.k8s.io", "LocalSubjectAccessReview") => true,
        (
            "authorization.k8s.io",
            "SelfSubjectAccessReview" | "SelfSubjectRulesReview" | "SubjectAccessReview",
        ) => false,
        ("authentication.k8s.io", "TokenReview") => false,
        ("storage.k8s.io", "CSIStorageCapacity") => true,
        ("storage.k8s.io", "CSIDriver" | "CSINode" | "StorageClass" | "VolumeAttachment") => false,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => false,
        ("apiregistration.k8s.io", "APIService") => false,
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding",
        ) => false,
        ("certificates.k8s.io", "CertificateSigningRequest") => false,
        ("node.k8s.io", "RuntimeClass") => false,
        ("scheduling.k8s.io", "PriorityClass") => false,
        ("flowcontrol.apiserver.k8s.io", "FlowSchema" | "PriorityLevelConfiguration") => false,
        _ => return None,
    };
    Some(namespaced)
}

/// The SDK's `IsNamespaceScoped` of an object of `group` and `kind` in `namespace`: the table,
/// else "has a namespace".
pub fn is_namespaced(group: &str, kind: &str, namespace: &str) -> bool {
    known_namespaced(group, kind).unwrap_or(!namespace.is_empty())
}
