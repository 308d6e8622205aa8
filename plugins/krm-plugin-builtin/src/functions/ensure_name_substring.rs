//! ensure-name-substring (catalog `functions/go/ensure-name-substring`, kyaml framework 0.13 +
//! kustomize resmap): idempotently prefix or suffix names (and extra name fields), then fix
//! name references (kustomize's name back-reference table) and depends-on annotations.

use std::collections::{HashMap, HashSet};

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::{Value, json};

use super::fieldspec::{FieldSpec, known_namespaced};
use super::nameref::{Reached, back_refs, split_path, walk};
use super::{Ctx, Exit, Function, Halt, param};
use crate::rl::DEPENDS_ON;
use crate::yaml::{Kind, New, NodeId};

pub static FUNCTION: Function = Function {
    name: "ensure-name-substring",
    description: "Make sure names contain a substring (prepend or append it when missing) and \
                  update the references to renamed objects.",
    tags: &[
        (
            "v0.2",
            "kyaml 0.13 + kustomize prefix/suffix filter and name-reference fix-up of the snapshot",
        ),
        ("v0.2.0", "same implementation as v0.2"),
        (
            "v0.1",
            "same editMode/substring semantics and name-reference table",
        ),
        ("v0.1.1", "same implementation as v0.1"),
    ],
    parameters,
    changes: &[
        "metadata.name",
        "additionalNameFields",
        "name references (kustomize nameReference table)",
        "metadata.annotations[config.kubernetes.io/depends-on]",
    ],
    run,
    legacy_results: false,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut substring = param(
        "substring",
        ParameterType::String,
        true,
        "The substring names must contain (ConfigMap: the value of its single `prepend` or `append` entry).",
    );
    substring.example = Some("prod-".into());
    let mut mode = param(
        "editMode",
        ParameterType::String,
        false,
        "Where to add the substring when it is missing (default prepend).",
    );
    mode.allowed = vec!["prepend".into(), "append".into()];
    mode.example = Some("append".into());
    vec![
        substring,
        mode,
        param(
            "additionalNameFields",
            ParameterType::List,
            false,
            "More name fields: [{group, version, kind, path, create}] (deprecated name `fieldSpecs`).",
        ),
    ]
}

struct Config {
    substring: String,
    append: bool,
    fields: Vec<FieldSpec>,
}

fn config(ctx: &mut Ctx) -> Result<Option<Config>, String> {
    let Some((api_version, kind)) = ctx.config_gvk() else {
        // LoadFunctionConfig with no functionConfig leaves everything empty: "" is in every
        // name, so nothing changes.
        return Ok(None);
    };
    let fc = ctx.rl.function_config.unwrap_or_default();
    let doc = ctx.doc();
    let name = doc.get_str(fc, &["metadata", "name"]).unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err("missing Resource metadata".into());
    }
    let json = ctx.config_json();
    let params = match (api_version, kind) {
        ("v1", "ConfigMap") => {
            let data = ctx.config_data();
            let count = doc.get(fc, "data").map_or(0, |d| doc.entries(d).len());
            if count != 1 {
                return Err(format!(
                    "only 1 entry is allowed in the ConfigMap, but got: {count}"
                ));
            }
            let Some((mode, substring)) = data.into_iter().next() else {
                return Err("only 1 entry is allowed in the ConfigMap, but got: 0".into());
            };
            if mode != "prepend" && mode != "append" {
                return Err(format!(
                    "unknown editMode: {mode}, only prepend and append are allowed"
                ));
            }
            json!({"substring": substring, "editMode": mode})
        }
        ("fn.kpt.dev/v1alpha1", "EnsureNameSubstring") => {
            let fields = json.get("additionalNameFields").filter(|v| !v.is_null());
            let legacy = json.get("fieldSpecs").filter(|v| !v.is_null());
            let substring = json.get("substring").cloned().unwrap_or(Value::Null);
            if substring.is_null() || substring.as_str() == Some("") {
                return Err("substring must not be empty".into());
            }
            if fields.is_some() && legacy.is_some() {
                return Err(
                    "`fieldSpecs` has been deprecated, please rename it to `additionalNameFields`"
                        .into(),
                );
            }
            let mode = json
                .get("editMode")
                .filter(|v| !v.is_null() && v.as_str() != Some(""))
                .cloned()
                .unwrap_or(json!("prepend"));
            json!({
                "substring": substring,
                "editMode": mode,
                "additionalNameFields": fields.or(legacy).cloned().unwrap_or(Value::Null),
            })
        }
        _ => {
            return Err(format!(
                "function config must be either /v1, Kind=ConfigMap or fn.kpt.dev/v1alpha1, Kind=EnsureNameSubstring, but we got: {}",
                gvk_string(api_version, kind)
            ));
        }
    };
    if params["substring"].as_str() == Some("") {
        return Err("substring must not be empty".into());
    }
    if let Err(rule) = super::validate(&parameters(), &params) {
        return Err(format!("invalid functionConfig: {rule}"));
    }
    if params["substring"].as_str() == Some("") {
        return Err("substring must not be empty".into());
    }
    let extra = params
        .get("additionalNameFields")
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or(json!([]));
    let extra: Vec<FieldSpec> = serde_json::from_value(extra)
        .map_err(|e| format!("invalid functionConfig: parameter `additionalNameFields`: {e}"))?;
    let mut fields = vec![FieldSpec::new("", "", "", "metadata/name", false)];
    fields.extend(extra);
    Ok(Some(Config {
        substring: params["substring"].as_str().unwrap_or_default().to_owned(),
        append: params["editMode"] == "append",
        fields,
    }))
}

