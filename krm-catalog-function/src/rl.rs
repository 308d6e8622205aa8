//! The ResourceList around the functions: its items, functionConfig and results.

use krm_yaml_edit::{Doc, Editor, New, NodeId, ParseError, Stop, block_entries, block_map_item};

pub const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";
pub const PATH: &str = "internal.config.kubernetes.io/path";
pub const LEGACY_PATH: &str = "config.kubernetes.io/path";
pub const INDEX: &str = "internal.config.kubernetes.io/index";
pub const LEGACY_INDEX: &str = "config.kubernetes.io/index";
pub const DEPENDS_ON: &str = "config.kubernetes.io/depends-on";
pub const UPSTREAM_ID: &str = "internal.kpt.dev/upstream-identifier";

/// Why an input is not a ResourceList.
#[derive(Debug, thiserror::Error)]
pub enum ResourceListError {
    #[error("ResourceList is not UTF-8 text: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// Not YAML, or the call ended while it was read ([`ParseError::Stopped`]).
    #[error("ResourceList is not valid YAML: {0}")]
    NotYaml(#[source] ParseError),
    #[error("input is empty: expected a ResourceList")]
    Empty,
    #[error("input holds several YAML documents: expected one ResourceList")]
    SeveralDocuments,
    #[error("input is not a mapping: expected a ResourceList")]
    NotAMapping,
    #[error("input has kind {0:?}: expected ResourceList")]
    OtherKind(String),
    #[error("input has no `kind`: expected a ResourceList")]
    NoKind,
    #[error("ResourceList `items` is not a list")]
    ItemsNotAList,
}

pub struct ResourceList<'a> {
    pub doc: Doc<'a>,
    pub root: NodeId,
    /// Items that are mappings, in order; other items are left alone.
    pub items: Vec<NodeId>,
    pub function_config: Option<NodeId>,
}

impl<'a> ResourceList<'a> {
    /// Parses a ResourceList (or a `kind: List`, as kyaml accepts), naming what is wrong.
    pub fn parse(input: &'a [u8], stop: &Stop) -> Result<Self, ResourceListError> {
        let text = std::str::from_utf8(input).map_err(ResourceListError::NotUtf8)?;
        let doc = Doc::parse_until(text, stop).map_err(ResourceListError::NotYaml)?;
        let root = match doc.roots.as_slice() {
            [] => return Err(ResourceListError::Empty),
            [root] => *root,
            // A trailing empty document (`---` at the end) is harmless.
            [root, rest @ ..] if rest.iter().all(|&r| doc.is_null(r)) => *root,
            _ => return Err(ResourceListError::SeveralDocuments),
        };
        if !doc.is_map(root) {
            return Err(ResourceListError::NotAMapping);
        }
        match doc.get_str(root, &["kind"]) {
            Some("ResourceList") | Some("List") => {}
            Some(other) => return Err(ResourceListError::OtherKind(other.to_owned())),
            None => return Err(ResourceListError::NoKind),
        }
        let items = match doc.get(root, "items") {
            None => Vec::new(),
            Some(items) if doc.is_null(items) => Vec::new(),
            Some(items) if doc.is_seq(items) => doc
                .items(items)
                .iter()
                .copied()
                .filter(|&i| doc.is_map(i))
                .collect(),
            Some(_) => return Err(ResourceListError::ItemsNotAList),
        };
        let function_config = doc
            .get(root, "functionConfig")
            .filter(|&fc| doc.is_map(fc) && !doc.entries(fc).is_empty());
        Ok(Self {
            doc,
            root,
            items,
            function_config,
        })
    }

    pub fn obj(&self, id: NodeId) -> Obj<'_, 'a> {
        Obj { doc: &self.doc, id }
    }
}

/// A KRM object inside the document.
#[derive(Clone, Copy)]
pub struct Obj<'d, 'a> {
    pub doc: &'d Doc<'a>,
    pub id: NodeId,
}

