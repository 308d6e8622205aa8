//! AppConfig/Properties: a Java `.properties` file seen the way ConfigHub's propkit sees it, as
//! one YAML document whose nesting follows the dots of the keys (`database.port=5432` is
//! `database: {port: 5432}`), values typed as propkit types them (`true`/`false` booleans,
//! integers, finite decimals, strings otherwise). A key that is both a value and a prefix of
//! others (`log=INFO`, `log.web=DEBUG`) keeps its own value under the empty key, as propkit
//! does. The unit's one resource is named by `configHub.configName` (`NoName` without it) and
//! typed by `configHub.configSchema` (`NoSchema`), in the AppConfig category.
//!
//! Reading is `java-properties`' (Java's rules: `=`, `:` or whitespace separators, `#`/`!`
//! comments, backslash continuations and escapes), in UTF-8. Writing back differs from
//! propkit, which rewrites the whole file sorted and without comments: here only the lines
//! of properties whose values changed are rewritten (as `key=value`), the lines of removed
//! properties are dropped and new properties are appended; comments, blank lines, order and
//! every other line stay as they were, byte for byte.
//!
//! A key given more than once keeps its last value (as Java's `Properties.load` and propkit
//! do); a change rewrites that last line, and a removal drops every line of the key.

use std::collections::HashMap;
use std::ops::Range;

use krm_plugin_api::quoted;
use serde_json::Value;

use crate::api::ResourceInfo;
use crate::resource::Element;
use crate::yaml::{Doc, New, NodeId, block_entries, push_rendered};

/// A properties file larger than this is refused.
pub const MAX_PROPERTIES_BYTES: usize = 16 * 1024 * 1024;
/// A file with more key/value lines than this is refused.
pub const MAX_PROPERTIES: usize = 100_000;
/// A physical line longer than this is refused.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// A key with more dot-separated segments than this is refused (each is a level of the model).
pub const MAX_KEY_SEGMENTS: usize = 64;
/// The YAML model of a file may be this many times as large as the file, plus
/// [`MODEL_BYTES_ALLOWANCE`]: it indents each level of a key and repeats no shared prefix, so
/// deep keys that share none make it outgrow the file (and what parses and walks it, more so).
pub const MODEL_BYTES_PER_BYTE: usize = 4;
/// See [`MODEL_BYTES_PER_BYTE`]; lets a small file nest as deep as its keys may.
pub const MODEL_BYTES_ALLOWANCE: usize = 256 * 1024;
/// YAML's limit on an implicit key, which each segment becomes in the model (quoted and
/// escaped where it needs to be).
pub const MAX_SEGMENT_CHARS: usize = 1024;

/// What a resource is named and typed by, and the names used without them.
pub const CONFIG_NAME_PATH: [&str; 2] = ["configHub", "configName"];
pub const CONFIG_SCHEMA_PATH: [&str; 2] = ["configHub", "configSchema"];
pub const NO_NAME: &str = "NoName";
pub const NO_SCHEMA: &str = "NoSchema";
/// The category of application configuration.
pub const CATEGORY_APP_CONFIG: &str = "AppConfig";

/// Why a properties file cannot be read, or the model cannot be written back as one.
#[derive(Debug, thiserror::Error)]
pub enum PropertiesError {
    #[error("properties data is {size} bytes, more than the limit of {MAX_PROPERTIES_BYTES}")]
    TooLarge { size: usize },
    #[error("line {line} is {length} bytes, more than the limit of {MAX_LINE_BYTES}")]
    LongLine { line: usize, length: usize },
    #[error("more than {MAX_PROPERTIES} properties")]
    TooMany,
    #[error("line {line}: {}", without_line_number(.source))]
    Syntax {
        line: usize,
        #[source]
        source: java_properties::PropertiesError,
    },
    #[error("line {line}: key {} {problem}", quoted(.key))]
    Key {
        line: usize,
        key: String,
        problem: KeyProblem,
    },
    /// Keys that share no prefixes nest the model so deeply that its text would outgrow the
    /// file many times over.
    #[error(
        "line {line}: the YAML model of the file would be more than {limit} bytes ({MODEL_BYTES_PER_BYTE} per byte of the file and {MODEL_BYTES_ALLOWANCE} more): keys nest too deeply without sharing prefixes"
    )]
    ModelTooLarge { line: usize, limit: usize },
    /// A key the functions left in the model that reading the file back would refuse.
    #[error("the result's key {} {problem}", quoted(.key))]
    WrittenKey { key: String, problem: KeyProblem },
    #[error("the data is not one mapping of properties: {0}")]
    NotAMapping(String),
}

