//! The resource types the stand-in serves: built-in ones and those registered by
//! CustomResourceDefinitions.

use serde_json::{Value, json};

/// One additional printer column of a CRD (`jsonPath` of the simple `.a.b` form).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type (`string`, `integer`, `date`, ...).
    pub type_: String,
    /// Dotted JSON path such as `.status.phase`.
    pub json_path: String,
}

/// A served resource type.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// API group, `""` for core.
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    /// Plural resource name (`pods`).
    pub plural: String,
    /// Singular name (`pod`).
    pub singular: String,
    /// Kind (`Pod`).
    pub kind: String,
    /// List kind (`PodList`).
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (main-resource writes keep status; status writes keep the rest).
    pub status: bool,
    /// Short names (`po`).
    pub short_names: Vec<String>,
    /// Built-in (strategic merge patch allowed) rather than custom.
    pub builtin: bool,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// CRD printer columns.
    pub printer_columns: Vec<PrinterColumn>,
    /// CRD `openAPIV3Schema` of the preferred version, used for defaulting only.
    pub schema: Option<Value>,
}

impl ResourceDef {
    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced,
            status,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            builtin: true,
            categories: if matches!(plural, "pods" | "services") {
                vec!["all".into()]
            } else {
                vec![]
            },
            printer_columns: vec![],
            schema: None,
        }
    }

    /// `(group, plural)`, the storage key of the type.
    pub fn gr(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }

    /// `v1` or `group/version` for the given version.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// `apiVersion` of stored objects (preferred version).
    pub fn storage_api_version(&self) -> String {
        self.api_version(&self.versions[0])
    }

    /// `pods` or `functionconfigs.config.porch.kpt.dev`, as error messages name types.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Discovery entries (`APIResource`) for this type and its subresources.
    pub fn discovery(&self) -> Vec<Value> {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if self.plural == "namespaces" {
            verbs.retain(|v| *v != "deletecollection");
        }
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.plural == "pods" {
            out.push(
                json!({"name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"]}),
            );
        }
        out
    }
}

/// The built-in types.
pub fn builtins() -> Vec<ResourceDef> {
    let b = ResourceDef::builtin;
    vec![
        b("", "v1", "pods", "Pod", true, true, &["po"]),
        b("", "v1", "services", "Service", true, true, &["svc"]),
        b("", "v1", "endpoints", "Endpoints", true, false, &["ep"]),
        b("", "v1", "podtemplates", "PodTemplate", true, false, &[]),
        b("", "v1", "secrets", "Secret", true, false, &[]),
        b("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
        b(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            false,
            &["sa"],
        ),
        b("", "v1", "events", "Event", true, false, &["ev"]),
        b("", "v1", "namespaces", "Namespace", false, true, &["ns"]),
        b("", "v1", "nodes", "Node", false, true, &["no"]),
        b(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            false,
            &[],
        ),
        b(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            false,
            &["ev"],
        ),
        b(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            false,
            &[],
        ),
        // Stored only (no controllers), so that `kubectl apply -k deploy/kubernetes` works.
        b(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            true,
            &["deploy"],
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            false,
            &[],
        ),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            false,
            &[],
        ),
        b(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
            &["crd", "crds"],
        ),
    ]
}

/// Builds the type a CRD declares, or explains why the CRD is invalid.
pub fn from_crd(crd: &Value) -> Result<ResourceDef, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
        .ok_or("spec.group: Required value")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let s = |k: &str| {
        names
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let plural = s("plural");
    let kind = s("kind");
    if plural.is_empty() || kind.is_empty() {
        return Err("spec.names.plural and spec.names.kind: Required value".into());
    }
    let name = crate::util::meta_str(crd, "name").unwrap_or("");
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("Namespaced");
    let versions: Vec<&Value> = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let served: Vec<&Value> = versions
        .iter()
        .copied()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .collect();
    if served.is_empty() {
        return Err("spec.versions: Required value: must have at least one served version".into());
    }
    // Preferred/storage version first.
    let mut ordered = served.clone();
    ordered.sort_by_key(|v| !v.get("storage").and_then(Value::as_bool).unwrap_or(false));
    let pref = ordered[0];
    let status = pref
        .get("subresources")
        .and_then(|s| s.get("status"))
        .is_some();
    let printer_columns = pref
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: c.get("name").and_then(Value::as_str).unwrap_or("").into(),
                    type_: c
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("string")
                        .into(),
                    json_path: c
                        .get("jsonPath")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                })
                .collect()
        })
        .unwrap_or_default();
    let singular = s("singular");
    let list_kind = s("listKind");
    Ok(ResourceDef {
        group: group.into(),
        versions: ordered
            .iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
            .collect(),
        plural,
        singular: if singular.is_empty() {
            kind.to_lowercase()
        } else {
            singular
        },
        list_kind: if list_kind.is_empty() {
            format!("{kind}List")
        } else {
            list_kind
        },
        kind,
        namespaced: scope != "Cluster",
        status,
        short_names: names
            .get("shortNames")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        builtin: false,
        categories: names
            .get("categories")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        printer_columns,
        schema: pref
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .cloned(),
    })
}

/// Applies `default` values from a structural schema to an object (objects only, recursively).
pub fn apply_schema_defaults(obj: &mut Value, schema: &Value) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    for (k, sub) in props {
        if k == "metadata" {
            continue;
        }
        if !map.contains_key(k)
            && let Some(d) = sub.get("default")
        {
            map.insert(k.clone(), d.clone());
        }
        if let Some(child) = map.get_mut(k) {
            if child.is_object() {
                apply_schema_defaults(child, sub);
            } else if let (Some(items), Some(arr)) = (sub.get("items"), child.as_array_mut()) {
                for item in arr {
                    apply_schema_defaults(item, items);
                }
            }
        }
    }
}