impl<'d, 'a> Obj<'d, 'a> {
    pub fn str(&self, path: &[&str]) -> Option<&'d str> {
        self.doc.get_str(self.id, path)
    }
    pub fn api_version(&self) -> &'d str {
        self.str(&["apiVersion"]).unwrap_or_default()
    }
    pub fn kind(&self) -> &'d str {
        self.str(&["kind"]).unwrap_or_default()
    }
    pub fn name(&self) -> &'d str {
        self.str(&["metadata", "name"]).unwrap_or_default()
    }
    pub fn namespace(&self) -> &'d str {
        self.str(&["metadata", "namespace"]).unwrap_or_default()
    }
    pub fn group(&self) -> &'d str {
        split_api_version(self.api_version()).0
    }
    pub fn version(&self) -> &'d str {
        split_api_version(self.api_version()).1
    }
    pub fn annotation(&self, key: &str) -> Option<&'d str> {
        let annotations = self.doc.get_path(self.id, &["metadata", "annotations"])?;
        self.doc.get_str(annotations, &[key])
    }
    /// As kpt's SDK: the annotation is present and not `"false"`.
    pub fn is_local_config(&self) -> bool {
        marks_local_config(self.annotation(LOCAL_CONFIG))
    }
    pub fn path_annotation(&self) -> Option<&'d str> {
        self.annotation(PATH)
            .or_else(|| self.annotation(LEGACY_PATH))
    }
    pub fn index_annotation(&self) -> Option<i64> {
        self.annotation(INDEX)
            .or_else(|| self.annotation(LEGACY_INDEX))
            .and_then(|v| v.parse().ok())
    }
    /// The SDK's `ShortString`.
    pub fn short_string(&self) -> String {
        self.short_string_and("")
    }
    /// [`Obj::short_string`] followed by `tail`, allocated once at its final size: functions
    /// name every object this way.
    pub fn short_string_and(&self, tail: &str) -> String {
        let doc = self.doc;
        let [api_version, kind, metadata] =
            doc.get_each(self.id, ["apiVersion", "kind", "metadata"]);
        let [namespace, name] =
            metadata.map_or([None; 2], |m| doc.get_each(m, ["namespace", "name"]));
        let text = |node: Option<NodeId>| node.and_then(|n| doc.str(n)).unwrap_or_default();
        short_string_and(
            text(api_version),
            text(kind),
            text(namespace),
            text(name),
            tail,
        )
    }
    pub fn resource_ref(&self) -> New {
        let mut entries = vec![
            ("apiVersion".to_owned(), New::str(self.api_version())),
            ("kind".to_owned(), New::str(self.kind())),
            ("name".to_owned(), New::str(self.name())),
        ];
        if !self.namespace().is_empty() {
            entries.push(("namespace".to_owned(), New::str(self.namespace())));
        }
        New::Map(entries)
    }
    pub fn file_ref(&self) -> Option<New> {
        let path = self.path_annotation()?;
        let mut entries = vec![("path".to_owned(), New::str(path))];
        if let Some(index) = self.index_annotation().filter(|&i| i != 0) {
            entries.push(("index".to_owned(), New::Plain(index.to_string())));
        }
        Some(New::Map(entries))
    }
}

/// Whether the value of an object's local-config annotation (if it has one) marks it as
/// local configuration, as kpt's SDK reads it: present and not `"false"`.
pub fn marks_local_config(annotation: Option<&str>) -> bool {
    annotation.is_some_and(|v| v != "false")
}

/// The SDK's `ShortString` of an object with these fields, followed by `tail`; see
/// [`Obj::short_string_and`].
pub fn short_string_and(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    tail: &str,
) -> String {
    let parts = [
        "Resource(apiVersion=",
        api_version,
        ", kind=",
        kind,
        ", namespace=",
        namespace,
        ", name=",
        name,
        ")",
        tail,
    ];
    // Pushed into a string of the final size: half the instructions of `concat`, whose
    // general join copies each part through a length check of its own.
    let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        text.push_str(part);
    }
    text
}

pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// One structured result.
#[derive(Debug, Clone, PartialEq)]
pub struct FnResult {
    pub message: String,
    pub severity: Option<&'static str>,
    pub resource_ref: Option<New>,
    pub field: Option<New>,
    pub file: Option<New>,
}