/// `schema.GroupVersionKind.String()`.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = crate::rl::split_api_version(api_version);
    format!("{group}/{version}, Kind={kind}")
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = match config(ctx) {
        Ok(Some(config)) => config,
        Ok(None) => return Exit::Ok,
        Err(message) => {
            return ctx.fail(format!("failed to load the `functionConfig`: {message}"));
        }
    };
    match transform(ctx, &config) {
        Ok(()) => Exit::Ok,
        // An interruption explains any error it caused.
        Err(halt) => {
            let halt = ctx.interruption().map_or(halt, Halt::Interrupted);
            ctx.halt(halt)
        }
    }
}

/// One resource of the resmap.
struct Res {
    id: NodeId,
    group: String,
    version: String,
    kind: String,
    namespace: String,
    original_name: String,
    name: String,
}

impl Res {
    fn selected_by(&self, group: &str, version: &str, kind: &str) -> bool {
        (group.is_empty() || group == self.group)
            && (version.is_empty() || version == self.version)
            && (kind.is_empty() || kind == self.kind)
    }
    fn cluster_scoped(&self) -> bool {
        known_namespaced(&self.group, &self.kind) == Some(false)
    }
    fn effective_namespace(&self) -> &str {
        if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }
}

fn skipped(r: &Res) -> bool {
    r.kind == "CustomResourceDefinition"
        || (r.group == "apiregistration.k8s.io" && r.kind == "APIService")
        || r.kind == "Namespace"
        || (r.group == "kpt.dev" && r.kind == "Kptfile")
}

/// New values of scalars, applied at the end so that later steps see earlier ones.
#[derive(Default)]
struct Changes {
    scalars: HashMap<NodeId, String>,
    created: Vec<(NodeId, Vec<String>, String)>,
}

impl Changes {
    fn current<'d>(&'d self, doc: &'d crate::yaml::Doc, id: NodeId) -> &'d str {
        self.scalars
            .get(&id)
            .map(String::as_str)
            .unwrap_or_else(|| doc.str(id).unwrap_or_default())
    }
}

