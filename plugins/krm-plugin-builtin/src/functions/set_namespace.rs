//! set-namespace (catalog `functions/go/set-namespace`, kpt Go SDK).

use std::collections::{BTreeSet, HashSet};

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::json;

use super::fieldspec::is_namespaced;
use super::{Ctx, Exit, Function, check, param};
use crate::rl::{
    DEPENDS_ON, FnResult, LOCAL_CONFIG, UPSTREAM_ID, marks_local_config, short_string_and,
    split_api_version,
};
use crate::yaml::{Doc, New, NodeId, block_entries};

pub static FUNCTION: Function = Function {
    name: "set-namespace",
    description: "Set the namespace of namespaced objects and of namespace-valued fields, \
                  and update depends-on annotations.",
    tags: &[
        (
            "v0.4.1",
            "Porch's builtin pin; same transformer as the catalog snapshot",
        ),
        ("v0.4", "minor line of v0.4.1"),
    ],
    parameters,
    changes: &[
        "metadata.namespace",
        "Namespace metadata.name",
        "ClusterRoleBinding subjects[].namespace",
        "CustomResourceDefinition spec.conversion.webhook.clientConfig.service.namespace",
        "APIService spec.service.namespace",
        "metadata.annotations[config.kubernetes.io/depends-on]",
    ],
    run,
    legacy_results: false,
    pure: true,
};

const PACKAGE_CONTEXT: &str = "kptfile.kpt.dev";
const CLUSTER: &str = "~C";

fn parameters() -> Vec<Parameter> {
    let mut namespace = param(
        "namespace",
        ParameterType::String,
        true,
        "The new namespace (ConfigMap `data.namespace`, or `data.name` of package-context).",
    );
    namespace.example = Some("prod".into());
    let mut matcher = param(
        "namespaceMatcher",
        ParameterType::String,
        false,
        "Only change namespaces equal to this (or whose upstream origin is this).",
    );
    matcher.example = Some("default".into());
    vec![namespace, matcher]
}

struct Config {
    namespace: String,
    matcher: String,
}

fn config(ctx: &Ctx) -> Result<Config, String> {
    let doc = ctx.doc();
    let Some((api_version, kind)) = ctx.config_gvk() else {
        return Err(
            "FunctionConfig is missing. Expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`"
                .into(),
        );
    };
    let fc = ctx.rl.function_config.unwrap_or_default();
    if is_gvk(api_version, kind, "", "v1", "ConfigMap") {
        let data: std::collections::HashMap<String, String> =
            ctx.config_data().into_iter().collect();
        let get = |k: &str| data.get(k).cloned().unwrap_or_default();
        let name = doc.get_str(fc, &["metadata", "name"]).unwrap_or_default();
        let matcher = get("namespaceMatcher");
        if !get("namespace").is_empty() {
            return Ok(Config {
                namespace: get("namespace"),
                matcher,
            });
        }
        if !get("name").is_empty() && name == PACKAGE_CONTEXT {
            return Ok(Config {
                namespace: get("name"),
                matcher,
            });
        }
        if name == PACKAGE_CONTEXT {
            return Err("`data.name` should not be empty".into());
        }
        return Err("`data.namespace` should not be empty".into());
    }
    if is_gvk(api_version, kind, "fn.kpt.dev", "v1alpha1", "SetNamespace") {
        let get = |k: &str| doc.get_str(fc, &[k]).unwrap_or_default().to_owned();
        if get("namespace").is_empty() {
            return Err("`namespace` should not be empty".into());
        }
        return Ok(Config {
            namespace: get("namespace"),
            matcher: get("namespaceMatcher"),
        });
    }
    Err(format!(
        "unknown functionConfig Kind={kind} ApiVersion={api_version}, expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`"
    ))
}

