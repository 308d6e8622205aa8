//! apply-replacements (catalog `functions/go/apply-replacements`, kpt Go SDK + kustomize's
//! replacement filter): copy a field of one source object into fields of selected targets.
//!
//! kustomize applies replacements one after another on live nodes, so a later replacement sees
//! what an earlier one wrote. Here each step edits the text and the next step reads it again,
//! which keeps that order exact while every untouched byte stays as it was.

use krm_plugin_api::{Parameter, ParameterType};
use krm_runner_function_config::config_file;
use serde::Deserialize;
use serde_json::json;

use super::fieldspec::known_namespaced;
use super::{Ctx, Exit, Function, Halt, Limits, param};
use crate::rl::{ResourceList, split_api_version};
use crate::yaml::{Doc, Editor, Kind, New, NodeId, Style, untyped_scalar};

pub static FUNCTION: Function = Function {
    name: "apply-replacements",
    description: "Copy a field of a source object into fields of target objects (kustomize \
                  replacements).",
    tags: &[
        (
            "v0.1.1",
            "Porch's builtin pin; kustomize replacement filter semantics (v5 api)",
        ),
        ("v0.1", "minor line of v0.1.1"),
    ],
    parameters,
    changes: &["target fields named by `replacements[].targets[].fieldPaths`"],
    run,
    legacy_results: false,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut replacements = param(
        "replacements",
        ParameterType::List,
        false,
        "kustomize replacements: [{source: {group, version, kind, name, namespace, fieldPath, \
         options}, targets: [{select, reject, fieldPaths, options: {delimiter, index, create}}]}]",
    );
    replacements.example = Some(
        "[{source: {kind: ConfigMap, name: cm, fieldPath: data.ns}, targets: [{select: {kind: Deployment}, fieldPaths: [metadata.namespace]}]}]"
            .into(),
    );
    vec![replacements]
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Config {
    replacements: Vec<Replacement>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Replacement {
    source: Option<Selector>,
    targets: Option<Vec<Target>>,
}

#[derive(Debug, Default, Deserialize, Clone)]
#[serde(default, rename_all = "camelCase")]
struct Selector {
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: String,
    field_path: String,
    options: Option<Options>,
    label_selector: String,
    annotation_selector: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Target {
    select: Option<Selector>,
    reject: Vec<Selector>,
    field_paths: Vec<String>,
    options: Option<Options>,
}

#[derive(Debug, Default, Deserialize, Clone)]
#[serde(default)]
struct Options {
    delimiter: String,
    index: i64,
    create: bool,
}

const DEFAULT_FIELD_PATH: &str = "metadata.name";

impl Selector {
    /// kustomize's `ResId.String()`.
    fn id_string(&self) -> String {
        let or = |s: &str, none: &str| {
            if s.is_empty() {
                none.to_owned()
            } else {
                s.to_owned()
            }
        };
        format!(
            "{}.{}.{}/{}.{}",
            or(&self.kind, "[noKind]"),
            or(&self.version, "[noVer]"),
            or(&self.group, "[noGrp]"),
            or(&self.name, "[noName]"),
            or(&self.namespace, "[noNs]")
        )
    }

    fn id_is_empty(&self) -> bool {
        self.group.is_empty()
            && self.version.is_empty()
            && self.kind.is_empty()
            && self.name.is_empty()
            && self.namespace.is_empty()
    }

    /// `ResId.IsSelectedBy`: empty selector fields match anything; namespaces compare as
    /// kustomize's effective namespaces ("" is "default").
    fn selects(&self, id: &Id) -> bool {
        (self.name.is_empty() || self.name == id.name)
            && (self.namespace.is_empty()
                || effective_ns(&self.namespace, &self.group, &self.kind)
                    == effective_ns(&id.namespace, &id.group, &id.kind))
            && (self.group.is_empty() || self.group == id.group)
            && (self.version.is_empty() || self.version == id.version)
            && (self.kind.is_empty() || self.kind == id.kind)
    }
}

fn effective_ns(ns: &str, group: &str, kind: &str) -> String {
    if known_namespaced(group, kind) == Some(false) {
        "~X".into()
    } else if ns.is_empty() {
        "default".into()
    } else {
        ns.to_owned()
    }
}

struct Id {
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: String,
}

fn id_of(doc: &Doc, item: NodeId) -> Id {
    let api_version = doc.get_str(item, &["apiVersion"]).unwrap_or_default();
    let (group, version) = split_api_version(api_version);
    Id {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: doc.get_str(item, &["kind"]).unwrap_or_default().to_owned(),
        name: doc
            .get_str(item, &["metadata", "name"])
            .unwrap_or_default()
            .to_owned(),
        namespace: doc
            .get_str(item, &["metadata", "namespace"])
            .unwrap_or_default()
            .to_owned(),
    }
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = match config(ctx) {
        Ok(config) => config,
        Err(message) => return ctx.fail(message),
    };
    let original = ctx.doc().src;
    match apply(original, &config, ctx.limits) {
        Ok(text) => {
            if text != original {
                ctx.ed.replace(0, original.len(), text);
            }
            Exit::Ok
        }
        // The catalog keeps the input items when the filter fails.
        Err(halt) => ctx.halt(halt),
    }
}

fn config(ctx: &mut Ctx) -> Result<Config, String> {
    let Some((api_version, kind)) = ctx.config_gvk() else {
        return Err("FunctionConfig is missing. Expect `ApplyReplacements`".into());
    };
    if kind != "ApplyReplacements" || api_version != "fn.kpt.dev/v1alpha1" {
        return Err(format!(
            "received functionConfig of kind {kind} and apiVersion {api_version}, only functionConfig of kind ApplyReplacements and apiVersion fn.kpt.dev/v1alpha1 is supported"
        ));
    }
    let json = ctx.config_json();
    let replacements = json
        .get("replacements")
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or(json!([]));
    if let Err(rule) = super::validate(&parameters(), &json!({ "replacements": replacements })) {
        return Err(format!("invalid functionConfig: {rule}"));
    }
    config_file::from_json_value::<Config>(json!({ "replacements": replacements }))
        .map_err(|e| format!("unable to convert functionConfig to replacements:\n{e}"))
}

/// The value a replacement copies.
enum Val {
    Scalar(String),
    Node(New),
}

impl Val {
    /// `yaml.GetValue`: a collection has no scalar value.
    fn scalar(&self) -> &str {
        match self {
            Val::Scalar(s) => s,
            Val::Node(_) => "",
        }
    }
}

fn parse<'t>(text: &'t str, limits: &Limits) -> Result<ResourceList<'t>, Halt> {
    ResourceList::parse(text.as_bytes(), &limits.stop).map_err(|e| {
        limits.interruption(text.len()).map_or_else(
            || format!("internal error re-reading output: {e}").into(),
            Halt::Interrupted,
        )
    })
}

fn apply(original: &str, config: &Config, limits: &Limits) -> Result<String, Halt> {
    let mut text = original.to_owned();
    for r in &config.replacements {
        let (Some(source), Some(targets)) = (&r.source, &r.targets) else {
            return Err(Halt::Failed(
                "replacements must specify a source and at least one target".into(),
            ));
        };
        let value = {
            let rl = parse(&text, limits)?;
            source_value(&rl, source)?
        };
        for target in targets {
            let Some(select) = &target.select else {
                return Err(Halt::Failed(
                    "target must specify resources to select".into(),
                ));
            };
            let paths = if target.field_paths.is_empty() {
                vec![DEFAULT_FIELD_PATH.to_owned()]
            } else {
                target.field_paths.clone()
            };
            for path in &paths {
                if let Some(why) = limits.interruption(text.len()) {
                    return Err(Halt::Interrupted(why));
                }
                let next = {
                    let rl = parse(&text, limits)?;
                    let doc = &rl.doc;
                    let mut ed = Editor::default();
                    let mut edited = false;
                    for &item in &rl.items {
                        if let Some(why) = limits.interruption(text.len() + ed.queued_bytes()) {
                            return Err(Halt::Interrupted(why));
                        }
                        if !target_selected(doc, item, select, &target.reject)? {
                            continue;
                        }
                        edited |=
                            apply_path(doc, &mut ed, item, path, &value, target.options.as_ref())?;
                    }
                    edited.then(|| ed.finish(doc))
                };
                if let Some(next) = next {
                    text = next;
                }
            }
        }
    }
    Ok(text)
}

fn source_value(rl: &ResourceList, source: &Selector) -> Result<Val, String> {
    let doc = &rl.doc;
    let mut found = None;
    for &item in &rl.items {
        if source.selects(&id_of(doc, item)) {
            if found.is_some() {
                return Err(format!(
                    "multiple matches for selector {}",
                    source.id_string()
                ));
            }
            found = Some(item);
        }
    }
    let Some(item) = found else {
        return Err(format!("nothing selected by {}", source.id_string()));
    };
    let field_path = if source.field_path.is_empty() {
        DEFAULT_FIELD_PATH
    } else {
        source.field_path.as_str()
    };
    let missing = || {
        format!(
            "fieldPath `{field_path}` is missing for replacement source {}",
            source.id_string()
        )
    };
    let nodes = matches(doc, item, &split_path(field_path)).map_err(|_| missing())?;
    let Some(&node) = nodes.first() else {
        return Err(missing());
    };
    let node = doc.deref(node);
    let empty = doc.is_null(node)
        || (doc.is_map(node) && doc.entries(node).is_empty())
        || (doc.is_seq(node) && doc.items(node).is_empty());
    if empty {
        return Err(missing());
    }
    let value = match doc.str(node) {
        Some(s) => Val::Scalar(s.to_owned()),
        None => Val::Node(doc.to_new(node)),
    };
    match source.options.as_ref().filter(|o| !o.delimiter.is_empty()) {
        None => Ok(value),
        Some(options) => {
            let Val::Scalar(s) = value else {
                return Err("delimiter option can only be used with scalar nodes".into());
            };
            let parts: Vec<&str> = s.split(options.delimiter.as_str()).collect();
            if options.index < 0 || options.index as usize >= parts.len() {
                return Err(format!(
                    "options.index {} is out of bounds for value {s}",
                    options.index
                ));
            }
            Ok(Val::Scalar(parts[options.index as usize].to_owned()))
        }
    }
}

fn target_selected(
    doc: &Doc,
    item: NodeId,
    select: &Selector,
    reject: &[Selector],
) -> Result<bool, String> {
    if !matches_label_and_annotation(doc, item, select)? {
        return Ok(false);
    }
    for r in reject {
        if (!r.annotation_selector.is_empty() || !r.label_selector.is_empty())
            && matches_label_and_annotation(doc, item, r)?
        {
            return Ok(false);
        }
    }
    let id = id_of(doc, item);
    Ok(select.selects(&id) && !reject.iter().any(|r| !r.id_is_empty() && r.selects(&id)))
}

fn matches_label_and_annotation(doc: &Doc, item: NodeId, s: &Selector) -> Result<bool, String> {
    let map_of = |key: &str| -> Vec<(String, String)> {
        doc.get_path(item, &["metadata", key])
            .map(|m| {
                doc.entries(m)
                    .iter()
                    .filter_map(|&(k, v)| Some((doc.str(k)?.to_owned(), doc.str(v)?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(
        selector_matches(&s.annotation_selector, &map_of("annotations"))?
            && selector_matches(&s.label_selector, &map_of("labels"))?,
    )
}

/// Kubernetes label-selector syntax: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`,
/// `k`, `!k`, joined by commas.
fn selector_matches(selector: &str, labels: &[(String, String)]) -> Result<bool, String> {
    let get = |k: &str| {
        labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let mut requirements = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                requirements.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    requirements.push(current);
    for req in requirements
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
    {
        let bad = || format!("unable to parse requirement: {req:?}");
        let ok = if let Some(key) = req.strip_prefix('!') {
            get(key.trim()).is_none()
        } else if let Some((k, v)) = req.split_once("!=") {
            get(k.trim()) != Some(v.trim())
        } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
            get(k.trim()) == Some(v.trim())
        } else if let Some((k, set)) = req.split_once(" notin ") {
            let set = parse_set(set).ok_or_else(bad)?;
            get(k.trim()).is_none_or(|v| !set.contains(&v))
        } else if let Some((k, set)) = req.split_once(" in ") {
            let set = parse_set(set).ok_or_else(bad)?;
            get(k.trim()).is_some_and(|v| set.contains(&v))
        } else if req.contains(char::is_whitespace) || req.contains(['(', ')']) {
            return Err(bad());
        } else {
            get(req).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn parse_set(set: &str) -> Option<Vec<&str>> {
    let inner = set.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(str::trim).collect())
}

/// kyaml's `SmarterPathSplitter`: dots split, except inside `[...]`.
fn split_path(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '.' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out
}

fn kind_name(doc: &Doc, id: NodeId) -> &'static str {
    match doc.node(doc.deref(id)).kind {
        Kind::Map(_) => "MappingNode",
        Kind::Seq(_) => "SequenceNode",
        _ => "ScalarNode",
    }
}

fn wrong_kind(doc: &Doc, id: NodeId, expected: &str) -> String {
    let n = doc.node(id);
    format!(
        "wrong node kind: expected {expected} but got {}: node contents:\n{}\n",
        kind_name(doc, id),
        &doc.src[n.start().min(n.end())..n.end()]
    )
}

/// `[key=value]` (or `[=value]`) list matcher.
fn list_matcher(elem: &str) -> Option<(&str, &str)> {
    elem.strip_prefix('[')?.strip_suffix(']')?.split_once('=')
}

/// kyaml's `PathMatcher`: every node the path reaches (list matchers are anchored regexes).
fn matches(doc: &Doc, node: NodeId, path: &[String]) -> Result<Vec<NodeId>, String> {
    let mut out = Vec::new();
    matches_into(doc, node, path, &mut out, 0)?;
    Ok(out)
}

fn matches_into(
    doc: &Doc,
    node: NodeId,
    path: &[String],
    out: &mut Vec<NodeId>,
    depth: usize,
) -> Result<(), String> {
    let Some(elem) = path.first() else {
        out.push(node);
        return Ok(());
    };
    if depth > 512 {
        return Ok(());
    }
    let node = doc.deref(node);
    let rest = &path[1..];
    if let Some((key, pattern)) = list_matcher(elem) {
        if !doc.is_seq(node) {
            return Err(wrong_kind(doc, node, "SequenceNode"));
        }
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?;
        for &item in doc.items(node) {
            let value = if key.is_empty() {
                doc.str(item)
            } else {
                doc.get_str(item, &[key])
            };
            if value.is_some_and(|v| re.is_match(v)) {
                matches_into(doc, item, rest, out, depth + 1)?;
            }
        }
        return Ok(());
    }
    if elem == "*" {
        if !doc.is_seq(node) {
            return Err(wrong_kind(doc, node, "SequenceNode"));
        }
        for &item in doc.items(node) {
            matches_into(doc, item, rest, out, depth + 1)?;
        }
        return Ok(());
    }
    if doc.is_seq(node)
        && let Ok(index) = elem.parse::<usize>()
    {
        if let Some(&item) = doc.items(node).get(index) {
            matches_into(doc, item, rest, out, depth + 1)?;
        }
        return Ok(());
    }
    if !doc.is_map(node) {
        return Err(wrong_kind(doc, node, "MappingNode"));
    }
    if let Some(child) = doc.get(node, elem) {
        matches_into(doc, child, rest, out, depth + 1)?;
    }
    Ok(())
}

/// Applies the value at `path` of one target object; true when it queued edits.
fn apply_path(
    doc: &Doc,
    ed: &mut Editor,
    item: NodeId,
    path: &str,
    value: &Val,
    options: Option<&Options>,
) -> Result<bool, String> {
    let elems = split_path(path);
    let create = options.is_some_and(|o| o.create);
    if create {
        let mut reached = Vec::new();
        create_path(doc, ed, item, &elems, value, options, &mut reached).map_err(|e| {
            format!("unable to find or create field {path:?} in replacement target: {e}")
        })?;
        for node in &reached {
            set_target(doc, ed, *node, value, options)?;
        }
        return Ok(true);
    }
    let nodes = matches(doc, item, &elems)
        .map_err(|e| format!("unable to find field {path:?} in replacement target: {e}"))?;
    if nodes.is_empty() {
        return Err(format!(
            "unable to find field {path:?} in replacement target"
        ));
    }
    for node in nodes {
        set_target(doc, ed, node, value, options)?;
    }
    Ok(true)
}

/// kyaml's `PathGetter` with create: walks the path, creating what is missing (the final
/// field gets the value itself); existing final fields are collected in `reached`.
fn create_path(
    doc: &Doc,
    ed: &mut Editor,
    node: NodeId,
    path: &[String],
    value: &Val,
    options: Option<&Options>,
    reached: &mut Vec<NodeId>,
) -> Result<(), String> {
    let Some(elem) = path.first() else {
        reached.push(node);
        return Ok(());
    };
    let node = doc.deref(node);
    let rest = &path[1..];
    if let Some((key, wanted)) = list_matcher(elem) {
        if !doc.is_seq(node) {
            return Err(wrong_kind(doc, node, "SequenceNode"));
        }
        let found = doc.items(node).iter().copied().find(|&item| {
            if key.is_empty() {
                doc.str(item) == Some(wanted)
            } else {
                doc.get_str(item, &[key]) == Some(wanted)
            }
        });
        return match found {
            Some(item) => create_path(doc, ed, item, rest, value, options, reached),
            None => {
                let new = if key.is_empty() {
                    New::Plain(untyped_scalar(wanted))
                } else {
                    let mut entries = vec![(key.to_owned(), New::Plain(untyped_scalar(wanted)))];
                    if let Some(New::Map(more)) = build(rest, value, options)? {
                        entries.extend(more);
                    }
                    New::Map(entries)
                };
                ed.append_item(doc, node, new);
                Ok(())
            }
        };
    }
    if elem == "*" {
        if !doc.is_seq(node) {
            return Err(wrong_kind(doc, node, "SequenceNode"));
        }
        for &item in doc.items(node) {
            create_path(doc, ed, item, rest, value, options, reached)?;
        }
        return Ok(());
    }
    if doc.is_seq(node)
        && let Ok(index) = elem.parse::<usize>()
    {
        let items = doc.items(node);
        return match items.get(index) {
            Some(&item) => create_path(doc, ed, item, rest, value, options, reached),
            None => Err(format!(
                "index {index} specified but only {} elements found",
                items.len()
            )),
        };
    }
    if !doc.is_map(node) {
        return Err(wrong_kind(doc, node, "MappingNode"));
    }
    match doc.get(node, elem) {
        Some(child) if !doc.is_null(child) || rest.is_empty() => {
            create_path(doc, ed, child, rest, value, options, reached)
        }
        Some(null) => {
            if let Some(new) = build(rest, value, options)? {
                ed.replace_node(doc, null, &new);
            }
            Ok(())
        }
        None => {
            if let Some(new) = build(rest, value, options)? {
                ed.insert(doc, node, elem, new);
            }
            Ok(())
        }
    }
}

/// The content created for a missing `path` ending in the value.
fn build(path: &[String], value: &Val, options: Option<&Options>) -> Result<Option<New>, String> {
    let Some((elem, rest)) = path.split_first() else {
        return Ok(Some(match value {
            Val::Node(new) => new.clone(),
            Val::Scalar(s) => {
                // A new scalar gets the value; with a delimiter, the value joined to "".
                let s = match options.filter(|o| !o.delimiter.is_empty()) {
                    Some(o) => delimited("", s, o),
                    None => s.clone(),
                };
                New::Plain(untyped_scalar(&s))
            }
        }));
    };
    if let Some((key, wanted)) = list_matcher(elem) {
        let item = if key.is_empty() {
            New::Plain(untyped_scalar(wanted))
        } else {
            let mut entries = vec![(key.to_owned(), New::Plain(untyped_scalar(wanted)))];
            if let Some(New::Map(more)) = build(rest, value, options)? {
                entries.extend(more);
            }
            New::Map(entries)
        };
        return Ok(Some(New::Seq(vec![item])));
    }
    if elem == "*" {
        return Ok(None);
    }
    if let Ok(index) = elem.parse::<usize>() {
        return Err(format!("index {index} specified but only 0 elements found"));
    }
    Ok(build(rest, value, options)?.map(|inner| New::Map(vec![(elem.clone(), inner)])))
}

fn delimited(current: &str, value: &str, options: &Options) -> String {
    let mut parts: Vec<&str> = current.split(options.delimiter.as_str()).collect();
    if options.index < 0 {
        parts.insert(0, value);
    } else if options.index as usize >= parts.len() {
        parts.push(value);
    } else {
        parts[options.index as usize] = value;
    }
    parts.join(&options.delimiter)
}

/// kustomize's `setTargetValue`: a scalar target takes the value's text and keeps its type;
/// a collection target is replaced by the value node.
fn set_target(
    doc: &Doc,
    ed: &mut Editor,
    target: NodeId,
    value: &Val,
    options: Option<&Options>,
) -> Result<(), String> {
    if matches!(doc.node(target).kind, Kind::Alias(_)) {
        return Ok(());
    }
    let delimiter = options.filter(|o| !o.delimiter.is_empty());
    if let Some(options) = delimiter {
        let Some(current) = doc.str(target) else {
            return Err("delimiter option can only be used with scalar nodes".into());
        };
        let joined = delimited(current, value.scalar(), options);
        write_scalar(doc, ed, target, &joined);
        return Ok(());
    }
    match (doc.str(target).is_some(), value) {
        (true, Val::Scalar(s)) => write_scalar(doc, ed, target, s),
        (true, Val::Node(..)) => write_scalar(doc, ed, target, ""),
        (false, Val::Scalar(s)) => ed.replace_node(doc, target, &New::Plain(untyped_scalar(s))),
        (false, Val::Node(new)) => ed.replace_node(doc, target, new),
    }
    Ok(())
}

/// Sets a scalar's text, keeping its type: strings stay strings, numbers and booleans are
/// written as they come, quoting style is kept.
fn write_scalar(doc: &Doc, ed: &mut Editor, target: NodeId, value: &str) {
    if doc.str(target) == Some(value) {
        return;
    }
    let as_string = match &doc.node(target).kind {
        Kind::Scalar {
            style: Style::Plain,
            tagged: false,
            ..
        } => {
            !doc.is_null(target)
                && crate::yaml::resolve_plain(doc.str(target).unwrap_or_default()).is_string()
        }
        _ => true,
    };
    ed.set_scalar(doc, target, value, as_string);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors() {
        let labels = vec![
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "a".to_owned()),
        ];
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=a", true),
            ("app!=web", false),
            ("tier in (a, b)", true),
            ("tier notin (a)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing", false),
        ] {
            assert_eq!(selector_matches(s, &labels).unwrap(), want, "{s}");
        }
        assert!(selector_matches("a b c", &labels).is_err());
    }

    #[test]
    fn smarter_path_split() {
        assert_eq!(
            split_path("spec.containers.[name=a.b].image"),
            vec!["spec", "containers", "[name=a.b]", "image"]
        );
    }

    #[test]
    fn delimiter_positions() {
        let o = |index| Options {
            delimiter: "/".into(),
            index,
            create: false,
        };
        assert_eq!(delimited("a/b/c", "x", &o(1)), "a/x/c");
        assert_eq!(delimited("a/b", "x", &o(-1)), "x/a/b");
        assert_eq!(delimited("a/b", "x", &o(9)), "a/b/x");
    }

    /// serde_json's `arbitrary_precision` is on in the workspace build (the starlark plugin's
    /// interpreter needs it): an index that is not an integer is still named with its value.
    #[test]
    fn option_numbers_are_read_and_misfits_named() {
        let options: Options = config_file::from_json_value(json!({"index": -2})).unwrap();
        assert_eq!(options.index, -2);
        for (index, expected) in [
            (
                json!(1.5),
                "invalid type: floating point `1.5`, expected i64",
            ),
            (
                json!(u64::MAX),
                "invalid value: integer `18446744073709551615`, expected i64",
            ),
        ] {
            let error = config_file::from_json_value::<Options>(json!({ "index": index }))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{error}");
        }
    }
}