/// Why a property key cannot be read into the model: the same rules for the file read and
/// for keys the functions write, so that what is written can be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error(
        "has an empty segment (a leading, trailing or doubled dot), which the model's paths cannot name"
    )]
    EmptySegment,
    #[error("has more than {MAX_KEY_SEGMENTS} dot-separated segments")]
    TooDeep,
    #[error("has a segment longer than {MAX_SEGMENT_CHARS} characters as a YAML key")]
    LongSegment,
}

/// What keeps `key` out of the model, if anything.
pub fn key_problem(key: &str) -> Option<KeyProblem> {
    if key.split('.').any(str::is_empty) {
        return Some(KeyProblem::EmptySegment);
    }
    if key.split('.').nth(MAX_KEY_SEGMENTS).is_some() {
        return Some(KeyProblem::TooDeep);
    }
    let long = key.split('.').any(|segment| {
        let mut rendered = String::new();
        push_rendered(&mut rendered, segment, false);
        rendered.chars().count() > MAX_SEGMENT_CHARS
    });
    long.then_some(KeyProblem::LongSegment)
}

/// `java-properties`' message without the line number it appends (the variant names it).
fn without_line_number(error: &java_properties::PropertiesError) -> String {
    let text = error.to_string();
    match text.rsplit_once(" (line_number = ") {
        Some((message, _)) => message.to_owned(),
        None => text,
    }
}

/// One key/value line of the file.
#[derive(Debug)]
struct Entry {
    /// The line it starts on (1-based).
    line: usize,
    key: String,
    /// The value in the model's form, which decides whether it changed.
    value: String,
    /// Its physical lines, terminators included.
    span: Range<usize>,
    /// The first line's leading whitespace, kept on a rewritten line.
    indent: Range<usize>,
    /// The last line's terminator (none at the end of the text), kept on a rewritten line.
    terminator: Range<usize>,
}

/// A parsed properties file: its text and each key/value line.
#[derive(Debug)]
pub struct PropertiesFile {
    text: String,
    entries: Vec<Entry>,
    /// The entry in force for each key: its last.
    effective: HashMap<String, usize>,
}

impl PropertiesFile {
    /// Reads `text`, within the limits.
    pub fn parse(text: String) -> Result<Self, PropertiesError> {
        if text.len() > MAX_PROPERTIES_BYTES {
            return Err(PropertiesError::TooLarge { size: text.len() });
        }
        let lines = physical_lines(&text);
        if let Some((index, line)) = lines
            .iter()
            .enumerate()
            .find(|(_, line)| line.content.len() > MAX_LINE_BYTES)
        {
            return Err(PropertiesError::LongLine {
                line: index + 1,
                length: line.content.len(),
            });
        }
        let mut entries = Vec::new();
        let reader =
            java_properties::PropertiesIter::new_with_encoding(text.as_bytes(), encoding_rs::UTF_8);
        for line in reader {
            let line = line.map_err(|source| PropertiesError::Syntax {
                line: source.line_number().unwrap_or(0),
                source,
            })?;
            let number = line.line_number();
            let java_properties::LineContent::KVPair(key, value) = line.consume_content() else {
                continue;
            };
            // propkit skips empty keys; their lines stay in the text untouched.
            if key.is_empty() {
                continue;
            }
            if entries.len() == MAX_PROPERTIES {
                return Err(PropertiesError::TooMany);
            }
            if let Some(problem) = key_problem(&key) {
                return Err(PropertiesError::Key {
                    line: number,
                    key,
                    problem,
                });
            }
            let LogicalSpan {
                span,
                indent,
                terminator,
            } = logical_span(&lines, number - 1);
            entries.push(Entry {
                line: number,
                key,
                value: native_text(&typed(&value)).unwrap_or_default(),
                span,
                indent,
                terminator,
            });
        }
        let effective = entries
            .iter()
            .enumerate()
            .map(|(index, entry)| (entry.key.clone(), index))
            .collect();
        Ok(Self {
            text,
            entries,
            effective,
        })
    }