/// The SDK's lenient `IsGVK`: an empty group or version on either side matches.
pub fn is_gvk(api_version: &str, kind: &str, group: &str, version: &str, want_kind: &str) -> bool {
    let (g, v) = crate::rl::split_api_version(api_version);
    kind == want_kind
        && (g.is_empty() || group.is_empty() || g == group)
        && (v.is_empty() || version.is_empty() || v == version)
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = match config(ctx) {
        Ok(config) => config,
        Err(message) => {
            // The catalog reports config problems as an error result but exits 0.
            let mut result = FnResult::error(message);
            if let Some(fc) = ctx.rl.function_config {
                result = result.on(&ctx.rl.obj(fc));
            }
            ctx.results.push(result);
            return Exit::Ok;
        }
    };
    let params = json!({"namespace": config.namespace, "namespaceMatcher": config.matcher});
    if let Err(Exit::Failed(message)) = check(ctx, &parameters(), &params) {
        // Same exit semantics as the catalog's own config errors.
        let _ = message;
        return Exit::Ok;
    }
    transform(ctx, &config);
    ctx.interrupted().unwrap_or(Exit::Ok)
}

/// A namespace-valued field the visitor may change.
struct Site<'d> {
    node: Option<NodeId>,
    /// The map holding it, and its key there (where it is added when missing).
    parent: NodeId,
    key: &'static str,
    current: &'d str,
    origin: &'d str,
    /// The object a matching origin is reported on (named only when it is).
    id: Option<NodeId>,
}

/// The block line that adds a missing namespace-valued field (see [`transform`]).
struct AddedLine {
    col: usize,
    key: &'static str,
    line: String,
}

/// What the passes below ask of an object, looked up once: one pass over its entries, one
/// over its metadata's and one over its annotations'.
struct Object<'d> {
    id: NodeId,
    api_version: &'d str,
    kind: &'d str,
    metadata: Option<NodeId>,
    name: &'d str,
    /// `metadata.namespace`, and its value ("" when it has none).
    namespace_node: Option<NodeId>,
    namespace: &'d str,
    namespaced: bool,
    annotations: Option<NodeId>,
    upstream: Option<&'d str>,
    depends_on: Option<&'d str>,
}

impl<'d> Object<'d> {
    /// Object `id` of the input; `None` for local configuration, which no pass visits.
    fn read(doc: &'d Doc, id: NodeId) -> Option<Self> {
        let text = |node: Option<NodeId>| node.and_then(|n| doc.str(n));
        let [api_version, kind, metadata] = doc.get_each(id, ["apiVersion", "kind", "metadata"]);
        let [name, namespace_node, annotations] = metadata.map_or([None; 3], |m| {
            doc.get_each(m, ["name", "namespace", "annotations"])
        });
        let [local_config, upstream, depends_on] = annotations.map_or([None; 3], |a| {
            doc.get_each(a, [LOCAL_CONFIG, UPSTREAM_ID, DEPENDS_ON])
        });
        if marks_local_config(text(local_config)) {
            return None;
        }
        let api_version = text(api_version).unwrap_or_default();
        let kind = text(kind).unwrap_or_default();
        let namespace = text(namespace_node).unwrap_or_default();
        Some(Object {
            id,
            api_version,
            kind,
            metadata,
            name: text(name).unwrap_or_default(),
            namespace_node,
            namespace,
            namespaced: is_namespaced(split_api_version(api_version).0, kind, namespace),
            annotations,
            upstream: text(upstream),
            depends_on: text(depends_on),
        })
    }

    fn group(&self) -> &'d str {
        split_api_version(self.api_version).0
    }

    fn version(&self) -> &'d str {
        split_api_version(self.api_version).1
    }

    fn short_string_and(&self, tail: &str) -> String {
        short_string_and(self.api_version, self.kind, self.namespace, self.name, tail)
    }
}