fn transform(ctx: &mut Ctx, config: &Config) -> Result<(), Halt> {
    let rl = ctx.rl;
    let doc = ctx.doc();
    let mut resources: Vec<Res> = Vec::new();
    for &o in &rl.items {
        let obj = rl.obj(o);
        if obj.kind().is_empty() || obj.name().is_empty() {
            // Not KRM: kustomize could not hold it; passed through.
            continue;
        }
        resources.push(Res {
            id: o,
            group: obj.group().to_owned(),
            version: obj.version().to_owned(),
            kind: obj.kind().to_owned(),
            namespace: obj.namespace().to_owned(),
            original_name: obj.name().to_owned(),
            name: obj.name().to_owned(),
        });
    }
    let lookup: HashSet<(String, String, String)> = resources
        .iter()
        .map(|r| (r.group.clone(), r.kind.clone(), r.name.clone()))
        .collect();
    let sub = config.substring.as_str();
    let add = |value: &str| {
        if config.append {
            format!("{value}{sub}")
        } else {
            format!("{sub}{value}")
        }
    };
    let mut changes = Changes::default();
    let mut depends_on: HashMap<NodeId, (NodeId, String)> = HashMap::new();
    for r in resources.iter_mut() {
        if let Some(interruption) = ctx.interruption() {
            return Err(interruption.into());
        }
        if skipped(r) {
            continue;
        }
        let obj = rl.obj(r.id);
        for spec in &config.fields {
            if !r.selected_by(&spec.group, &spec.version, &spec.kind) {
                continue;
            }
            let path = split_path(&spec.path);
            let is_name = spec.path == "metadata/name";
            // Idempotency: the substring is already in the field (its YAML text for others).
            let has = if is_name {
                r.name.contains(sub)
            } else {
                let mut text = String::new();
                let mut node = Some(r.id);
                for key in &path {
                    node = node.and_then(|n| doc.get(n, key));
                }
                if let Some(n) = node {
                    let n = doc.node(n);
                    text = doc.src[n.start().min(n.end())..n.end()].to_owned();
                    if let Some(v) = doc.str(doc.deref(node.unwrap_or_default())) {
                        text.push_str(v);
                    }
                }
                text.contains(sub)
            };
            if has {
                continue;
            }
            if is_name {
                r.name = add(&r.name);
            }
            let mut reached = Vec::new();
            walk(doc, r.id, &path, spec.create, &mut |hit| reached.push(hit))
                .map_err(|e| format!("failed to transform name substring: {e}"))?;
            for hit in reached {
                match hit {
                    Reached::Value(v) if doc.str(v).is_some() && !is_alias(doc, v) => {
                        let value = add(changes.current(doc, v));
                        changes.scalars.insert(v, value);
                    }
                    Reached::Value(_) => {}
                    Reached::Missing(map, rest) => {
                        changes.created.push((map, rest, add("")));
                    }
                }
            }
            // depends-on of this object, for each field changed (the catalog does it per spec).
            if let Some(annotations) = doc.get_path(r.id, &["metadata", "annotations"])
                && let Some(node) = doc.get(annotations, DEPENDS_ON)
                && doc.str(node).is_some()
            {
                let current = depends_on
                    .get(&r.id)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| obj.annotation(DEPENDS_ON).unwrap_or_default().to_owned());
                if let Some(updated) = depends_on_update(&current, &lookup, sub, config.append) {
                    depends_on.insert(r.id, (node, updated));
                }
            }
        }
    }
    fix_name_references(doc, &resources, &mut changes)?;

    for (node, value) in depends_on.into_values() {
        changes.scalars.insert(node, value);
    }
    for (node, value) in changes.scalars {
        if doc.str(node) != Some(value.as_str()) {
            ctx.ed.set_scalar(doc, node, &value, true);
        }
    }
    for (map, rest, value) in changes.created {
        let mut new = New::str(value);
        for key in rest[1..].iter().rev() {
            new = New::Map(vec![(key.clone(), new)]);
        }
        ctx.ed.insert(doc, map, &rest[0], new);
    }
    Ok(())
}

fn is_alias(doc: &crate::yaml::Doc, id: NodeId) -> bool {
    matches!(doc.node(id).kind, Kind::Alias(_))
}

