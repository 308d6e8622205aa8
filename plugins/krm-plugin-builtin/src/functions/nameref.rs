//! kustomize's name-reference table (which fields of which kinds name objects of which kinds),
//! as ensure-name-substring's fix-up uses it, and kustomize field-spec path walking.

use super::fieldspec::FieldSpec;
use crate::yaml::{Doc, Kind, NodeId};

/// A referral target (the kind whose name is referenced) and the fields that reference it.
pub struct BackRef {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub referrers: Vec<FieldSpec>,
}

/// Pod spec prefixes of the workload kinds, as kustomize lists them.
const WORKLOADS: &[(&str, &str, &str)] = &[
    ("v1", "Pod", "spec"),
    ("", "PodTemplate", "template/spec"),
    ("", "Deployment", "spec/template/spec"),
    ("", "ReplicaSet", "spec/template/spec"),
    ("", "DaemonSet", "spec/template/spec"),
    ("", "StatefulSet", "spec/template/spec"),
    ("", "Job", "spec/template/spec"),
    ("", "CronJob", "spec/jobTemplate/spec/template/spec"),
];

const CONFIGMAP_IN_POD: &[&str] = &[
    "volumes/configMap/name",
    "containers/env/valueFrom/configMapKeyRef/name",
    "initContainers/env/valueFrom/configMapKeyRef/name",
    "containers/envFrom/configMapRef/name",
    "initContainers/envFrom/configMapRef/name",
    "volumes/projected/sources/configMap/name",
];

const SECRET_IN_POD: &[&str] = &[
    "volumes/secret/secretName",
    "containers/env/valueFrom/secretKeyRef/name",
    "initContainers/env/valueFrom/secretKeyRef/name",
    "containers/envFrom/secretRef/name",
    "initContainers/envFrom/secretRef/name",
    "imagePullSecrets/name",
    "volumes/projected/sources/secret/name",
];

/// Workloads with a `.../spec/serviceAccountName`-style field (kustomize's shorter list).
const TEMPLATED: &[(&str, &str)] = &[
    ("StatefulSet", "spec/template/spec"),
    ("Deployment", "spec/template/spec"),
    ("ReplicationController", "spec/template/spec"),
    ("CronJob", "spec/jobTemplate/spec/template/spec"),
    ("Job", "spec/template/spec"),
    ("DaemonSet", "spec/template/spec"),
];

fn fs(group: &str, version: &str, kind: &str, path: &str) -> FieldSpec {
    FieldSpec::new(group, version, kind, path, false)
}

fn in_pods(paths: &[&str]) -> Vec<FieldSpec> {
    let mut out = Vec::new();
    for (version, kind, prefix) in WORKLOADS {
        for path in paths {
            out.push(fs("", version, kind, &format!("{prefix}/{path}")));
        }
    }
    out
}

fn in_templates(field: &str) -> Vec<FieldSpec> {
    let mut out = vec![fs("", "", "Pod", &format!("spec/{field}"))];
    for (kind, prefix) in TEMPLATED {
        out.push(fs("", "", kind, &format!("{prefix}/{field}")));
    }
    out
}

const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";