    /// The YAML model: one document, keys nested at their dots in the order they first
    /// appear, each key's value the last one given. Refused when it would outgrow the file
    /// more than [`MODEL_BYTES_PER_BYTE`] times (plus [`MODEL_BYTES_ALLOWANCE`]), counted as
    /// it is built.
    pub fn model(&self) -> Result<String, PropertiesError> {
        let limit = self
            .text
            .len()
            .saturating_mul(MODEL_BYTES_PER_BYTE)
            .saturating_add(MODEL_BYTES_ALLOWANCE);
        let mut size = 0usize;
        let mut root = Branch::default();
        for (index, entry) in self.entries.iter().enumerate() {
            if self.effective[&entry.key] != index {
                continue;
            }
            let segments: Vec<&str> = entry.key.split('.').collect();
            size = size
                .saturating_add(root.insert(&segments, typed_model(&entry.value), 0))
                .saturating_add(entry.value.len());
            if size > limit {
                return Err(PropertiesError::ModelTooLarge {
                    line: entry.line,
                    limit,
                });
            }
        }
        let entries = root.into_entries();
        if entries.is_empty() {
            return Ok("{}\n".to_owned());
        }
        let mut out = String::new();
        block_entries(&entries, 0, &mut out);
        Ok(out)
    }

    /// The file after the functions left the model as `model` (the JSON form of its one
    /// document): changed values rewritten in place, removed
    /// properties dropped, new ones appended, everything else as it was. A property with a
    /// comment in `comments` (the model's line comments, by key) gets it as a `#` line just
    /// above it, in place of the comment line that was there, if any.
    pub fn write(
        &self,
        model: &Value,
        comments: &HashMap<String, String>,
    ) -> Result<String, PropertiesError> {
        let mut now = Vec::new();
        match model {
            Value::Null => {}
            value @ Value::Object(_) => flatten(value, String::new(), &mut now),
            other => {
                return Err(PropertiesError::NotAMapping(format!(
                    "the document is {}",
                    kind_of(other)
                )));
            }
        }
        let values: HashMap<&str, &str> =
            now.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let terminator = first_terminator(&self.text);
        let mut out = String::with_capacity(self.text.len());
        let mut copied = 0;
        for (index, entry) in self.entries.iter().enumerate() {
            let comment = comments
                .get(entry.key.as_str())
                .filter(|_| self.effective[&entry.key] == index);
            let comment_line = comment
                .and_then(|_| self.comment_line_before(entry.span.start))
                .filter(|line| line.start >= copied);
            match &comment_line {
                Some(line) => out.push_str(&self.text[copied..line.start]),
                None => out.push_str(&self.text[copied..entry.span.start]),
            }
            match (comment, comment_line) {
                (Some(comment), Some(line)) if line.text == *comment => {
                    out.push_str(&self.text[line.whole]);
                }
                (Some(comment), line) => {
                    out.push_str(&self.text[entry.indent.clone()]);
                    push_comment(&mut out, comment);
                    out.push_str(line.map_or(terminator, |line| &self.text[line.terminator]));
                }
                (None, _) => {}
            }
            copied = entry.span.end;
            let original = &self.text[entry.span.clone()];
            match values.get(entry.key.as_str()) {
                None => {}
                Some(value) if self.effective[&entry.key] == index && *value != entry.value => {
                    out.push_str(&self.text[entry.indent.clone()]);
                    push_line(&mut out, &entry.key, value);
                    out.push_str(&self.text[entry.terminator.clone()]);
                }
                Some(_) => out.push_str(original),
            }
        }
        out.push_str(&self.text[copied..]);
        let added: Vec<&(String, String)> = now
            .iter()
            .filter(|(key, _)| !self.effective.contains_key(key))
            .collect();
        if !added.is_empty() && !out.is_empty() && !out.ends_with(['\n', '\r']) {
            out.push_str(terminator);
        }
        for (key, value) in added {
            if let Some(comment) = comments.get(key) {
                push_comment(&mut out, comment);
                out.push_str(terminator);
            }
            push_line(&mut out, key, value);
            out.push_str(terminator);
        }
        Ok(out)
    }

