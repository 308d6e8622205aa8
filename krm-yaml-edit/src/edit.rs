//! Edits at the byte spans of the original text, applied in one pass.

use crate::new::{approx_entries_len, push_indent};
use crate::scalar::plain_unsafe;
use crate::{
    Doc, Kind, New, NodeId, Style, block_entries, block_items, double_quoted, needs_quotes,
    untyped_scalar,
};

/// Text changes at byte spans of the original, applied in one pass at the end.
#[derive(Default)]
pub struct Editor {
    edits: Vec<Edit>,
    /// Bytes of new text queued so far (edits and pending entries), to bound the output.
    queued_bytes: usize,
    /// What is queued for insertion into each map node, in order of node (see
    /// [`Editor::pending`]).
    pending: Vec<(NodeId, Pending)>,
}

/// What is queued for insertion into one map node.
#[derive(Default)]
struct Pending {
    /// Entries, so that several inserts into one map (or under one missing key) are merged
    /// instead of creating duplicate keys.
    entries: Vec<(String, New)>,
    /// Block lines written already, to follow the entries (see [`Editor::append_lines`]).
    lines: String,
}

/// One change: `text` in place of `start..end`. `into` is the node whose end an insertion
/// extends, where there is one: where several insertions meet at one spot, the text of a node
/// inside another must come before the text that follows that other node.
struct Edit {
    start: usize,
    end: usize,
    text: Text,
    into: Option<NodeId>,
}

enum Text {
    Written(String),
    /// Block-mapping lines at `indent` (after a newline when `newline_first`) followed by
    /// `lines`, written straight into the output: a function may add entries to every object.
    Entries {
        entries: Vec<(String, New)>,
        lines: String,
        indent: usize,
        newline_first: bool,
    },
}

impl Text {
    /// Its length, or about that for entries not written yet.
    fn approx_len(&self) -> usize {
        match self {
            Text::Written(text) => text.len(),
            Text::Entries {
                entries,
                lines,
                indent,
                ..
            } => 1 + approx_entries_len(entries) + entries.len() * indent + lines.len(),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Text::Written(text) => out.push_str(text),
            Text::Entries {
                entries,
                lines,
                indent,
                newline_first,
            } => {
                if *newline_first {
                    out.push('\n');
                }
                block_entries(entries, *indent, out);
                out.push_str(lines);
            }
        }
    }
}

impl Editor {
    /// Queues the bytes `start..end` of the text to be replaced by `text`.
    pub fn replace(&mut self, start: usize, end: usize, text: String) {
        self.push_edit(start, end, text, None);
    }

    fn push_edit(&mut self, start: usize, end: usize, text: String, into: Option<NodeId>) {
        self.queued_bytes += text.len();
        self.edits.push(Edit {
            start,
            end,
            text: Text::Written(text),
            into,
        });
    }

    /// Queues `entries`, then `lines`, as block lines at `indent` after the line holding byte
    /// `after` (their size was counted when they were queued for `into`).
    fn push_block_lines(
        &mut self,
        doc: &Doc,
        after: usize,
        entries: Vec<(String, New)>,
        lines: String,
        indent: usize,
        into: NodeId,
    ) {
        let at = doc.line_end(after);
        let src = doc.src;
        self.edits.push(Edit {
            start: at,
            end: at,
            text: Text::Entries {
                entries,
                lines,
                indent,
                newline_first: at == src.len() && !src.ends_with('\n'),
            },
            into: Some(into),
        });
    }

    /// What is queued for insertion into `node`, nothing if none yet.
    fn pending(&mut self, node: NodeId) -> &mut Pending {
        // Functions mostly insert in document order: past the last node queued, no search.
        let at = match self.pending.last() {
            Some(&(last, _)) if last < node => self.pending.len(),
            _ => self.pending.partition_point(|&(queued, _)| queued < node),
        };
        if self
            .pending
            .get(at)
            .is_none_or(|&(queued, _)| queued != node)
        {
            self.pending.insert(at, (node, Pending::default()));
        }
        &mut self.pending[at].1
    }

