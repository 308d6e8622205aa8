//! search-replace (catalog `functions/go/search-replace`, kyaml framework <= 0.12): match
//! fields by path, value, value regex and file path; optionally put a value or a comment.

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::{Map, Value};

use super::{Ctx, Exit, Function, param};
use crate::rl::{FnResult, Obj};
use crate::yaml::{
    Doc, Kind, New, NodeId, Style, block_items, block_span, scalar_edit, untyped_scalar,
};

pub static FUNCTION: Function = Function {
    name: "search-replace",
    description: "Search fields by path, value or value regex (and file path); optionally set \
                  their value or add a line comment.",
    tags: &[
        (
            "v0.2",
            "kyaml-framework walker of the catalog snapshot (path DP matcher, RE2-style regex)",
        ),
        ("v0.2.0", "same implementation as v0.2"),
    ],
    parameters,
    changes: &[
        "matched scalar fields (put-value)",
        "line comments (put-comment)",
    ],
    run,
    legacy_results: true,
    pure: true,
};

const MATCHERS: [&str; 6] = [
    "by-value",
    "by-file-path",
    "by-value-regex",
    "by-path",
    "put-value",
    "put-comment",
];

fn parameters() -> Vec<Parameter> {
    let doc = [
        ("by-value", "Match fields whose value equals this.", "nginx"),
        (
            "by-value-regex",
            "Match fields whose value matches this regex (unanchored).",
            "nginx-(.*)",
        ),
        (
            "by-path",
            "Dotted field path; `*` is one segment, `**` any number, `[n]`/`[*]` list elements.",
            "spec.**.image",
        ),
        (
            "by-file-path",
            "Glob over the item's path annotation (`*`, `**`, `?`, `[..]`, `{a,b}`).",
            "**/deploy*.yaml",
        ),
        (
            "put-value",
            "New value of matched fields; `${1}`.. are by-value-regex groups.",
            "ubuntu-${1}",
        ),
        (
            "put-comment",
            "Line comment for matched fields (or for matched list keys).",
            "kpt-set: ${image}",
        ),
    ];
    doc.iter()
        .map(|(name, description, example)| {
            let mut p = param(name, ParameterType::String, false, description);
            p.example = Some((*example).to_owned());
            p
        })
        .collect()
}

struct Config {
    by_value: String,
    by_value_regex: String,
    by_path: String,
    by_file_path: String,
    put_value: String,
    put_comment: String,
    regex: Option<regex::Regex>,
    glob: Option<Result<globset::GlobMatcher, String>>,
}

/// What to report: the catalog's `SearchResult`.
struct Found {
    file: String,
    field: String,
    value: String,
}

struct Search<'c> {
    config: &'c Config,
    file: String,
    found: Vec<Found>,
    count: usize,
}

fn failure(ctx: &mut Ctx, message: &str) -> Exit {
    let text = format!("failed to perform search-replace operation: {message:?}");
    ctx.results.push(FnResult::error(text));
    Exit::Failed(message.to_owned())
}