/// The catalog's depends-on rewrite: a single `<group>/namespaces/<ns>/<kind>/<name>` or
/// `<group>/<kind>/<name>` naming an input object gets the substring added to its name.
fn depends_on_update(
    value: &str,
    lookup: &HashSet<(String, String, String)>,
    sub: &str,
    append: bool,
) -> Option<String> {
    let ok = |s: &str| {
        s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
    };
    let mut segments: Vec<String> = value.split('/').map(str::to_owned).collect();
    let (kind, name) = match segments.len() {
        5 if segments[1] == "namespaces" && segments.iter().all(|s| ok(s)) => (3, 4),
        3 if segments.iter().all(|s| ok(s)) => (1, 2),
        _ => return None,
    };
    let key = (
        segments[0].clone(),
        segments[kind].clone(),
        segments[name].clone(),
    );
    if !lookup.contains(&key) {
        return None;
    }
    segments[name] = if append {
        format!("{}{sub}", segments[name])
    } else {
        format!("{sub}{}", segments[name])
    };
    Some(segments.join("/"))
}

/// What a referrer may reference (kustomize's `SubsetThatCouldBeReferencedByResource`),
/// with candidates looked up by original name.
struct Candidates<'r> {
    by_name: HashMap<&'r str, Vec<&'r Res>>,
    referrer_cluster: bool,
    referrer_ns: &'r str,
    binding_namespaces: HashSet<&'r str>,
}

impl<'r> Candidates<'r> {
    fn named(&self, name: &str) -> Vec<&'r Res> {
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|c| {
                self.referrer_cluster
                    || c.cluster_scoped()
                    || c.effective_namespace() == self.referrer_ns
                    || self.binding_namespaces.contains(c.namespace.as_str())
            })
            .collect()
    }
}

