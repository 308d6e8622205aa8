//! apply-setters (catalog `functions/go/apply-setters`, kyaml framework): rewrites fields whose
//! line comment is `# kpt-set: <pattern>`. Comments are data here, so they are read from the
//! original text next to each value.

use std::collections::BTreeMap;

use krm_plugin_api::{Parameter, ParameterType};

use super::{Ctx, Exit, Function, check, param};
use crate::rl::{FnResult, Obj};
use crate::yaml::{Doc, Kind, New, NodeId, Style, block_items};

pub static FUNCTION: Function = Function {
    name: "apply-setters",
    description: "Set the values of fields marked with `# kpt-set: ${name}` comments.",
    tags: &[
        ("v0.2", "kyaml-framework walker of the catalog snapshot"),
        ("v0.2.0", "same implementation as v0.2"),
        ("v0.1", "same setter semantics (scalar and array setters)"),
        ("v0.1.1", "same setter semantics as v0.1"),
    ],
    parameters,
    changes: &["fields marked with `# kpt-set:` comments"],
    run,
    legacy_results: true,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut data = param(
        "data",
        ParameterType::Map,
        false,
        "Setter name -> value (the `data` of any functionConfig object).",
    );
    data.example = Some("{replicas: \"3\"}".into());
    vec![data]
}

struct Setters {
    values: BTreeMap<String, String>,
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = ctx.config_json();
    let data = config
        .get("data")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    if let Err(exit) = check(ctx, &parameters(), &serde_json::json!({ "data": data })) {
        return exit;
    }
    let setters = Setters {
        values: ctx.config_data().into_iter().collect(),
    };
    let mut results = Vec::new();
    for o in ctx.rl.items.clone() {
        if let Some(exit) = ctx.interrupted() {
            return exit;
        }
        let obj = ctx.rl.obj(o);
        if let Err(message) = visit(ctx, &setters, &obj, o, String::new(), &mut results) {
            return ctx.fail(format!("failed to apply setters: {message}"));
        }
    }
    if results.is_empty() {
        ctx.results
            .push(FnResult::new("no matches for input setter(s)", None));
    } else {
        ctx.add_results(results);
    }
    Exit::Ok
}