fn config(ctx: &mut Ctx) -> Result<Config, String> {
    let doc = ctx.doc();
    // The catalog reads `data` of any object, as strings, and checks the keys first.
    let mut data = Map::new();
    if let Some(fc) = ctx.rl.function_config
        && let Some(d) = doc.get(fc, "data")
    {
        for &(k, v) in doc.entries(d) {
            let key = doc.str(k).unwrap_or_default();
            if !MATCHERS.contains(&key) {
                let quoted: Vec<String> = MATCHERS.iter().map(|m| format!("{m:?}")).collect();
                return Err(format!(
                    "invalid matcher {key:?}, must be one of [{}]",
                    quoted.join(" ")
                ));
            }
            let value = match doc.str(v) {
                Some(s) if !doc.is_null(v) => Value::String(s.to_owned()),
                Some(_) => Value::String(String::new()),
                None => doc.to_json(v),
            };
            data.insert(key.to_owned(), value);
        }
    }
    let data = Value::Object(data);
    if let Err(rule) = super::validate(&parameters(), &data) {
        return Err(format!("invalid functionConfig: {rule}"));
    }
    let get = |k: &str| {
        data.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut config = Config {
        by_value: get("by-value"),
        by_value_regex: get("by-value-regex"),
        by_path: get("by-path"),
        by_file_path: get("by-file-path"),
        put_value: get("put-value"),
        put_comment: get("put-comment"),
        regex: None,
        glob: None,
    };
    if !config.by_value.is_empty() && !config.by_value_regex.is_empty() {
        return Err("only one of [\"by-value\", \"by-value-regex\"] can be provided".into());
    }
    if !config.by_value_regex.is_empty() {
        config.regex = Some(regex::Regex::new(&config.by_value_regex).map_err(|e| {
            format!(
                "error parsing regexp: {}",
                e.to_string().lines().last().unwrap_or_default().trim()
            )
        })?);
    }
    if !config.by_file_path.is_empty() {
        config.glob = Some(
            globset::GlobBuilder::new(&config.by_file_path)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|_| "syntax error in pattern".to_owned()),
        );
    }
    Ok(config)
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = match config(ctx) {
        Ok(config) => config,
        Err(message) => return failure(ctx, &message),
    };
    let mut search = Search {
        config: &config,
        file: String::new(),
        found: Vec::new(),
        count: 0,
    };
    for o in ctx.rl.items.clone() {
        if let Some(exit) = ctx.interrupted() {
            return exit;
        }
        let obj = ctx.rl.obj(o);
        if let Err(message) = search.perform(ctx, &obj) {
            return failure(ctx, &message);
        }
    }
    let mutated = !config.put_comment.is_empty() || !config.put_value.is_empty();
    if search.found.is_empty() {
        ctx.results.push(FnResult::new("no matches", None));
    }
    for found in search.found {
        let message = if mutated {
            format!("Mutated field value to {:?}", found.value)
        } else {
            format!("Matched field value {:?}", found.value)
        };
        let mut result = FnResult::new(message, None).field_path(found.field);
        if !found.file.is_empty() {
            result.file = Some(New::Map(vec![("path".into(), New::str(found.file))]));
        }
        ctx.results.push(result);
    }
    Exit::Ok
}