    /// Queues block lines (each ending in a newline, at the mapping's column) for insertion at
    /// the end of block mapping `map`, after the entries [`Editor::insert`] queues there: for
    /// entries written as they are made, such as a long list of results, rather than built
    /// whole first.
    pub fn append_lines(&mut self, doc: &Doc, map: NodeId, lines: String) {
        debug_assert!(doc.is_map(map) && !doc.node(map).flow());
        self.queued_bytes += lines.len();
        let pending = &mut self.pending(map).lines;
        if pending.is_empty() {
            *pending = lines;
        } else {
            pending.push_str(&lines);
        }
    }

    /// About how many bytes of new text the edits queued so far add.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Replaces a scalar's value, keeping its quoting style where that can hold the value.
    /// `as_string` keeps the value a string (quoting if needed); otherwise a plain scalar is
    /// written plain, the way the catalog writes a value whose tag it cleared.
    pub fn set_scalar(&mut self, doc: &Doc, id: NodeId, value: &str, as_string: bool) {
        if is_alias(doc, id) {
            // Editing through an alias would change its anchor and every other alias of it.
            let value = if as_string {
                New::str(value)
            } else {
                New::Plain(untyped_scalar(value))
            };
            self.replace_node(doc, id, &value);
            return;
        }
        if let Some((start, end, text)) = scalar_edit(doc, id, value, as_string) {
            self.push_edit(start, end, text, None);
        }
    }

    /// Appends `item` to sequence `seq` (block or flow).
    pub fn append_item(&mut self, doc: &Doc, seq: NodeId, item: New) {
        let node = &doc.nodes[seq];
        if node.flow() || doc.items(seq).is_empty() {
            let mut text = String::new();
            if !doc.items(seq).is_empty() {
                text.push_str(", ");
            }
            if node.flow() {
                item.flow(&mut text);
            } else {
                item.flow_plain(&mut text);
            }
            let at = node.end().saturating_sub(1);
            if node.flow() {
                self.push_edit(at, at, text, Some(seq));
            }
            return;
        }
        let at = doc.line_end(node.end());
        let mut text = String::new();
        if at == doc.src.len() && !doc.src.ends_with('\n') {
            text.push('\n');
        }
        block_items(&[item], node.col(), &mut text);
        self.push_edit(at, at, text, Some(seq));
    }

    /// Inserts `items` into block sequence `seq` at `at`, the start of the line of the item
    /// they go before.
    pub fn insert_items_at(&mut self, doc: &Doc, seq: NodeId, at: usize, items: &[New]) {
        let mut text = String::new();
        block_items(items, doc.nodes[seq].col(), &mut text);
        self.push_edit(at, at, text, Some(seq));
    }

    /// Replaces the whole node `target` (scalar or collection) with `value`, the way kyaml's
    /// `SetYNode` does: collections are written in block style at the node's indentation (flow
    /// inside flow collections); the rest of the document is untouched.
    pub fn replace_node(&mut self, doc: &Doc, target: NodeId, value: &New) {
        let node = &doc.nodes[target];
        let in_flow = is_in_flow(doc, target);
        let empty_collection = matches!(value, New::Map(e) if e.is_empty())
            || matches!(value, New::Seq(i) if i.is_empty());
        let scalar_like = matches!(value, New::Str(_) | New::Plain(_)) || empty_collection;
        if in_flow {
            let (start, end, space) = flow_value_span(doc, target);
            let mut text = String::from(space);
            value.flow(&mut text);
            self.push_edit(start, end, text, None);
            return;
        }
        let parent = node.parent().map(|p| &doc.nodes[p]);
        let parent_is_seq = parent.is_some_and(|p| matches!(p.kind, Kind::Seq(_)));
        let key_col = key_col_of(doc, target);
        let own_line_block = !node.flow()
            && matches!(node.kind, Kind::Map(_) | Kind::Seq(_))
            && !parent_is_seq
            && !doc.src[doc.line_start(node.start())..node.start()]
                .chars()
                .any(|c| !c.is_whitespace());
        let mut scalar = String::new();
        if scalar_like {
            value.flow_plain(&mut scalar);
        }
        let block_scalar = matches!(
            node.kind,
            Kind::Scalar {
                style: Style::Block,
                ..
            }
        );
        if parent_is_seq || key_col.is_none() {
            // `- item` (or a root): the first line continues after the dash.
            let (start, end) = if block_scalar {
                block_span(doc, target)
            } else {
                value_span(doc, target)
            };
            let text = if scalar_like {
                scalar
            } else {
                let mut lines = String::new();
                render_block(value, node.col(), &mut lines);
                lines[node.col().min(lines.len())..]
                    .trim_end_matches('\n')
                    .to_owned()
            };
            self.push_edit(start, end, text, None);
            return;
        }
        let key_col = key_col.unwrap_or(0);
        let colon = value_colon(doc, target);
        let end = if block_scalar {
            block_span(doc, target).1
        } else {
            node.end()
        };
        if scalar_like {
            let text = format!(" {scalar}");
            self.push_edit(colon, end.max(colon), text, None);
            return;
        }
        let indent = match (value, &node.kind) {
            (New::Seq(_), Kind::Seq(_)) if own_line_block => node.col(),
            (_, Kind::Map(_)) if own_line_block => node.col(),
            _ => key_col + 2,
        };
        let mut lines = String::new();
        render_block(value, indent, &mut lines);
        let lines = lines.trim_end_matches('\n');
        if own_line_block {
            self.push_edit(
                doc.line_start(node.start()),
                node.end(),
                lines.to_owned(),
                None,
            );
        } else {
            // `key: scalar` or `key: {flow}` becomes `key:` and lines below.
            self.push_edit(colon, end.max(colon), format!("\n{lines}"), None);
        }
    }
}