impl FnResult {
    pub fn new(message: impl Into<String>, severity: Option<&'static str>) -> Self {
        Self {
            message: message.into(),
            severity,
            resource_ref: None,
            field: None,
            file: None,
        }
    }
    pub fn info(message: impl Into<String>) -> Self {
        Self::new(message, Some("info"))
    }
    pub fn warning(message: impl Into<String>) -> Self {
        Self::new(message, Some("warning"))
    }
    pub fn error(message: impl Into<String>) -> Self {
        Self::new(message, Some("error"))
    }
    pub fn field_path(mut self, path: impl Into<String>) -> Self {
        self.field = Some(New::Map(vec![("path".into(), New::str(path))]));
        self
    }
    pub fn on(mut self, obj: &Obj) -> Self {
        self.resource_ref = Some(obj.resource_ref());
        self
    }
    pub fn in_file_of(mut self, obj: &Obj) -> Self {
        self.file = obj.file_ref();
        self
    }
    fn into_new(self) -> New {
        // Room for every field at once: a function may report on every object.
        let mut entries = Vec::with_capacity(5);
        self.into_entries(&mut entries);
        New::Map(entries)
    }

    /// Appends its fields to `entries` as mapping entries, in the order they are written.
    fn into_entries<K: From<&'static str>>(self, entries: &mut Vec<(K, New)>) {
        entries.push(("message".into(), New::Str(self.message)));
        if let Some(severity) = self.severity {
            entries.push(("severity".into(), New::str(severity)));
        }
        for (key, value) in [
            ("resourceRef", self.resource_ref),
            ("field", self.field),
            ("file", self.file),
        ] {
            if let Some(value) = value {
                entries.push((key.into(), value));
            }
        }
    }
}

/// Writes `results` into the ResourceList, replacing any there. `legacy_name` selects the old
/// kyaml-framework shape `results: {name, items}` that some catalog functions still emit.
pub fn write_results(
    rl: &ResourceList,
    editor: &mut Editor,
    results: Vec<FnResult>,
    legacy_name: Option<&str>,
) {
    if results.is_empty() {
        return;
    }
    let doc = &rl.doc;
    let existing = doc.entry(rl.root, "results");
    if doc.node(rl.root).flow() {
        let value = results_value(results, legacy_name);
        match existing {
            Some((_, value_node)) => {
                let mut text = String::new();
                value.flow(&mut text);
                editor.replace(
                    doc.node(value_node).start(),
                    doc.node(value_node).end(),
                    text,
                );
            }
            None => editor.insert(doc, rl.root, "results", value),
        }
        return;
    }
    // The whole entry as block lines at the column of the ResourceList's keys.
    let col = existing.map_or(doc.node(rl.root).col(), |(key, _)| doc.node(key).col());
    // About what the results take (most are a message and a severity), so that the text is
    // not copied as it grows.
    let mut text = String::with_capacity(
        results
            .iter()
            .map(|result| result.message.len() + 64 + 2 * col)
            .sum(),
    );
    match legacy_name {
        Some(_) => block_entries(
            &[("results".to_owned(), results_value(results, legacy_name))],
            col,
            &mut text,
        ),
        None => {
            // The first result written with the key, the others after it one at a time, each
            // through one list of entries with borrowed keys: a function may report on every
            // object.
            let mut results = results.into_iter();
            let first = results.next().map(FnResult::into_new).into_iter().collect();
            block_entries(&[("results", New::Seq(first))], col, &mut text);
            let mut entries: Vec<(&str, New)> = Vec::with_capacity(5);
            for result in results {
                result.into_entries(&mut entries);
                block_map_item(&entries, col, &mut text);
                entries.clear();
            }
        }
    }
    let Some((key, value_node)) = existing else {
        editor.append_lines(doc, rl.root, text);
        return;
    };
    // Rewrite the whole entry: the old value may span many lines.
    let end = doc.line_end(doc.node(value_node).end().max(doc.node(key).end()));
    let text = &text[col..];
    let text = if end == doc.src.len() && !doc.src.ends_with('\n') {
        text.trim_end_matches('\n')
    } else {
        text
    };
    editor.replace(doc.node(key).start(), end, text.to_owned());
}

/// `results` as one value: a list, or the legacy `{name, items}`.
fn results_value(results: Vec<FnResult>, legacy_name: Option<&str>) -> New {
    let items = New::Seq(results.into_iter().map(FnResult::into_new).collect());
    match legacy_name {
        Some(name) => New::Map(vec![
            ("name".to_owned(), New::str(name)),
            ("items".to_owned(), items),
        ]),
        None => items,
    }
}