/// kustomize's default `nameReference` configuration.
pub fn back_refs() -> Vec<BackRef> {
    let hpa = |kind: &'static str| BackRef {
        group: "",
        version: "",
        kind,
        referrers: vec![fs(
            "",
            "",
            "HorizontalPodAutoscaler",
            "spec/scaleTargetRef/name",
        )],
    };
    let mut configmap = in_pods(CONFIGMAP_IN_POD);
    configmap.extend([
        fs("", "", "Node", "spec/configSource/configMap"),
        fs("", "", "Role", "rules/resourceNames"),
        fs("", "", "ClusterRole", "rules/resourceNames"),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/fastcgi-params-configmap",
        ),
    ]);
    let mut secret = in_pods(SECRET_IN_POD);
    secret.extend([
        fs("", "", "Ingress", "spec/tls/secretName"),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/ingress.kubernetes.io\\/auth-secret",
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-secret",
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-tls-secret",
        ),
        fs("", "", "ServiceAccount", "imagePullSecrets/name"),
        fs("", "", "StorageClass", "parameters/secretName"),
        fs("", "", "StorageClass", "parameters/adminSecretName"),
        fs("", "", "StorageClass", "parameters/userSecretName"),
        fs("", "", "StorageClass", "parameters/secretRef"),
        fs("", "", "Role", "rules/resourceNames"),
        fs("", "", "ClusterRole", "rules/resourceNames"),
        fs(
            "serving.knative.dev",
            "v1",
            "Service",
            "spec/template/spec/containers/env/valueFrom/secretKeyRef/name",
        ),
        fs("", "", "PersistentVolume", "spec/azureFile/secretName"),
    ]);
    let mut service_account = vec![
        fs(RBAC, "", "RoleBinding", "subjects"),
        fs(RBAC, "", "ClusterRoleBinding", "subjects"),
    ];
    service_account.extend(in_templates("serviceAccountName"));
    vec![
        hpa("Deployment"),
        hpa("ReplicationController"),
        hpa("ReplicaSet"),
        hpa("StatefulSet"),
        BackRef {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            referrers: configmap,
        },
        BackRef {
            group: "",
            version: "v1",
            kind: "Secret",
            referrers: secret,
        },
        BackRef {
            group: "",
            version: "v1",
            kind: "Service",
            referrers: vec![
                fs("apps", "", "StatefulSet", "spec/serviceName"),
                fs(
                    "",
                    "",
                    "Ingress",
                    "spec/rules/http/paths/backend/serviceName",
                ),
                fs("", "", "Ingress", "spec/backend/serviceName"),
                fs(
                    "",
                    "",
                    "Ingress",
                    "spec/rules/http/paths/backend/service/name",
                ),
                fs("", "", "Ingress", "spec/defaultBackend/service/name"),
                fs(
                    "apiregistration.k8s.io",
                    "",
                    "APIService",
                    "spec/service/name",
                ),
                fs(
                    ADMISSION,
                    "",
                    "ValidatingWebhookConfiguration",
                    "webhooks/clientConfig/service",
                ),
                fs(
                    ADMISSION,
                    "",
                    "MutatingWebhookConfiguration",
                    "webhooks/clientConfig/service",
                ),
            ],
        },
        BackRef {
            group: RBAC,
            version: "",
            kind: "Role",
            referrers: vec![fs(RBAC, "", "RoleBinding", "roleRef/name")],
        },
        BackRef {
            group: RBAC,
            version: "",
            kind: "ClusterRole",
            referrers: vec![
                fs(RBAC, "", "RoleBinding", "roleRef/name"),
                fs(RBAC, "", "ClusterRoleBinding", "roleRef/name"),
            ],
        },
        BackRef {
            group: "",
            version: "v1",
            kind: "ServiceAccount",
            referrers: service_account,
        },
        BackRef {
            group: "",
            version: "v1",
            kind: "PersistentVolumeClaim",
            referrers: {
                let mut v = vec![fs(
                    "",
                    "",
                    "Pod",
                    "spec/volumes/persistentVolumeClaim/claimName",
                )];
                for (kind, prefix) in [
                    ("StatefulSet", "spec/template/spec"),
                    ("Deployment", "spec/template/spec"),
                    ("ReplicationController", "spec/template/spec"),
                    ("CronJob", "spec/jobTemplate/spec/template/spec"),
                    ("Job", "spec/template/spec"),
                    ("DaemonSet", "spec/template/spec"),
                ] {
                    v.push(fs(
                        "",
                        "",
                        kind,
                        &format!("{prefix}/volumes/persistentVolumeClaim/claimName"),
                    ));
                }
                v
            },
        },
        BackRef {
            group: "",
            version: "v1",
            kind: "PersistentVolume",
            referrers: vec![
                fs("", "", "PersistentVolumeClaim", "spec/volumeName"),
                fs("", "", "ClusterRole", "rules/resourceNames"),
            ],
        },
        BackRef {
            group: "storage.k8s.io",
            version: "v1",
            kind: "StorageClass",
            referrers: vec![
                fs("", "", "PersistentVolume", "spec/storageClassName"),
                fs("", "", "PersistentVolumeClaim", "spec/storageClassName"),
                fs(
                    "",
                    "",
                    "StatefulSet",
                    "spec/volumeClaimTemplates/spec/storageClassName",
                ),
            ],
        },
        BackRef {
            group: "scheduling.k8s.io",
            version: "v1",
            kind: "PriorityClass",
            referrers: in_templates("priorityClassName"),
        },
        BackRef {
            // kustomize's table has the version inside the group here, so it never matches.
            group: "networking.k8s.io/v1",
            version: "v1",
            kind: "IngressClass",
            referrers: vec![fs("", "", "Ingress", "spec/ingressClassName")],
        },
        BackRef {
            group: ADMISSION,
            version: "",
            kind: "ValidatingAdmissionPolicy",
            referrers: vec![fs(
                ADMISSION,
                "",
                "ValidatingAdmissionPolicyBinding",
                "spec/policyName",
            )],
        },
    ]
}

/// Splits a kustomize field-spec path on `/`, honouring `\/` escapes.
pub fn split_path(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                current.push('/');
                chars.next();
            }
            '/' => out.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    out.push(current);
    out.retain(|s| !s.is_empty());
    out
}

/// Where a field-spec walk ends.
pub enum Reached {
    /// The field's value node.
    Value(NodeId),
    /// The field is missing: the map to create it in and the remaining keys.
    Missing(NodeId, Vec<String>),
}

/// kustomize's `fieldspec.Filter` walk: fields by name (`name[]` marks a list), sequences met
/// on the way are traversed element by element. A scalar where a map or list is needed is an
/// error, as in kustomize.
pub fn walk(
    doc: &Doc,
    node: NodeId,
    path: &[String],
    create: bool,
    visit: &mut dyn FnMut(Reached),
) -> Result<(), String> {
    walk_depth(doc, node, path, create, visit, 0)
}

fn walk_depth(
    doc: &Doc,
    node: NodeId,
    path: &[String],
    create: bool,
    visit: &mut dyn FnMut(Reached),
    depth: usize,
) -> Result<(), String> {
    if depth > 256 {
        return Ok(());
    }
    let Some(first) = path.first() else {
        visit(Reached::Value(node));
        return Ok(());
    };
    if doc.is_null(node) {
        return Ok(());
    }
    match &doc.node(doc.deref(node)).kind {
        Kind::Seq(_) => {
            for &item in doc.items(node) {
                walk_depth(doc, item, path, create, visit, depth + 1)?;
            }
            Ok(())
        }
        Kind::Map(_) => {
            let (name, is_seq) = match first.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (first.as_str(), false),
            };
            match doc.get(node, name) {
                Some(value) if is_seq => {
                    for &item in doc.items(value) {
                        walk_depth(doc, item, &path[1..], create, visit, depth + 1)?;
                    }
                    Ok(())
                }
                Some(value) => walk_depth(doc, value, &path[1..], create, visit, depth + 1),
                None if create && !is_seq && !path.iter().any(|p| p.ends_with("[]")) => {
                    visit(Reached::Missing(node, path.to_vec()));
                    Ok(())
                }
                None => Ok(()),
            }
        }
        Kind::Scalar { .. } => Err(format!(
            "fieldName: {first}: expected sequence or mapping node"
        )),
        Kind::Alias(_) => Ok(()),
    }
}