/// Byte just after the `:` that introduces the value `id` of a block or flow mapping entry.
fn value_colon(doc: &Doc, id: NodeId) -> usize {
    let Some(parent) = doc.nodes[id].parent() else {
        return doc.nodes[id].start();
    };
    let Some(&(key, _)) = doc.entries(parent).iter().find(|&&(_, v)| v == id) else {
        return doc.nodes[id].start();
    };
    let from = doc.nodes[key].end();
    let bytes = doc.src.as_bytes();
    let mut i = from;
    while i < bytes.len() && bytes[i] != b':' {
        i += 1;
    }
    (i + 1).min(bytes.len())
}

/// The span to overwrite for node `id`; an empty value sits after its key's colon.
fn value_span(doc: &Doc, id: NodeId) -> (usize, usize) {
    let node = &doc.nodes[id];
    if node.start() == node.end() && doc.src.as_bytes().get(node.start()) == Some(&b':') {
        return (node.start() + 1, node.start() + 1);
    }
    (node.start(), node.end())
}

/// The span to overwrite for block scalar `id`: from its `|` or `>` to the end of its last
/// line with content (of its header, cut before a comment, when it has none). The parser's
/// span holds the content only.
pub fn block_span(doc: &Doc, id: NodeId) -> (usize, usize) {
    let node = &doc.nodes[id];
    // The header is the last line with text before the content.
    let mut header_line = doc.line_start(node.start());
    while header_line > 0 {
        header_line = doc.line_start(header_line - 1);
        if !doc.rest_of_line(header_line).trim().is_empty() {
            break;
        }
    }
    let line = doc.rest_of_line(header_line);
    let code = line.find(" #").map_or(line, |cut| &line[..cut]);
    let Some(indicator) = code.rfind(['|', '>']) else {
        return (node.start(), node.end());
    };
    let end = if node.end() > node.start() {
        node.end()
    } else {
        header_line + code.trim_end().len()
    };
    (header_line + indicator, end)
}

/// The span to overwrite for value `id` in a flow collection, and what to write first: an
/// empty value sits right after its colon (`a:{...}` would be one plain scalar), or after a
/// key written without one (`{a, b}`).
fn flow_value_span(doc: &Doc, id: NodeId) -> (usize, usize, &'static str) {
    let (start, end) = value_span(doc, id);
    if start != end {
        return (start, end, "");
    }
    let key_end = doc.nodes[id].parent().and_then(|parent| {
        doc.entries(parent)
            .iter()
            .find(|&&(_, value)| value == id)
            .map(|&(key, _)| doc.nodes[key].end())
    });
    match key_end {
        Some(key_end)
            if !doc
                .src
                .get(key_end..start)
                .unwrap_or_default()
                .contains(':') =>
        {
            (key_end, key_end, ": ")
        }
        _ if doc.src[..start].ends_with(':') => (start, end, " "),
        _ => (start, end, ""),
    }
}