fn transform(ctx: &mut Ctx, config: &Config) {
    let rl = ctx.rl;
    let doc = ctx.doc();
    let objects: Vec<Object> = rl
        .items
        .iter()
        .filter_map(|&o| Object::read(doc, o))
        .collect();
    let new_ns = config.namespace.as_str();

    // Origins: refuse ambiguous replace-all.
    // At most a warning per object, and the two summaries.
    let mut results = Vec::with_capacity(objects.len() + 2);
    let mut origins = BTreeSet::new();
    for object in &objects {
        match object.upstream {
            Some(origin) => {
                if !object.namespaced {
                    continue;
                }
                let ns = origin.split('|').nth(2).unwrap_or_default();
                if ns == CLUSTER {
                    ctx.results.push(FnResult::error(format!(
                        "{} is namespace-scoped, but has cluster-scoped or unknown scoepd origin {origin}",
                        object.short_string_and("")
                    )));
                    return;
                }
                origins.insert(ns.to_owned());
            }
            None => results.push(FnResult::warning(
                object.short_string_and(" does not have upstream origin."),
            )),
        }
    }
    if config.matcher.is_empty() && origins.len() > 1 {
        ctx.results.push(FnResult::error(format!(
            "unable to use origin `namespace` to match. expect a single upstream namespace, found [{}]. please switch to use `namespaceMatcher`to specify the namespace value you want to change",
            origins.into_iter().collect::<Vec<_>>().join(" ")
        )));
        return;
    }

    // Visit namespace-valued fields: special cluster-scoped objects first, then namespaced.
    let mut sites = Vec::with_capacity(objects.len());
    for object in &objects {
        if object.namespaced {
            continue;
        }
        let o = object.id;
        match (object.group(), object.version(), object.kind) {
            ("" | "v1", _, "Namespace")
                if object.version().is_empty() || object.version() == "v1" =>
            {
                let origin_name = object
                    .upstream
                    .and_then(|id| id.split('|').nth(3))
                    .unwrap_or(object.name);
                if let Some(md) = object.metadata {
                    sites.push(Site {
                        node: doc.get(md, "name"),
                        parent: md,
                        key: "name",
                        current: object.name,
                        origin: origin_name,
                        id: Some(o),
                    });
                }
            }
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
                // Only when the webhook names a service (catalog test crd-no-webhook-strategy).
                if let Some(service) = doc.get_path(
                    o,
                    &["spec", "conversion", "webhook", "clientConfig", "service"],
                ) && doc.is_map(service)
                {
                    sites.push(namespace_site(doc, service));
                }
            }
            ("apiregistration.k8s.io", "v1", "APIService") => {
                if let Some(service) = doc.get_path(o, &["spec", "service"])
                    && doc.is_map(service)
                {
                    sites.push(namespace_site(doc, service));
                }
            }
            (_, _, "ClusterRoleBinding" | "RoleBinding") => {
                if let Some(subjects) = doc.get(o, "subjects") {
                    for &s in doc.items(subjects) {
                        if let Some(ns) = doc.get(s, "namespace")
                            && doc.str(ns).is_some()
                        {
                            sites.push(Site {
                                node: Some(ns),
                                parent: s,
                                key: "namespace",
                                current: doc.str(ns).unwrap_or_default(),
                                origin: "",
                                id: None,
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }
    for object in &objects {
        if !object.namespaced {
            continue;
        }
        let Some(md) = object.metadata.filter(|&m| doc.is_map(m)) else {
            continue;
        };
        // The object's namespace (`metadata` is its first such key, as `Obj::namespace` reads).
        let current = object.namespace;
        let origin = object
            .upstream
            .and_then(|id| id.split('|').nth(2))
            .unwrap_or(current);
        sites.push(Site {
            node: object.namespace_node,
            parent: md,
            key: "namespace",
            current,
            origin,
            id: Some(object.id),
        });
    }

    let mut count = 0;
    let mut old = BTreeSet::new();
    // The line a block mapping missing its field gets, as `Editor::insert` would write it:
    // written once for each column and key rather than queued as an entry for every object
    // (no mapping gets two).
    let mut added = AddedLine {
        col: usize::MAX,
        key: "",
        line: String::new(),
    };
    for site in sites {
        if ctx.interrupted().is_some() {
            return;
        }
        if site.origin == CLUSTER {
            continue;
        }
        let current = if site.current.is_empty() {
            "default"
        } else {
            site.current
        };
        if current == new_ns {
            continue;
        }
        let change = if config.matcher.is_empty() {
            true
        } else {
            if config.matcher == site.origin {
                results.push(FnResult::info(format!(
                    "[{}] has matching origin {}",
                    site.id
                        .map(|o| rl.obj(o).short_string())
                        .unwrap_or_default(),
                    site.origin
                )));
            }
            config.matcher == current || config.matcher == site.origin
        };
        if change {
            // Most objects share their old namespace: copied once.
            if !old.contains(current) {
                old.insert(current.to_owned());
            }
            count += 1;
            match site.node {
                Some(node) if doc.str(node).is_some() && !doc.is_null(node) => {
                    ctx.ed.set_scalar(doc, node, new_ns, true);
                }
                None if doc.is_map(site.parent) && !doc.node(site.parent).flow() => {
                    let col = doc.node(site.parent).col();
                    if (added.col, added.key) != (col, site.key) {
                        added.line.clear();
                        block_entries(&[(site.key, New::str(new_ns))], col, &mut added.line);
                        added.col = col;
                        added.key = site.key;
                    }
                    ctx.ed.append_lines(doc, site.parent, added.line.clone());
                }
                None => ctx.ed.insert(doc, site.parent, site.key, New::str(new_ns)),
                // A null or a collection, replaced by the string.
                Some(_) => {
                    let entry = [(site.key.to_owned(), new_ns.to_owned())];
                    ctx.ed.ensure_map(doc, site.parent, &[], &entry, true);
                }
            }
        }
    }
    results.push(if count == 0 {
        FnResult::info(format!(
            "all matching namespaces are already {new_ns:?}. no value changed"
        ))
    } else {
        FnResult::info(format!(
            "namespace [{}] updated to {new_ns:?}, {count} value(s) changed",
            old.into_iter().collect::<Vec<_>>().join(" ")
        ))
    });

    // depends-on: only a single namespaced reference to an object of the input, as the
    // objects were before the change (the document is; the edits are only queued). Worked
    // out only when some object depends on another.
    let depending: Vec<(Option<NodeId>, &str)> = objects
        .iter()
        .filter_map(|object| Some((object.annotations, object.depends_on?)))
        .collect();
    let before: HashSet<String> = if depending.is_empty() {
        HashSet::new()
    } else {
        objects
            .iter()
            .filter(|object| object.namespaced)
            .map(|object| {
                format!(
                    "{}/namespaces/{}/{}/{}",
                    object.group(),
                    object.namespace,
                    object.kind,
                    object.name
                )
            })
            .collect()
    };
    let mut count = 0;
    let mut old = BTreeSet::new();
    for (annotations, value) in depending {
        let segments: Vec<&str> = value.split('/').collect();
        if segments.len() != 5 || segments[1] != "namespaces" || !before.contains(value) {
            continue;
        }
        if segments[2] == new_ns || (!config.matcher.is_empty() && config.matcher != segments[2]) {
            continue;
        }
        old.insert(segments[2].to_owned());
        count += 1;
        let mut updated = segments.clone();
        updated[2] = new_ns;
        if let Some(node) = annotations.and_then(|a| doc.get(a, DEPENDS_ON)) {
            ctx.ed.set_scalar(doc, node, &updated.join("/"), true);
        }
    }
    results.push(if count == 0 {
        FnResult::info("all `depends-on` annotations are up-to-date. no `namespace` changed")
    } else {
        FnResult::info(format!(
            "`depends-on` annotation namespace [{}] updated to {new_ns:?}, {count} value(s) changed",
            old.into_iter().collect::<Vec<_>>().join(" ")
        ))
    });
    ctx.add_results(results);
}

fn namespace_site<'d>(doc: &'d Doc, service: NodeId) -> Site<'d> {
    Site {
        node: doc.get(service, "namespace"),
        parent: service,
        key: "namespace",
        current: doc.get_str(service, &["namespace"]).unwrap_or_default(),
        origin: "",
        id: None,
    }
}