    /// The comment line (`#` or `!`) just above the line starting at `start`, if there is one.
    fn comment_line_before(&self, start: usize) -> Option<CommentLine> {
        let before = &self.text[..start];
        let line_end = before.trim_end_matches(['\n', '\r']).len();
        // Exactly one terminator: a blank line in between parts the comment from the property.
        if !matches!(&before[line_end..], "\n" | "\r" | "\r\n") {
            return None;
        }
        let line_start = before[..line_end]
            .rfind(['\n', '\r'])
            .map_or(0, |at| at + 1);
        let previous = before[..line_start]
            .strip_suffix('\n')
            .or_else(|| before[..line_start].strip_suffix('\r'))
            .map(|rest| rest.strip_suffix('\r').unwrap_or(rest));
        // A line that goes on a value with a trailing backslash is not a comment.
        if previous.is_some_and(ends_in_odd_backslashes) {
            return None;
        }
        let content = self.text[line_start..line_end].trim_start_matches([' ', '\t', '\u{c}']);
        let text = content.strip_prefix(['#', '!'])?;
        Some(CommentLine {
            start: line_start,
            text: text.trim().to_owned(),
            whole: line_start..start,
            terminator: line_end..start,
        })
    }
}

/// A comment line: where it starts, its text, its bytes and its terminator.
struct CommentLine {
    start: usize,
    text: String,
    whole: Range<usize>,
    terminator: Range<usize>,
}

/// `# comment`, one line (a comment cannot continue).
fn push_comment(out: &mut String, comment: &str) {
    out.push_str("# ");
    out.push_str(&comment.replace(['\n', '\r'], " "));
}

/// The line comments of a model's scalars (`key: value # comment`), by property key.
pub fn comments(doc: &crate::yaml::Doc, root: crate::yaml::NodeId) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (path, node) in crate::resource::scalars(doc, root) {
        if let Some(comment) = doc.line_comment(doc.node(node).end())
            && !comment.is_empty()
        {
            let key: Vec<String> = path
                .split('.')
                .map(crate::path::unescape)
                .filter(|segment| !segment.is_empty())
                .collect();
            out.insert(key.join("."), comment.to_owned());
        }
    }
    out
}

/// A mapping of the model being built, keys in the order they first appear.
#[derive(Default)]
struct Branch {
    children: Vec<(String, Node)>,
    index: HashMap<String, usize>,
}

enum Node {
    Leaf(New),
    Branch(Branch),
}

/// About what a new key at `depth` adds to the model's text: its indentation, the key, `: `
/// and the line's end.
fn model_line_bytes(depth: usize, key: &str) -> usize {
    2 * depth + key.len() + 3
}

impl Branch {
    /// The child at `key`, made when missing, and the model bytes that added.
    fn child(
        &mut self,
        key: &str,
        depth: usize,
        make: impl FnOnce() -> Node,
    ) -> (&mut Node, usize) {
        let (at, added) = match self.index.get(key) {
            Some(&at) => (at, 0),
            None => {
                self.index.insert(key.to_owned(), self.children.len());
                self.children.push((key.to_owned(), make()));
                (self.children.len() - 1, model_line_bytes(depth, key))
            }
        };
        (&mut self.children[at].1, added)
    }

    /// Puts `value` at `segments` below this branch (at `depth`); returns the model bytes
    /// the new keys add.
    fn insert(&mut self, segments: &[&str], value: New, depth: usize) -> usize {
        let Some((segment, rest)) = segments.split_first() else {
            return 0;
        };
        if rest.is_empty() {
            let (child, added) =
                self.child(segment, depth, || Node::Leaf(New::Plain(String::new())));
            return match child {
                // A key that also prefixes others keeps its value under the empty key.
                Node::Branch(branch) => {
                    let (own, more) =
                        branch.child("", depth + 1, || Node::Leaf(New::Plain(String::new())));
                    *own = Node::Leaf(value);
                    added + more
                }
                leaf => {
                    *leaf = Node::Leaf(value);
                    added
                }
            };
        }
        let (child, mut added) = self.child(segment, depth, || Node::Branch(Branch::default()));
        if let Node::Leaf(own) = child {
            let mut branch = Branch::default();
            let (slot, more) =
                branch.child("", depth + 1, || Node::Leaf(New::Plain(String::new())));
            *slot = Node::Leaf(std::mem::replace(own, New::Plain(String::new())));
            added += more;
            *child = Node::Branch(branch);
        }
        if let Node::Branch(branch) = child {
            added += branch.insert(rest, value, depth + 1);
        }
        added
    }