/// Renders a value as block lines at `indent` (each ending in a newline).
fn render_block(value: &New, indent: usize, out: &mut String) {
    match value {
        New::Map(entries) => block_entries(entries, indent, out),
        New::Seq(items) => block_items(items, indent, out),
        other => {
            push_indent(out, indent);
            other.flow_plain(out);
            out.push('\n');
        }
    }
}

/// The edit that sets a scalar's value (see [`Editor::set_scalar`]).
pub fn scalar_edit(
    doc: &Doc,
    id: NodeId,
    value: &str,
    as_string: bool,
) -> Option<(usize, usize, String)> {
    {
        let node = &doc.nodes[id];
        let Kind::Scalar { style, tagged, .. } = &node.kind else {
            return None;
        };
        let (mut start, mut end) = value_span(doc, id);
        let empty_after_colon = start != node.start();
        let text = match style {
            Style::Single if !value.contains('\n') => format!("'{}'", value.replace('\'', "''")),
            Style::Double | Style::Single => double_quoted(value),
            Style::Plain if !*tagged => {
                if value.is_empty() || (as_string && needs_quotes(value)) || plain_unsafe(value) {
                    double_quoted(value)
                } else {
                    value.to_owned()
                }
            }
            Style::Plain => double_quoted(value),
            Style::Block => {
                let (header, content_end) = block_span(doc, id);
                start = header;
                end = content_end;
                double_quoted(value)
            }
        };
        let text = if empty_after_colon {
            format!(" {text}")
        } else {
            text
        };
        Some((start, end, text))
    }
}

impl Editor {
    /// Makes sure `path` exists below `map` and holds `entries` (a map), creating missing maps.
    /// Existing keys are overwritten only when `overwrite`; keys that already exist with the same
    /// value are left alone. Returns how many keys were written or queued.
    pub fn ensure_map(
        &mut self,
        doc: &Doc,
        map: NodeId,
        path: &[&str],
        entries: &[(String, String)],
        overwrite: bool,
    ) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let mut node = map;
        for (i, key) in path.iter().enumerate() {
            match doc.get(node, key) {
                Some(child) if doc.is_map(child) && !is_alias(doc, child) => node = child,
                Some(child) if doc.is_null(child) => {
                    let value = nest(&path[i + 1..], entries);
                    self.replace_null(doc, node, key, child, value);
                    return entries.len();
                }
                Some(_) => return 0,
                None => {
                    let value = nest(&path[i + 1..], entries);
                    self.insert(doc, node, key, value);
                    return entries.len();
                }
            }
        }
        let mut count = 0;
        for (key, value) in entries {
            match doc.get(node, key) {
                Some(existing) => {
                    if overwrite && doc.str(existing) != Some(value.as_str()) {
                        if doc.str(existing).is_some() && !is_alias(doc, existing) {
                            self.set_scalar(doc, existing, value, true);
                        } else {
                            // A collection, or an alias (whose anchor others may share):
                            // the entry gets the string itself.
                            self.replace_node(doc, existing, &New::str(value.clone()));
                        }
                        count += 1;
                    } else if overwrite {
                        count += 1;
                    }
                }
                None => {
                    self.insert(doc, node, key, New::str(value.clone()));
                    count += 1;
                }
            }
        }
        count
    }

    /// Queues `key: value` for insertion at the end of mapping `map`.
    pub fn insert(&mut self, doc: &Doc, map: NodeId, key: &str, value: New) {
        self.queued_bytes += key.len() + value.approx_len();
        let pending = &mut self.pending(map).entries;
        // Merge into an entry queued earlier under the same key (e.g. two labels under a
        // `labels:` that did not exist).
        if let Some((_, New::Map(existing))) = pending.iter_mut().find(|(k, _)| k == key)
            && let New::Map(more) = value
        {
            for (k, v) in more {
                merge_new(existing, k, v);
            }
            return;
        }
        let _ = doc;
        if pending.is_empty() {
            // Most maps get one entry (a function adds one field to every object): room for
            // more would be most of what the queue takes.
            pending.reserve_exact(1);
        }
        pending.push((key.to_owned(), value));
    }

    fn replace_null(&mut self, doc: &Doc, map: NodeId, key: &str, null: NodeId, value: New) {
        // Modelled as a pending insert on the null node itself, flushed in `finish`.
        let _ = (map, key);
        self.queued_bytes += value.approx_len();
        let pending = &mut self.pending(null).entries;
        if let New::Map(entries) = value {
            for (k, v) in entries {
                merge_new(pending, k, v);
            }
        }
        let _ = doc;
    }

    /// Applies every change to `src`.
    pub fn finish(mut self, doc: &Doc) -> String {
        let src = doc.src;
        let pending = std::mem::take(&mut self.pending);
        // Where these meet other insertions, `apply_edits` puts them in order.
        for (id, Pending { entries, lines }) in pending {
            let node = &doc.nodes[id];
            match &node.kind {
                Kind::Map(existing) if node.flow() => {
                    let mut text = String::new();
                    for (i, (k, v)) in entries.iter().enumerate() {
                        if i > 0 || !existing.is_empty() {
                            text.push_str(", ");
                        }
                        text.push_str(&double_quoted(k));
                        text.push_str(": ");
                        v.flow(&mut text);
                    }
                    let at = node.end().saturating_sub(1);
                    self.push_edit(at, at, text, Some(id));
                }
                Kind::Map(_) => {
                    // Each entry's line starts at the mapping's column.
                    self.push_block_lines(doc, node.end(), entries, lines, node.col(), id);
                }
                Kind::Scalar { .. } => {
                    // A null value being replaced by a map: find its key's column.
                    let in_flow = is_in_flow(doc, id);
                    if in_flow {
                        let (start, end, space) = flow_value_span(doc, id);
                        let mut text = String::from(space);
                        New::Map(entries).flow(&mut text);
                        self.push_edit(start, end, text, None);
                    } else {
                        let key_col = key_col_of(doc, id).unwrap_or(0);
                        self.push_edit(node.start(), node.end(), String::new(), None);
                        self.push_block_lines(doc, node.end(), entries, lines, key_col + 2, id);
                    }
                }
                _ => {}
            }
        }
        apply_edits(src, self.edits)
    }
}