impl Search<'_> {
    fn perform(&mut self, ctx: &mut Ctx, obj: &Obj) -> Result<(), String> {
        let file = obj.path_annotation().unwrap_or_default().to_owned();
        if let Some(glob) = &self.config.glob {
            let glob = glob.as_ref().map_err(Clone::clone)?;
            if !glob.is_match(&file) {
                return Ok(());
            }
        }
        self.file = file;
        if self.should_put_value_by_path() {
            return self.put_value_by_path(ctx, obj.id);
        }
        self.accept(ctx, obj.id, String::new(), 0)
    }

    fn accept(
        &mut self,
        ctx: &mut Ctx,
        node: NodeId,
        path: String,
        depth: usize,
    ) -> Result<(), String> {
        let doc = ctx.doc();
        if depth > 512 {
            return Ok(());
        }
        match &doc.node(node).kind {
            Kind::Map(_) => {
                self.visit_mapping(ctx, node, &path)?;
                for &(k, v) in doc.entries(node) {
                    let key = doc.str(k).unwrap_or_default();
                    self.accept(ctx, v, format!("{path}.{key}"), depth + 1)?;
                }
            }
            Kind::Seq(_) => {
                for (i, &item) in doc.items(node).iter().enumerate() {
                    self.accept(ctx, item, format!("{path}[{i}]"), depth + 1)?;
                }
            }
            Kind::Scalar { .. } => self.visit_scalar(ctx, node, &path)?,
            Kind::Alias(_) => {}
        }
        Ok(())
    }

    /// put-comment on keys whose value is a matching (non-empty) sequence.
    fn visit_mapping(&mut self, ctx: &mut Ctx, map: NodeId, path: &str) -> Result<(), String> {
        if self.config.put_comment.is_empty() {
            return Ok(());
        }
        let doc = ctx.doc();
        for &(k, v) in doc.entries(map) {
            if !matches!(&doc.node(v).kind, Kind::Seq(items) if !items.is_empty()) {
                continue;
            }
            let key = doc.str(k).unwrap_or_default().trim();
            let to_key = format!("{path}.{key}");
            if !self.path_match(to_key.trim_start_matches('.')) {
                continue;
            }
            let comment = comment_text(&self.config.put_comment);
            let mut flow = String::new();
            doc.to_new(v).flow_plain(&mut flow);
            key_comment(ctx, k, v, &comment);
            self.found.push(Found {
                file: self.file.clone(),
                field: format!("{} # {}", self.config.by_path, self.config.put_comment),
                value: flow,
            });
            self.count += 1;
        }
        Ok(())
    }

    fn visit_scalar(&mut self, ctx: &mut Ctx, node: NodeId, path: &str) -> Result<(), String> {
        let doc = ctx.doc();
        let value = doc.str(node).unwrap_or_default();
        let path_match = self.path_match(path.trim_start_matches('.'));
        let c = self.config;
        let value_match = (!c.by_value.is_empty() && c.by_value == value)
            || c.regex.as_ref().is_some_and(|re| re.is_match(value));
        // Value and path both match, or value only (no path given), or path only (no value matcher).
        let matched = (value_match && (path_match || c.by_path.is_empty()))
            || (path_match && c.by_value.is_empty() && c.by_value_regex.is_empty());
        if !matched {
            return Ok(());
        }
        self.count += 1;
        let n = doc.node(node);
        let mut comment = doc.line_comment(n.end()).map(|c| format!("# {c}"));
        if doc
            .rest_of_line(n.end())
            .trim_start()
            .starts_with([',', ']', '}'])
        {
            comment = None;
        }
        if !c.put_comment.is_empty() {
            let resolved = resolve_pattern(value, c.regex.as_ref(), &c.put_comment)?;
            let text = comment_text(&resolved);
            set_line_comment(ctx, node, &text);
            comment = Some(text);
        }
        let mut text = doc.src[n.start().min(n.end())..n.end()].to_owned();
        if !c.put_value.is_empty() {
            let resolved = resolve_pattern(value, c.regex.as_ref(), &c.put_value)?;
            // The tag is cleared: a plain scalar takes the implicit type of its new text.
            if let Some(edit) = scalar_edit(doc, node, &resolved, false) {
                text = edit.2.trim().to_owned();
                ctx.ed.replace(edit.0, edit.1, edit.2);
            }
        }
        if !self.file.is_empty() {
            let value = match comment {
                Some(comment) => format!("{text} {comment}"),
                None => text,
            };
            self.found.push(Found {
                file: self.file.clone(),
                field: path.trim_start_matches('.').to_owned(),
                value: value.trim().to_owned(),
            });
        }
        Ok(())
    }

    fn path_match(&self, path: &str) -> bool {
        if self.config.by_path.is_empty() {
            return false;
        }
        let pattern: Vec<&str> = self.config.by_path.split('.').collect();
        let elems: Vec<&str> = path.split('.').collect();
        backtrack_match(&elems, &pattern)
    }

    fn should_put_value_by_path(&self) -> bool {
        let c = self.config;
        is_abs_path(&c.by_path)
            && !c.by_path.contains('[')
            && c.by_value.is_empty()
            && c.by_value_regex.is_empty()
            && !c.put_value.is_empty()
    }

    /// Creates (or overwrites) the field at the literal `by-path` in the object.
    fn put_value_by_path(&mut self, ctx: &mut Ctx, obj: NodeId) -> Result<(), String> {
        let doc = ctx.doc();
        let path: Vec<&str> = self.config.by_path.split('.').collect();
        let (last, parents) = path.split_last().expect("non-empty path");
        let value = untyped_scalar(&self.config.put_value);
        let mut node = obj;
        let mut created: Option<(NodeId, Vec<&str>)> = None;
        for (i, key) in parents.iter().enumerate() {
            match doc.get(node, key) {
                Some(child)
                    if doc.is_map(child) && !matches!(doc.node(child).kind, Kind::Alias(_)) =>
                {
                    node = child;
                }
                Some(child) if doc.is_null(child) => {
                    created = Some((child, parents[i + 1..].to_vec()));
                    break;
                }
                Some(child) => {
                    return Err(format!(
                        "wrong Node Kind for {} expected: MappingNode was {}",
                        parents[..=i].join("."),
                        kind_name(doc, child)
                    ));
                }
                None => {
                    let mut new = New::Map(vec![((*last).to_owned(), New::Plain(value.clone()))]);
                    for k in parents[i + 1..].iter().rev() {
                        new = New::Map(vec![((*k).to_owned(), new)]);
                    }
                    ctx.ed.insert(doc, node, key, new);
                    created = Some((usize::MAX, Vec::new()));
                    break;
                }
            }
        }
        match created {
            Some((usize::MAX, _)) => {}
            Some((null, rest)) => {
                let mut new = New::Map(vec![((*last).to_owned(), New::Plain(value.clone()))]);
                for k in rest.iter().rev() {
                    new = New::Map(vec![((*k).to_owned(), new)]);
                }
                ctx.ed.replace_node(doc, null, &new);
            }
            None => match doc.get(node, last) {
                Some(existing) if doc.str(existing).is_some() && !doc.is_null(existing) => {
                    // SetField replaces the value node: the new scalar has no tag or quoting.
                    let n = doc.node(existing);
                    let (start, end) = match n.kind {
                        Kind::Scalar {
                            style: Style::Block,
                            ..
                        } => block_span(doc, existing),
                        _ => (n.start(), n.end()),
                    };
                    ctx.ed.replace(start, end, value.clone());
                }
                Some(existing) => ctx
                    .ed
                    .replace_node(doc, existing, &New::Plain(value.clone())),
                None => ctx.ed.insert(doc, node, last, New::Plain(value.clone())),
            },
        }
        self.found.push(Found {
            file: self.file.clone(),
            field: self.config.by_path.clone(),
            value: self.config.put_value.clone(),
        });
        self.count += 1;
        Ok(())
    }
}