    fn into_entries(self) -> Vec<(String, New)> {
        self.children
            .into_iter()
            .map(|(key, node)| {
                let value = match node {
                    Node::Leaf(value) => value,
                    Node::Branch(branch) => New::Map(branch.into_entries()),
                };
                (key, value)
            })
            .collect()
    }
}

/// A value typed as propkit types it: `true`/`false`, a 64-bit integer, a finite decimal, or
/// else the string.
fn typed(value: &str) -> Value {
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => match crate::yaml::resolve_plain(value) {
            number @ Value::Number(_) => number,
            _ => Value::String(value.to_owned()),
        },
    }
}

/// The model's scalar for a value in its native text (as [`native_text`] wrote it).
fn typed_model(native: &str) -> New {
    match typed(native) {
        Value::String(text) => New::Str(text),
        other => New::Plain(other.to_string()),
    }
}

/// A scalar of the model as the text of a property (propkit's rules: integral decimals
/// without a fraction); `None` for collections.
fn native_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => String::new(),
        Value::Bool(flag) => flag.to_string(),
        Value::String(text) => text.clone(),
        Value::Number(number) => match (number.as_i64(), number.as_f64()) {
            (Some(integer), _) => integer.to_string(),
            (None, Some(float)) if float.fract() == 0.0 && float.abs() < 9.0e15 => {
                (float as i64).to_string()
            }
            (None, Some(float)) => float.to_string(),
            (None, None) => number.to_string(),
        },
        Value::Array(_) | Value::Object(_) => return None,
    })
}

/// Refuses a model holding a key that reading its file back would refuse.
pub fn check_keys(model: &Value) -> Result<(), PropertiesError> {
    let mut flat = Vec::new();
    flatten(model, String::new(), &mut flat);
    match flat
        .into_iter()
        .find_map(|(key, _)| key_problem(&key).map(|problem| (key, problem)))
    {
        Some((key, problem)) => Err(PropertiesError::WrittenKey { key, problem }),
        None => Ok(()),
    }
}