/// kustomize's `FixNameBackReference` over the renamed resources.
fn fix_name_references(
    doc: &crate::yaml::Doc,
    resources: &[Res],
    changes: &mut Changes,
) -> Result<(), String> {
    let refs = back_refs();
    let mut by_name: HashMap<&str, Vec<&Res>> = HashMap::new();
    for r in resources {
        by_name.entry(r.original_name.as_str()).or_default().push(r);
    }
    for referrer in resources {
        let binding_namespaces: HashSet<&str> = if referrer.kind == "RoleBinding" {
            doc.get(referrer.id, "subjects")
                .map(|s| {
                    doc.items(s)
                        .iter()
                        .filter(|&&sub| doc.get_str(sub, &["kind"]) == Some("ServiceAccount"))
                        .filter_map(|&sub| doc.get_str(sub, &["namespace"]))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            HashSet::new()
        };
        let candidates = Candidates {
            by_name: std::mem::take(&mut by_name),
            referrer_cluster: referrer.cluster_scoped(),
            referrer_ns: referrer.effective_namespace(),
            binding_namespaces,
        };
        for back in &refs {
            for spec in &back.referrers {
                if !referrer.selected_by(&spec.group, &spec.version, &spec.kind) {
                    continue;
                }
                let path = split_path(&spec.path);
                let role_ref = spec.path.ends_with("roleRef/name");
                let mut reached = Vec::new();
                walk(doc, referrer.id, &path, false, &mut |hit| reached.push(hit))
                    .map_err(|e| format!("failed to fix name back reference: {e}"))?;
                for hit in reached {
                    let Reached::Value(node) = hit else { continue };
                    set_reference(doc, referrer, back, &candidates, role_ref, node, changes)?;
                }
            }
        }
        by_name = candidates.by_name;
    }
    Ok(())
}

fn set_reference(
    doc: &crate::yaml::Doc,
    referrer: &Res,
    back: &super::nameref::BackRef,
    candidates: &Candidates,
    role_ref: bool,
    node: NodeId,
    changes: &mut Changes,
) -> Result<(), String> {
    if doc.is_null(node) {
        return Ok(());
    }
    match &doc.node(doc.deref(node)).kind {
        Kind::Scalar { .. } => {
            let old = changes.current(doc, node).to_owned();
            let subset = candidates.named(&old);
            let (name, _) = select_referral(doc, &old, referrer, back, &subset, role_ref)?;
            if name != old {
                changes.scalars.insert(node, name);
            }
            Ok(())
        }
        Kind::Map(_) => {
            set_name_and_namespace(doc, referrer, back, candidates, role_ref, node, changes)
        }
        Kind::Seq(_) => {
            for &item in doc.items(node) {
                match &doc.node(doc.deref(item)).kind {
                    Kind::Scalar { .. } | Kind::Map(_) => {
                        set_reference(doc, referrer, back, candidates, role_ref, item, changes)?
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        Kind::Alias(_) => Ok(()),
    }
}

fn set_name_and_namespace(
    doc: &crate::yaml::Doc,
    referrer: &Res,
    back: &super::nameref::BackRef,
    candidates: &Candidates,
    role_ref: bool,
    map: NodeId,
    changes: &mut Changes,
) -> Result<(), String> {
    let Some(name_node) = doc.get(map, "name").filter(|&n| doc.str(n).is_some()) else {
        return Err("failed to fix name back reference: cannot find field 'name' in node".into());
    };
    // A subject of another kind (User, Group) does not name this target.
    if let Some(kind) = doc.get_str(map, &["kind"])
        && kind != back.kind
    {
        return Ok(());
    }
    let namespace = doc.get_str(map, &["namespace"]);
    let old = changes.current(doc, name_node).to_owned();
    let subset: Vec<&Res> = candidates
        .named(&old)
        .into_iter()
        .filter(|c| namespace.is_none_or(|ns| c.namespace == ns))
        .collect();
    let (name, ns) = select_referral(doc, &old, referrer, back, &subset, role_ref)?;
    if name == old && ns.is_empty() {
        return Ok(());
    }
    if name != old {
        changes.scalars.insert(name_node, name);
    }
    if !ns.is_empty() && namespace != Some(ns.as_str()) {
        match doc.get(map, "namespace") {
            Some(n) if doc.str(n).is_some() => {
                changes.scalars.insert(n, ns);
            }
            _ => changes.created.push((map, vec!["namespace".into()], ns)),
        }
    }
    Ok(())
}

/// kustomize's `selectReferral`: the candidate of the target kind whose original name is the
/// referenced one; its current name (and namespace) is what the reference should say.
fn select_referral(
    doc: &crate::yaml::Doc,
    old: &str,
    referrer: &Res,
    back: &super::nameref::BackRef,
    candidates: &[&Res],
    role_ref: bool,
) -> Result<(String, String), String> {
    let role = if role_ref {
        let role_ref = doc
            .get(referrer.id, "roleRef")
            .ok_or("failed to fix name back reference: roleRef cannot be found")?;
        let group = doc
            .get_str(role_ref, &["apiGroup"])
            .ok_or("failed to fix name back reference: apiGroup cannot be found in roleRef")?;
        let kind = doc
            .get_str(role_ref, &["kind"])
            .ok_or("failed to fix name back reference: kind cannot be found in roleRef")?;
        Some((group.to_owned(), kind.to_owned()))
    } else {
        None
    };
    for c in candidates {
        let role_ok = role.as_ref().is_none_or(|(g, k)| c.selected_by(g, "", k));
        if role_ok && c.selected_by(back.group, back.version, back.kind) && c.original_name == old {
            return Ok((c.name.clone(), c.namespace.clone()));
        }
    }
    Ok((old.to_owned(), String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_on_forms() {
        let lookup: HashSet<(String, String, String)> = [
            ("apps".to_owned(), "Deployment".to_owned(), "web".to_owned()),
            (String::new(), "Namespace".to_owned(), "ns".to_owned()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            depends_on_update("apps/namespaces/x/Deployment/web", &lookup, "prod-", false)
                .as_deref(),
            Some("apps/namespaces/x/Deployment/prod-web")
        );
        assert_eq!(
            depends_on_update("/Namespace/ns", &lookup, "-dev", true).as_deref(),
            Some("/Namespace/ns-dev")
        );
        assert_eq!(
            depends_on_update("apps/namespaces/x/Deployment/other", &lookup, "p", false),
            None
        );
        assert_eq!(
            depends_on_update(
                "apps/namespaces/x/Deployment/web,/Namespace/ns",
                &lookup,
                "p",
                false
            ),
            None
        );
    }
}