/// The pattern of a `kpt-set:` comment.
fn setter_pattern(comment: Option<&str>) -> Option<&str> {
    comment?.strip_prefix("kpt-set:").map(str::trim)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn visit(
    ctx: &mut Ctx,
    setters: &Setters,
    obj: &Obj,
    node: NodeId,
    path: String,
    results: &mut Vec<FnResult>,
) -> Result<(), String> {
    let doc = ctx.doc();
    match &doc.node(node).kind {
        Kind::Map(_) => {
            for &(key, value) in doc.entries(node) {
                let field = join(&path, doc.str(key).unwrap_or_default());
                match &doc.node(value).kind {
                    Kind::Seq(_) => {
                        // Block style: comment after `key:`; flow style: after the `]`.
                        let comment = if doc.node(value).flow() {
                            doc.line_comment(doc.node(value).end())
                        } else {
                            after_colon(doc, doc.node(key).end())
                        };
                        if let Some(pattern) = setter_pattern(comment)
                            && let Some(value_text) = array_setter(setters, pattern)
                        {
                            set_array(ctx, key, value, pattern, value_text)?;
                            results.push(result(obj, &field, value_text));
                            continue;
                        }
                        visit(ctx, setters, obj, value, field, results)?;
                    }
                    Kind::Map(_) => visit(ctx, setters, obj, value, field, results)?,
                    Kind::Scalar { .. } => scalar(ctx, setters, obj, value, &field, results)?,
                    Kind::Alias(_) => {}
                }
            }
        }
        Kind::Seq(_) => {
            for (i, &item) in doc.items(node).iter().enumerate() {
                let field = join(&path, &i.to_string());
                match &doc.node(item).kind {
                    Kind::Scalar { .. } => scalar(ctx, setters, obj, item, &field, results)?,
                    Kind::Map(_) | Kind::Seq(_) => visit(ctx, setters, obj, item, field, results)?,
                    Kind::Alias(_) => {}
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn after_colon<'a>(doc: &Doc<'a>, key_end: usize) -> Option<&'a str> {
    let rest = doc.rest_of_line(key_end).trim_start();
    rest.strip_prefix(':')?
        .trim_start()
        .strip_prefix('#')
        .map(str::trim)
}

fn result(obj: &Obj, field: &str, value: &str) -> FnResult {
    FnResult::new(format!("set field value to {value:?}"), None)
        .field_path(field)
        .in_file_of(obj)
}

/// Placeholders `${name}` of a pattern, in order.
fn placeholders(pattern: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = pattern;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        names.push(&rest[start + 2..start + 2 + len]);
        rest = &rest[start + 2 + len + 1..];
    }
    names
}

fn array_setter<'s>(setters: &'s Setters, pattern: &str) -> Option<&'s str> {
    let name = pattern.strip_prefix("${")?.strip_suffix('}')?;
    setters.values.get(name).map(String::as_str)
}

fn scalar(
    ctx: &mut Ctx,
    setters: &Setters,
    obj: &Obj,
    node: NodeId,
    field: &str,
    results: &mut Vec<FnResult>,
) -> Result<(), String> {
    let doc = ctx.doc();
    let n = doc.node(node);
    if matches!(
        n.kind,
        Kind::Scalar {
            style: Style::Block,
            ..
        }
    ) {
        return Ok(());
    }
    let Some(pattern) = setter_pattern(doc.line_comment(n.end())) else {
        return Ok(());
    };
    let names = placeholders(pattern);
    if !names.iter().any(|name| setters.values.contains_key(*name)) {
        return Ok(());
    }
    let current = doc.str(node).unwrap_or_default();
    // Recover values of setters not given from the current value.
    let mut recovered: BTreeMap<&str, String> = BTreeMap::new();
    let mut regex = String::from("^");
    let mut rest = pattern;
    for name in &names {
        let start = rest.find("${").unwrap_or(0);
        regex.push_str(&regex::escape(&rest[..start]));
        regex.push_str("(.*)");
        rest = &rest[start + name.len() + 3..];
    }
    regex.push_str(&regex::escape(rest));
    regex.push('$');
    if let Ok(re) = regex::Regex::new(&regex)
        && let Some(caps) = re.captures(current)
    {
        for (i, name) in names.iter().enumerate() {
            if let Some(m) = caps.get(i + 1) {
                recovered.insert(name, m.as_str().to_owned());
            }
        }
    }
    let mut value = pattern.to_owned();
    let mut missing = Vec::new();
    for name in &names {
        let replacement = setters
            .values
            .get(*name)
            .cloned()
            .or_else(|| recovered.get(name).cloned());
        match replacement {
            Some(v) => value = value.replacen(&format!("${{{name}}}"), &v, 1),
            None => missing.push(format!("${{{name}}}")),
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "values for setters [{}] must be provided",
            missing.join(" ")
        ));
    }
    if value != current
        || !matches!(
            n.kind,
            Kind::Scalar {
                style: Style::Plain,
                tagged: false,
                ..
            }
        )
    {
        ctx.ed.set_scalar(doc, node, &value, false);
    }
    results.push(result(obj, field, &value));
    Ok(())
}

fn set_array(
    ctx: &mut Ctx,
    key: NodeId,
    value: NodeId,
    pattern: &str,
    text: &str,
) -> Result<(), String> {
    let doc = ctx.doc();
    let parsed = Doc::parse(text).ok();
    let items: Vec<New> = match parsed
        .as_ref()
        .and_then(|p| p.roots.first().map(|&r| (p, r)))
    {
        None => Vec::new(),
        Some((p, root)) if p.is_null(root) => Vec::new(),
        Some((p, root)) if p.is_seq(root) => p
            .items(root)
            .iter()
            .map(|&i| {
                let n = p.node(i);
                New::Plain(p.src[n.start()..n.end()].to_owned())
            })
            .collect(),
        Some(_) => {
            return Err(format!(
                "input to array setter must be an array of values, but found {text}"
            ));
        }
    };
    let key_node = doc.node(key);
    let value_node = doc.node(value);
    let comment = format!("# kpt-set: {pattern}");
    let end = doc.line_end(value_node.end().max(key_node.end()));
    let keep_newline = doc.src[..end].ends_with('\n');
    let mut text = if items.is_empty() {
        format!(": [] {comment}")
    } else {
        let indent = if value_node.flow() {
            key_node.col() + 2
        } else {
            value_node.col()
        };
        let mut lines = String::new();
        block_items(&items, indent, &mut lines);
        format!(": {comment}\n{}", lines.trim_end_matches('\n'))
    };
    if keep_newline {
        text.push('\n');
    }
    ctx.ed.replace(key_node.end(), end, text);
    Ok(())
}