fn kind_name(doc: &Doc, id: NodeId) -> &'static str {
    match doc.node(doc.deref(id)).kind {
        Kind::Map(_) => "MappingNode",
        Kind::Seq(_) => "SequenceNode",
        _ => "ScalarNode",
    }
}

/// yaml.v3 writes a line comment with `# ` unless it already starts with `#`.
fn comment_text(comment: &str) -> String {
    if comment.starts_with('#') {
        comment.to_owned()
    } else {
        format!("# {comment}")
    }
}

/// Sets the line comment after a scalar in block context (replacing one already there).
fn set_line_comment(ctx: &mut Ctx, node: NodeId, comment: &str) {
    let doc = ctx.doc();
    let n = doc.node(node);
    if matches!(
        n.kind,
        Kind::Scalar {
            style: Style::Block,
            ..
        }
    ) {
        return;
    }
    let rest = doc.rest_of_line(n.end());
    let trimmed = rest.trim_start();
    if !(trimmed.is_empty() || trimmed.starts_with('#')) {
        // Inside a flow collection: no room for a line comment without reformatting.
        return;
    }
    let rest = rest.trim_end_matches('\r');
    ctx.ed
        .replace(n.end(), n.end() + rest.len(), format!(" {comment}"));
}

/// Comment on `key:` whose value is a sequence; a flow sequence becomes block style.
fn key_comment(ctx: &mut Ctx, key: NodeId, value: NodeId, comment: &str) {
    let doc = ctx.doc();
    let k = doc.node(key);
    let v = doc.node(value);
    let line = doc.rest_of_line(k.end());
    let Some(colon) = line.find(':') else {
        return;
    };
    let after = k.end() + colon + 1;
    if v.flow() {
        let items: Vec<New> = doc.items(value).iter().map(|&i| doc.to_new(i)).collect();
        let mut lines = String::new();
        block_items(&items, k.col() + 2, &mut lines);
        let end = doc.line_end(v.end());
        let keep_newline = doc.src[..end].ends_with('\n');
        let mut text = format!(" {comment}\n{}", lines.trim_end_matches('\n'));
        if keep_newline {
            text.push('\n');
        }
        ctx.ed.replace(after, end, text);
    } else {
        let rest = doc.rest_of_line(after);
        let trimmed = rest.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            let rest = rest.trim_end_matches('\r');
            ctx.ed
                .replace(after, after + rest.len(), format!(" {comment}"));
        }
    }
}