/// Every scalar of the model with its property key (segments joined by dots, a list's items
/// by their index, the empty key standing for its parent).
fn flatten(value: &Value, key: String, out: &mut Vec<(String, String)>) {
    let join = |child: &str| match (key.is_empty(), child.is_empty()) {
        (_, true) => key.clone(),
        (true, false) => child.to_owned(),
        (false, false) => format!("{key}.{child}"),
    };
    match value {
        Value::Object(entries) => {
            for (child, value) in entries {
                flatten(value, join(child), out);
            }
        }
        Value::Array(items) => {
            for (index, value) in items.iter().enumerate() {
                flatten(value, join(&index.to_string()), out);
            }
        }
        scalar => {
            if !key.is_empty()
                && let Some(text) = native_text(scalar)
            {
                out.push((key, text));
            }
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// `key=value` escaped as Java's `Properties.store` escapes them. (`java-properties`' writer
/// escapes every space of a value and writes control characters as `\u1`, which Java reads
/// as a malformed escape.)
fn push_line(out: &mut String, key: &str, value: &str) {
    push_escaped(out, key, true);
    out.push('=');
    push_escaped(out, value, false);
}

fn push_escaped(out: &mut String, text: &str, is_key: bool) {
    for (at, character) in text.char_indices() {
        match character {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            // Spaces end a key; in a value only a leading one would be lost.
            ' ' if is_key || at == 0 => out.push_str("\\ "),
            '=' | ':' | '#' | '!' if is_key || at == 0 => {
                out.push('\\');
                out.push(character);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
}

/// A physical line: where it starts, where its content ends and where the next one starts.
struct PhysicalLine<'t> {
    start: usize,
    content: &'t str,
    end: usize,
}

/// The lines as Java counts them: ended by `\n`, `\r` or `\r\n`.
fn physical_lines(text: &str) -> Vec<PhysicalLine<'_>> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\n' => {
                lines.push(PhysicalLine {
                    start,
                    content: &text[start..at],
                    end: at + 1,
                });
                at += 1;
                start = at;
            }
            b'\r' => {
                let end = if bytes.get(at + 1) == Some(&b'\n') {
                    at + 2
                } else {
                    at + 1
                };
                lines.push(PhysicalLine {
                    start,
                    content: &text[start..at],
                    end,
                });
                at = end;
                start = at;
            }
            _ => at += 1,
        }
    }
    lines.push(PhysicalLine {
        start,
        content: &text[start..],
        end: text.len(),
    });
    lines
}

/// Where the logical line starting at physical line `first` (0-based) lies: its bytes, its
/// indentation and its last line's terminator. Java's rule: a line ending in an odd number of
/// backslashes goes on.
fn logical_span(lines: &[PhysicalLine], first: usize) -> LogicalSpan {
    let start = lines[first].start;
    let content = lines[first].content;
    let indented = content.len() - content.trim_start_matches([' ', '\t', '\u{c}']).len();
    let mut last = first;
    while last + 1 < lines.len() && ends_in_odd_backslashes(lines[last].content) {
        last += 1;
    }
    let terminator_start = lines[last].start + lines[last].content.len();
    LogicalSpan {
        span: start..lines[last].end,
        indent: start..start + indented,
        terminator: terminator_start..lines[last].end,
    }
}

struct LogicalSpan {
    span: Range<usize>,
    indent: Range<usize>,
    terminator: Range<usize>,
}

fn ends_in_odd_backslashes(line: &str) -> bool {
    line.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// The file's first line terminator, for lines appended to it.
fn first_terminator(text: &str) -> &'static str {
    match text.find(['\n', '\r']) {
        Some(at) if text[at..].starts_with("\r\n") => "\r\n",
        Some(at) if text[at..].starts_with('\r') => "\r",
        _ => "\n",
    }
}

/// A properties file's one document: named by `configHub.configName`, typed by
/// `configHub.configSchema`, with ConfigHub's stand-ins when they are absent.
pub fn element(doc: &Doc, document: usize, root: NodeId) -> Element {
    let name = doc.get_str(root, &CONFIG_NAME_PATH).unwrap_or(NO_NAME);
    let resource_type = doc.get_str(root, &CONFIG_SCHEMA_PATH).unwrap_or(NO_SCHEMA);
    Element {
        document,
        root,
        info: ResourceInfo {
            resource_name: name.to_owned(),
            resource_name_without_scope: name.to_owned(),
            resource_type: resource_type.to_owned(),
            resource_category: CATEGORY_APP_CONFIG.to_owned(),
        },
        problem: (!doc.is_map(root)).then(|| "not a mapping".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# Database settings
database.host = localhost
database.port: 5432
  database.ssl.enabled=true

! the application
app.name=My\\
    Application
log=INFO
log.web=DEBUG
";

    fn model_json(file: &PropertiesFile) -> Value {
        let model = file.model().unwrap();
        let doc = crate::yaml::Doc::parse(&model).unwrap();
        doc.to_json(doc.roots[0])
    }

    #[test]
    fn the_model_nests_at_dots_types_values_and_keeps_a_prefix_value_under_the_empty_key() {
        let file = PropertiesFile::parse(FILE.to_owned()).unwrap();
        assert_eq!(
            file.model().unwrap(),
            "database:\n  host: localhost\n  port: 5432\n  ssl:\n    enabled: true\napp:\n  name: MyApplication\nlog:\n  \"\": INFO\n  web: DEBUG\n"
        );
        let json = model_json(&file);
        assert_eq!(json["database"]["port"], 5432);
        assert_eq!(json["database"]["ssl"]["enabled"], true);
        assert_eq!(json["log"][""], "INFO");
    }

    #[test]
    fn writing_an_unchanged_model_gives_the_file_back_byte_for_byte() {
        let file = PropertiesFile::parse(FILE.to_owned()).unwrap();
        assert_eq!(
            file.write(&model_json(&file), &HashMap::new()).unwrap(),
            FILE
        );
    }

    #[test]
    fn a_change_rewrites_only_its_line_and_keeps_comments_and_order() {
        let file = PropertiesFile::parse(FILE.to_owned()).unwrap();
        let mut json = model_json(&file);
        json["database"]["ssl"]["enabled"] = Value::Bool(false);
        json["app"]["name"] = Value::from("a b");
        json["log"][""] = Value::from("WARN");
        json["database"].as_object_mut().unwrap().remove("host");
        json["new"] = serde_json::json!({"key": " x#"});
        assert_eq!(
            file.write(&json, &HashMap::new()).unwrap(),
            "\
# Database settings
database.port: 5432
  database.ssl.enabled=false

! the application
app.name=a b
log=WARN
log.web=DEBUG
new.key=\\ x#
"
        );
    }

    #[test]
    fn values_keep_their_text_unless_they_change() {
        let text = "port=007\nratio=1.50\nbig=1.0\n";
        let file = PropertiesFile::parse(text.to_owned()).unwrap();
        let mut json = model_json(&file);
        assert_eq!(json["port"], 7);
        assert_eq!(file.write(&json, &HashMap::new()).unwrap(), text);
        json["ratio"] = Value::from(2.25);
        assert_eq!(
            file.write(&json, &HashMap::new()).unwrap(),
            "port=007\nratio=2.25\nbig=1.0\n"
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_a_change_rewrites_that_line() {
        let text = "a=1\r\nb=x\r\na=2\r\n";
        let file = PropertiesFile::parse(text.to_owned()).unwrap();
        let mut json = model_json(&file);
        assert_eq!(json["a"], 2);
        json["a"] = Value::from(3);
        json["c"] = Value::from("new");
        assert_eq!(
            file.write(&json, &HashMap::new()).unwrap(),
            "a=1\r\nb=x\r\na=3\r\nc=new\r\n"
        );
        json.as_object_mut().unwrap().remove("a");
        assert_eq!(
            file.write(&json, &HashMap::new()).unwrap(),
            "b=x\r\nc=new\r\n"
        );
    }

    #[test]
    fn control_characters_are_written_as_java_reads_them() {
        let mut out = String::new();
        push_line(&mut out, "k y", "\u{1}tab\there\\");
        assert_eq!(out, "k\\ y=\\u0001tab\\there\\\\");
        let file = PropertiesFile::parse(format!("{out}\n")).unwrap();
        assert_eq!(model_json(&file)["k y"], "\u{1}tab\there\\");
    }

    #[test]
    fn hostile_files_are_refused_naming_the_line_and_the_limit() {
        let error = |text: String| PropertiesFile::parse(text).unwrap_err().to_string();
        assert_eq!(
            error("a=1\nb=\\u12G4\n".to_owned()),
            "line 2: Malformed \\uxxxx encoding: not hex."
        );
        assert_eq!(
            error("a=\\u12".to_owned()),
            "line 1: Malformed \\uxxxx encoding: not enough digits."
        );
        assert!(
            error("x".repeat(MAX_PROPERTIES_BYTES + 1)).contains("more than the limit of 16777216"),
        );
        assert_eq!(
            error(format!("a=1\nb={}\n", "x".repeat(MAX_LINE_BYTES))),
            format!(
                "line 2 is {} bytes, more than the limit of {MAX_LINE_BYTES}",
                MAX_LINE_BYTES + 2
            )
        );
        let many: String = (0..=MAX_PROPERTIES).map(|i| format!("k{i}=v\n")).collect();
        assert_eq!(
            error(many),
            format!("more than {MAX_PROPERTIES} properties")
        );
        assert_eq!(
            error("a..b=1\n".to_owned()),
            "line 1: key \"a..b\" has an empty segment (a leading, trailing or doubled dot), which the model's paths cannot name"
        );
        let deep = format!("{}=1", vec!["k"; MAX_KEY_SEGMENTS + 1].join("."));
        assert!(error(deep).contains("more than 64 dot-separated segments"));
        assert!(
            error(format!("a.{}=1", "\u{1}".repeat(200)))
                .contains("has a segment longer than 1024 characters as a YAML key")
        );
    }

    #[test]
    fn keys_and_values_that_mean_something_in_yaml_stay_plain_text() {
        use crate::api::{FunctionArgument, FunctionInvocation, FunctionInvocationRequest};
        let long_key = "k".repeat(1000);
        let text = format!(
            "{long_key}=1\nanchor=&a x\nalias=*a\ntag=!!int 3\nflow={{a: [b]}}\ndash=- x\nquote='\"\nnull=null\nTrue=True\nlines=a\\nb\\\\c\n"
        );
        let get = |key: &str| {
            FunctionInvocation::new(
                "get-string-path",
                vec![
                    FunctionArgument::positional("*"),
                    FunctionArgument::positional(key),
                ],
            )
        };
        let mut request = FunctionInvocationRequest {
            config_data: text.clone().into_bytes(),
            function_invocations: [
                "anchor", "alias", "tag", "flow", "dash", "quote", "null", "True", "lines",
            ]
            .map(get)
            .to_vec(),
            ..FunctionInvocationRequest::default()
        };
        request.context.toolchain_type = crate::api::APPCONFIG_PROPERTIES.to_owned();
        let executor = crate::Executor::properties();
        let response = executor.invoke(&request).unwrap();
        assert!(response.success, "{:?}", response.error_messages);
        let output: Value = serde_json::from_slice(&response.output).unwrap();
        let values: Vec<&str> = output
            .as_array()
            .unwrap()
            .iter()
            .map(|attribute| attribute["Value"].as_str().unwrap())
            .collect();
        assert_eq!(
            values,
            [
                "&a x", "*a", "!!int 3", "{a: [b]}", "- x", "'\"", "null", "True", "a\nb\\c"
            ]
        );
        request.function_invocations = vec![FunctionInvocation::new(
            "set-int-path",
            vec![
                FunctionArgument::positional("*"),
                FunctionArgument::positional(long_key.as_str()),
                FunctionArgument::positional(2),
            ],
        )];
        let response = executor.invoke(&request).unwrap();
        assert!(response.success, "{:?}", response.error_messages);
        assert_eq!(
            String::from_utf8(response.config_data).unwrap(),
            text.replacen("=1\n", "=2\n", 1)
        );
    }

    #[test]
    fn a_comment_goes_on_its_own_line_above_the_property_in_place_of_the_one_there() {
        let file = PropertiesFile::parse(FILE.to_owned()).unwrap();
        let json = model_json(&file);
        let comments: HashMap<String, String> = [
            // Below a comment line: replaces it.
            ("database.host", "the primary"),
            ("app.name", "shown in titles"),
            // Below a property: a new line, with the property's indentation.
            ("database.ssl.enabled", "secure"),
            // The same text as the comment there: kept as it is written.
            ("database.port", "unchanged"),
            // The empty key stands for its parent.
            ("log", "root level"),
            ("added", "new"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let text = FILE.replace("database.port: 5432", "!unchanged\ndatabase.port: 5432");
        let file = PropertiesFile::parse(text).unwrap();
        let mut json = json;
        json["added"] = Value::from(1);
        assert_eq!(
            file.write(&json, &comments).unwrap(),
            "\
# the primary
database.host = localhost
!unchanged
database.port: 5432
  # secure
  database.ssl.enabled=true

# shown in titles
app.name=My\\
    Application
# root level
log=INFO
log.web=DEBUG
# new
added=1
"
        );
    }

    #[test]
    fn a_comment_line_is_replaced_only_when_it_is_one_and_right_above() {
        let text = "a=x\\\n#y\nb=1\n#c\n\nd=2\n";
        let file = PropertiesFile::parse(text.to_owned()).unwrap();
        assert_eq!(model_json(&file)["a"], "x#y");
        let comments = HashMap::from([
            ("b".to_owned(), "note".to_owned()),
            ("d".to_owned(), "after a blank line".to_owned()),
        ]);
        assert_eq!(
            file.write(&model_json(&file), &comments).unwrap(),
            "a=x\\\n#y\n# note\nb=1\n#c\n\n# after a blank line\nd=2\n"
        );
    }

    #[test]
    fn an_empty_file_is_an_empty_mapping() {
        let file = PropertiesFile::parse("# nothing\n".to_owned()).unwrap();
        assert_eq!(file.model().unwrap(), "{}\n");
        assert_eq!(
            file.write(&serde_json::json!({"a": true}), &HashMap::new())
                .unwrap(),
            "# nothing\na=true\n"
        );
    }
}