fn merge_new(entries: &mut Vec<(String, New)>, key: String, value: New) {
    if let Some((_, existing)) = entries.iter_mut().find(|(k, _)| *k == key) {
        if let (New::Map(a), New::Map(b)) = (existing, value) {
            for (k, v) in b {
                merge_new(a, k, v);
            }
        }
    } else {
        entries.push((key, value));
    }
}

fn nest(path: &[&str], entries: &[(String, String)]) -> New {
    let mut value = New::Map(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), New::str(v.clone())))
            .collect(),
    );
    for key in path.iter().rev() {
        value = New::Map(vec![((*key).to_owned(), value)]);
    }
    value
}

fn is_alias(doc: &Doc, id: NodeId) -> bool {
    matches!(doc.nodes[id].kind, Kind::Alias(_))
}

fn is_in_flow(doc: &Doc, id: NodeId) -> bool {
    doc.nodes[id].parent().is_some_and(|p| doc.nodes[p].flow())
}

fn key_col_of(doc: &Doc, value: NodeId) -> Option<usize> {
    let parent = doc.nodes[value].parent()?;
    doc.entries(parent)
        .iter()
        .find(|&&(_, v)| v == value)
        .map(|&(k, _)| doc.nodes[k].col())
}

/// Applies non-overlapping edits in order of position. Insertions at one spot go deepest node
/// first (nodes are numbered parents before children); those into no node go before them, and
/// the rest keep the order they were made in.
fn apply_edits(src: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by_key(|edit| {
        (
            edit.start,
            edit.end,
            std::cmp::Reverse(edit.into.unwrap_or(NodeId::MAX)),
        )
    });
    let extra: usize = edits.iter().map(|edit| edit.text.approx_len()).sum();
    // Room to spare, as entries may write more than their estimate: growing would copy the
    // whole output.
    let mut out = String::with_capacity(src.len() + extra + extra / 4);
    let mut at = 0;
    for Edit {
        start, end, text, ..
    } in edits
    {
        if start < at {
            // Overlapping edits would corrupt the text; the earlier one wins.
            continue;
        }
        out.push_str(&src[at..start]);
        text.write(&mut out);
        at = end;
    }
    out.push_str(&src[at..]);
    out
}