/// The catalog's `resolvePattern`: `${n}` from the first regex match's groups.
fn resolve_pattern(
    value: &str,
    regex: Option<&regex::Regex>,
    pattern: &str,
) -> Result<String, String> {
    let Some(re) = regex else {
        return Ok(pattern.to_owned());
    };
    let mut out = pattern.to_owned();
    if let Some(caps) = re.captures(value) {
        for i in 1..caps.len() {
            let group = caps.get(i).map_or("", |m| m.as_str());
            out = out.replace(&format!("${{{i}}}"), group);
        }
    }
    static UNRESOLVED: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let unresolved =
        UNRESOLVED.get_or_init(|| regex::Regex::new(r"\$\{([0-9]+)\}").expect("static regex"));
    if unresolved.is_match(&out) {
        return Err("unable to resolve capture groups".into());
    }
    Ok(out)
}

fn is_abs_path(path: &str) -> bool {
    !path.split('.').any(|e| e.is_empty() || e.contains('*'))
}

/// The catalog's DP matcher: `*` one element, `**` zero or more, `a[*]`/`*[n]` list elements.
fn backtrack_match(path: &[&str], pattern: &[&str]) -> bool {
    let (n, m) = (path.len(), pattern.len());
    let mut dp = vec![vec![false; m + 1]; n + 1];
    dp[0][0] = true;
    for j in 1..=m {
        if pattern[j - 1] == "**" {
            dp[0][j] = dp[0][j - 1];
        }
    }
    for i in 1..=n {
        for j in 1..=m {
            if pattern[j - 1] == "**" {
                dp[i][j] = dp[i][j - 1] || dp[i - 1][j];
            } else if pattern[j - 1] == "*" || element_match(path[i - 1], pattern[j - 1]) {
                dp[i][j] = dp[i - 1][j - 1];
            }
        }
    }
    dp[n][m]
}

fn element_match(elem: &str, pattern: &str) -> bool {
    if elem == pattern {
        return true;
    }
    if elem.contains('[') {
        let elem_parts: Vec<&str> = elem.split('[').collect();
        let pattern_parts: Vec<&str> = pattern.split('[').collect();
        if pattern_parts[0] != "*" && elem_parts[0] != pattern_parts[0] {
            return false;
        }
        return pattern_parts.len() > 1
            && (pattern_parts[1] == "*]" || elem_parts.get(1) == pattern_parts.get(1));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        let m = |path: &str, pattern: &str| {
            let p: Vec<&str> = path.split('.').collect();
            let q: Vec<&str> = pattern.split('.').collect();
            backtrack_match(&p, &q)
        };
        assert!(m("a.a.b.c.e.b", "a.*.b.**.b"));
        assert!(m("spec.containers[0].image", "spec.containers[*].image"));
        assert!(m("spec.containers[1].image", "**.image"));
        assert!(m("spec.containers[1].image", "spec.*[1].image"));
        assert!(!m("spec.containers[1].image", "spec.containers[0].image"));
        assert!(!m("spec.containers[1].image", "spec.containers.image"));
        assert!(m("metadata.name", "**.metadata.name"));
        assert!(m("a", "**"));
        assert!(!m("a.b", "a"));
    }

    #[test]
    fn capture_groups() {
        let re = regex::Regex::new("nginx-(.*)").unwrap();
        assert_eq!(
            resolve_pattern("my-nginx-1.2", Some(&re), "ubuntu-${1}").unwrap(),
            "ubuntu-1.2"
        );
        assert!(resolve_pattern("x", Some(&re), "${2}").is_err());
        assert_eq!(resolve_pattern("x", None, "${1}").unwrap(), "${1}");
    }
}
