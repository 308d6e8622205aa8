//! Per-resource, per-path mutation records as ConfigHub's yamlkit writes them: what one
//! invocation changed (`ComputeMutations`, a diff of the unit before and after), merged over a
//! sequence (`AddMutations`, as its function handler merges each mutating invocation's).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::api::{MutationInfo, MutationType, ResourceInfo, ResourceMutation};
use crate::path::escape;
use crate::resource::{Element, Unit};
use crate::toolchain::Toolchain;
use crate::yaml::{Doc, Kind, MAX_DEPTH, NodeId, Style};

/// A record as ConfigHub's yamlkit writes it: every one with its predicate set, so that a
/// later patch or reset takes it.
fn info(mutation_type: MutationType, index: i64, value: String) -> MutationInfo {
    MutationInfo {
        mutation_type,
        index,
        predicate: true,
        value,
    }
}

/// How many entries or items a node has (none for a scalar): gaby's `Children`.
fn children(doc: &Doc, id: NodeId) -> usize {
    match doc.node(id).kind {
        Kind::Map(children) | Kind::Seq(children) => children.len(),
        Kind::Scalar { .. } | Kind::Alias(_) => 0,
    }
}

fn is_nonempty_map(doc: &Doc, id: NodeId) -> bool {
    matches!(doc.node(id).kind, Kind::Map(children) if !children.is_empty())
}

/// The value a key names in a mapping's entries: linear for the small mappings resources
/// are made of, hashed for large ones.
struct Keys<'d> {
    doc: &'d Doc<'d>,
    entries: &'d [(NodeId, NodeId)],
    hashed: Option<HashMap<&'d str, NodeId>>,
}

impl<'d> Keys<'d> {
    const LINEAR: usize = 16;

    fn new(doc: &'d Doc<'d>, entries: &'d [(NodeId, NodeId)]) -> Self {
        let hashed = (entries.len() > Self::LINEAR).then(|| {
            entries
                .iter()
                .map(|&(key, value)| (doc.str(key).unwrap_or_default(), value))
                .collect()
        });
        Self {
            doc,
            entries,
            hashed,
        }
    }

    fn get(&self, key: &str) -> Option<NodeId> {
        match &self.hashed {
            Some(hashed) => hashed.get(key).copied(),
            None => self
                .entries
                .iter()
                .find(|&&(k, _)| self.doc.str(k).unwrap_or_default() == key)
                .map(|&(_, value)| value),
        }
    }
}

/// What one invocation changed in one resource, as yamlkit's `ComputeMutationsForDocs`
/// records it.
struct TreeDiff<'d> {
    old: &'d Doc<'d>,
    new: &'d Doc<'d>,
    /// Collections written identically (same text at the same column) are equal: true unless
    /// a document holds aliases or block scalars (whose content depends on the parent's
    /// indentation).
    verbatim: bool,
    index: i64,
    /// Keys (escaped) from the resource's root to the node being compared.
    path: Vec<Cow<'d, str>>,
    out: BTreeMap<String, MutationInfo>,
    /// No more records than this: a candidate for a renamed resource is of no use once it
    /// has as many as the best one.
    limit: usize,
}

/// Whether a document's subtrees are determined by their text and column alone.
fn verbatim(doc: &Doc) -> bool {
    !doc.nodes.iter().any(|node| {
        matches!(
            node.kind,
            Kind::Alias(_)
                | Kind::Scalar {
                    style: Style::Block,
                    ..
                }
        )
    })
}

impl<'d> TreeDiff<'d> {
    /// Whether two nodes are written alike with the comments around them (which kyaml's text
    /// of them, or of their items, holds).
    fn written_alike(&self, before: NodeId, after: NodeId) -> bool {
        let (a, b) = (self.old.node(before), self.new.node(after));
        // The nodes' own texts first: most nodes compared differ there.
        if !(self.verbatim
            && a.col() == b.col()
            && self.old.src[a.start()..a.end()] == self.new.src[b.start()..b.end()])
        {
            return false;
        }
        // A mapping's scalar value holds only its line comment; a block mapping, the comments
        // after it (those above it head its first key, which no value's text holds); the
        // rest, the comments around them.
        let (old, new) = (self.old, self.new);
        match a.kind {
            Kind::Scalar { .. } | Kind::Alias(_) if old.is_map_value(before) => {
                same_scalar_text(old, before, new, after)
            }
            Kind::Map(_) if !a.flow() && old.is_map_value(before) => {
                old.comments_after(before) == new.comments_after(after)
            }
            _ => {
                old.comments_before(before) == new.comments_before(after)
                    && old.comments_after(before) == new.comments_after(after)
            }
        }
    }

    fn full(&self) -> bool {
        self.out.len() >= self.limit
    }

    /// Records `node` of `doc` (the new one, or the old one for a Delete) at the current path.
    fn record(&mut self, mutation_type: MutationType, doc: &Doc, node: NodeId) {
        if !self.full() {
            self.record_text(mutation_type, doc.encode(node));
        }
    }

    /// Records `text` (kyaml's text of the node) at the current path.
    fn record_text(&mut self, mutation_type: MutationType, text: String) {
        if !self.full() {
            self.out
                .insert(self.path.join("."), info(mutation_type, self.index, text));
        }
    }

    /// Records each entry of mapping `before` as deleted.
    fn deleted_entries(&mut self, before: NodeId, except: Option<&Keys>) {
        let old = self.old;
        for &(key, value) in old.entries(before) {
            let key = old.str(key).unwrap_or_default();
            if except.is_some_and(|kept| kept.get(key).is_some()) {
                continue;
            }
            self.path.push(escape(key));
            self.record(MutationType::Delete, old, value);
            self.path.pop();
        }
    }

    /// Records how `after` differs from `before`. Only the new node's shape decides: a
    /// non-empty mapping over anything but a non-empty mapping, or a sequence over anything
    /// but a sequence, is an Update of the whole path; an empty collection over a scalar or
    /// an empty collection is no change; scalars (and aliases, not followed) differ by their
    /// text.
    fn nodes(&mut self, before: NodeId, after: NodeId, depth: usize) {
        // JSON conversion and rendering stop at this depth too.
        if depth > MAX_DEPTH || self.full() || self.written_alike(before, after) {
            return;
        }
        let (old, new) = (self.old, self.new);
        match new.node(after).kind {
            Kind::Map(entries) if !entries.is_empty() => {
                if !is_nonempty_map(old, before) {
                    return self.record(MutationType::Update, new, after);
                }
                let in_old = Keys::new(old, old.entries(before));
                let in_new = Keys::new(new, new.entries(after));
                for &(key, value) in new.entries(after) {
                    if self.full() {
                        return;
                    }
                    let key = new.str(key).unwrap_or_default();
                    self.path.push(escape(key));
                    match in_old.get(key) {
                        Some(was) => self.nodes(was, value, depth + 1),
                        None => self.record(MutationType::Add, new, value),
                    }
                    self.path.pop();
                }
                self.deleted_entries(before, Some(&in_new));
            }
            Kind::Map(_) | Kind::Seq(_) => {
                if children(new, after) == 0 && children(old, before) == 0 {
                    return;
                }
                if new.is_map(after) {
                    if is_nonempty_map(old, before) {
                        self.deleted_entries(before, None);
                    } else {
                        self.record(MutationType::Update, new, after);
                    }
                    return;
                }
                if !old.is_seq(before) {
                    return self.record(MutationType::Update, new, after);
                }
                let (a, b) = (old.items(before), new.items(after));
                for (i, &item) in b.iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    self.path.push(i.to_string().into());
                    match a.get(i) {
                        Some(&was) => self.nodes(was, item, depth + 1),
                        None => self.record(MutationType::Add, new, item),
                    }
                    self.path.pop();
                }
                for (i, &was) in a.iter().enumerate().skip(b.len()) {
                    self.path.push(i.to_string().into());
                    self.record(MutationType::Delete, old, was);
                    self.path.pop();
                }
            }
            Kind::Scalar { .. } | Kind::Alias(_) => {
                // Compared as ConfigHub compares them: by kyaml's text, comments included.
                if !same_scalar_text(old, before, new, after) {
                    let now = new.encode(after);
                    if scalars_differ(old, before, new, after) || old.encode(before) != now {
                        self.record_text(MutationType::Update, now);
                    }
                }
            }
        }
    }
}

/// Whether two scalars or aliases are written alike up to the end of their lines, their
/// line comments included, as values of mappings (an item's text also holds the comments
/// around it) and not as block scalars (whose content depends on their indentation): then
/// kyaml writes them alike, and they need not be encoded to tell.
fn same_scalar_text(old: &Doc, before: NodeId, new: &Doc, after: NodeId) -> bool {
    let plain_value = |doc: &Doc, id: NodeId| {
        !matches!(
            doc.node(id).kind,
            Kind::Scalar {
                style: Style::Block,
                ..
            }
        ) && doc.is_map_value(id)
    };
    fn to_line_end<'a>(doc: &Doc<'a>, id: NodeId) -> &'a str {
        let node = doc.node(id);
        &doc.src[node.start()..doc.line_end(node.end())]
    }
    plain_value(old, before)
        && plain_value(new, after)
        && to_line_end(old, before) == to_line_end(new, after)
}

/// Whether two scalars' kyaml texts are known to differ without encoding them: plain or
/// single-quoted, on one line, in printable ASCII without a tab and without an anchor or tag,
/// kyaml writes each as written, so different texts differ.
fn scalars_differ(old: &Doc, before: NodeId, new: &Doc, after: NodeId) -> bool {
    fn as_written<'a>(doc: &Doc<'a>, id: NodeId) -> Option<&'a str> {
        let node = doc.node(id);
        let text = &doc.src[node.start()..node.end()];
        let verbatim = matches!(
            node.kind,
            Kind::Scalar {
                style: Style::Plain | Style::Single,
                tagged: false,
                ..
            }
        );
        let plain_ascii = text.bytes().all(|b| (b' '..=b'~').contains(&b));
        (verbatim && plain_ascii && !text.is_empty() && !text.starts_with(['&', '!']))
            .then_some(text)
    }
    matches!((as_written(old, before), as_written(new, after)), (Some(a), Some(b)) if a != b)
}

/// The lines of the unit as ConfigHub encodes it: each resource as kyaml writes it, with a
/// `---` line between resources.
fn encoded_lines(unit: &Unit) -> usize {
    let documents: usize = unit
        .elements
        .iter()
        .map(|element| unit.doc.encode(element.root).matches('\n').count())
        .sum();
    documents + unit.elements.len().saturating_sub(1)
}

/// The path records of `after` compared with `before`, at most `limit` of them.
fn compare(
    before: (&Unit, &Element),
    after: (&Unit, &Element),
    verbatim: bool,
    index: i64,
    limit: usize,
) -> BTreeMap<String, MutationInfo> {
    let ((old, earlier), (new, element)) = (before, after);
    // Most resources of a sequence are untouched by each invocation.
    if old.element_text(earlier) == new.element_text(element) {
        return BTreeMap::new();
    }
    let mut tree = TreeDiff {
        old: &old.doc,
        new: &new.doc,
        verbatim,
        index,
        path: Vec::new(),
        out: BTreeMap::new(),
        limit,
    };
    tree.nodes(earlier.root, element.root, 0);
    tree.out
}

/// Names of the resource `info` names: with and without its scope.
fn names(infos: &[&ResourceInfo]) -> (BTreeSet<String>, BTreeSet<String>) {
    (
        infos
            .iter()
            .map(|info| info.resource_name.clone())
            .collect(),
        infos
            .iter()
            .map(|info| info.resource_name_without_scope.clone())
            .collect(),
    )
}

/// A resource-level record: Add with the new resource's text as kyaml writes it, Delete with
/// the removed one's.
fn whole(
    mutation_type: MutationType,
    unit: &Unit,
    element: &Element,
    index: i64,
) -> ResourceMutation {
    let (aliases, aliases_without_scopes) = names(&[&element.info]);
    ResourceMutation {
        resource: element.info.clone(),
        resource_mutation_info: info(mutation_type, index, unit.doc.encode(element.root)),
        path_mutation_map: BTreeMap::new(),
        aliases,
        aliases_without_scopes,
    }
}

/// What invocation `index` changed, going from `before` to `after`, as yamlkit's
/// `ComputeMutations` records it: a record for each resource of `after` in its order (Add,
/// Update, or None when unchanged), then a Delete for each resource of `before` that none
/// matched.
///
/// A resource of `after` is matched, among those of `before` from the first not matched yet,
/// with the first of the same category and a similar type ([`Toolchain::types_similar`]) and
/// the same name without scope; without one, with the one of those whose path records are
/// fewest (the first of them), if they are no more than the lines of `after`'s text: so a
/// renamed resource is an Update, with both names among its aliases.
pub fn diff(
    toolchain: Toolchain,
    before: &Unit,
    after: &Unit,
    index: usize,
) -> Vec<ResourceMutation> {
    let index = i64::try_from(index).unwrap_or(i64::MAX);
    let verbatim = verbatim(&before.doc) && verbatim(&after.doc);
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::with_capacity(before.elements.len());
    for (i, element) in before.elements.iter().enumerate() {
        by_name
            .entry(element.info.resource_name_without_scope.as_str())
            .or_default()
            .push(i);
    }
    // ConfigHub divides by the lines of its own encoding of the data (gaby's Container
    // String: each document as kyaml writes it, joined by `---`), counted when a resource is
    // not found by name.
    let mut lines = None;
    let mut matched = vec![false; before.elements.len()];
    // yamlkit searches from here, matched resources after it included.
    let mut first_unmatched = 0;
    let mut mutations = Vec::with_capacity(after.elements.len());
    for element in &after.elements {
        let now = &element.info;
        let similar = |i: &usize| {
            let was = &before.elements[*i].info;
            was.resource_category == now.resource_category
                && toolchain.types_similar(&was.resource_type, &now.resource_type)
        };
        let compared = |i: usize, limit: usize| {
            compare(
                (before, &before.elements[i]),
                (after, element),
                verbatim,
                index,
                limit,
            )
        };
        let same_name = by_name
            .get(now.resource_name_without_scope.as_str())
            .and_then(|alike| {
                let from = alike.partition_point(|&i| i < first_unmatched);
                alike[from..].iter().copied().find(|i| similar(i))
            });
        let found = match same_name {
            Some(i) => Some((i, compared(i, usize::MAX))),
            None => {
                let mut best: Option<(usize, BTreeMap<String, MutationInfo>)> = None;
                for i in (first_unmatched..before.elements.len()).filter(similar) {
                    let fewest = best.as_ref().map_or(usize::MAX, |(_, paths)| paths.len());
                    let paths = compared(i, fewest);
                    if paths.len() < fewest {
                        best = Some((i, paths));
                    }
                }
                // ConfigHub's score, records per line, at most 1.0 (and 0/0 taken too).
                let lines = *lines.get_or_insert_with(|| encoded_lines(after));
                best.filter(|(_, paths)| paths.len() <= lines)
            }
        };
        let Some((i, paths)) = found else {
            mutations.push(whole(MutationType::Add, after, element, index));
            continue;
        };
        let (aliases, aliases_without_scopes) = names(&[&before.elements[i].info, now]);
        let mutation_type = if paths.is_empty() {
            MutationType::None
        } else {
            MutationType::Update
        };
        mutations.push(ResourceMutation {
            resource: now.clone(),
            resource_mutation_info: info(mutation_type, index, String::new()),
            path_mutation_map: paths,
            aliases,
            aliases_without_scopes,
        });
        matched[i] = true;
        if first_unmatched == i {
            while first_unmatched < matched.len() && matched[first_unmatched] {
                first_unmatched += 1;
            }
        }
    }
    for (element, matched) in before.elements.iter().zip(matched) {
        if !matched {
            mutations.push(whole(MutationType::Delete, before, element, index));
        }
    }
    mutations
}

/// A record's resource as ConfigHub keys records: type and name without scope (taken from
/// the name after its first `/` in records that lack it).
fn key(info: &ResourceInfo) -> (&str, &str) {
    let name = if info.resource_name_without_scope.is_empty() {
        info.resource_name
            .split_once('/')
            .map_or("", |(_, name)| name)
    } else {
        &info.resource_name_without_scope
    };
    (&info.resource_type, name)
}

/// Whether `path` lies below `ancestor`.
fn is_within(path: &str, ancestor: &str) -> bool {
    path.len() > ancestor.len()
        && path.starts_with(ancestor)
        && path.as_bytes()[ancestor.len()] == b'.'
}

/// Adds `newer` (one invocation's records) to `merged` as ConfigHub's `AddMutations` does. A
/// record of a resource not in `merged` (by name or by one of its aliases) is appended.
/// Otherwise a None record changes nothing; a Delete or Replace, or any record over a None,
/// takes the place of the earlier one; a record over a Delete does too, as a Replace; else
/// the resource's names and aliases are taken and its path records merged in: a path
/// recorded again keeps its first type with the later value (a Delete followed by anything
/// else becomes a Replace), and the records below a path recorded later are dropped.
pub fn merge(merged: &mut Vec<ResourceMutation>, newer: Vec<ResourceMutation>) {
    // Where each newer record goes, worked out on borrowed keys before anything moves. Only
    // the records merged before are looked in, as in ConfigHub.
    let targets: Vec<Option<usize>> = {
        let mut positions: HashMap<(&str, &str), usize> = HashMap::with_capacity(merged.len());
        for (i, mutation) in merged.iter().enumerate() {
            positions.insert(key(&mutation.resource), i);
        }
        newer
            .iter()
            .map(|mutation| {
                let (resource_type, name) = key(&mutation.resource);
                positions.get(&(resource_type, name)).copied().or_else(|| {
                    mutation
                        .aliases_without_scopes
                        .iter()
                        .find_map(|alias| positions.get(&(resource_type, alias.as_str())).copied())
                })
            })
            .collect()
    };
    for (mutation, target) in newer.into_iter().zip(targets) {
        let Some(position) = target else {
            merged.push(mutation);
            continue;
        };
        let existing = &mut merged[position];
        let now = mutation.resource_mutation_info.mutation_type;
        let was = existing.resource_mutation_info.mutation_type;
        match (was, now) {
            (_, MutationType::None) => continue,
            (_, MutationType::Delete | MutationType::Replace) | (MutationType::None, _) => {
                *existing = mutation;
                continue;
            }
            (MutationType::Delete, _) => {
                *existing = mutation;
                existing.resource_mutation_info.mutation_type = MutationType::Replace;
                continue;
            }
            _ => {}
        }
        existing.resource.resource_name = mutation.resource.resource_name;
        existing.resource.resource_name_without_scope =
            mutation.resource.resource_name_without_scope;
        existing.aliases.extend(mutation.aliases);
        existing
            .aliases_without_scopes
            .extend(mutation.aliases_without_scopes);
        for (path, change) in mutation.path_mutation_map {
            existing
                .path_mutation_map
                .retain(|recorded, _| !is_within(recorded, &path));
            match existing.path_mutation_map.get_mut(&path) {
                Some(recorded) => {
                    let mutation_type = match (recorded.mutation_type, change.mutation_type) {
                        (MutationType::Delete, newer) if newer != MutationType::Delete => {
                            MutationType::Replace
                        }
                        (kept, _) => kept,
                    };
                    *recorded = MutationInfo {
                        mutation_type,
                        ..change
                    };
                }
                None => {
                    existing.path_mutation_map.insert(path, change);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K8S: Toolchain = Toolchain::KubernetesYaml;

    const BEFORE: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: main
        image: nginx
---
apiVersion: v1
kind: Service
metadata:
  name: web
";

    fn summary(mutation: &ResourceMutation) -> Vec<String> {
        mutation
            .path_mutation_map
            .iter()
            .map(|(p, m)| format!("{p} {:?} {:?} @{}", m.mutation_type, m.value, m.index))
            .collect()
    }

    fn diff_texts(before: &str, after: &str, index: usize) -> Vec<ResourceMutation> {
        diff(
            K8S,
            &K8S.parse(before).unwrap(),
            &K8S.parse(after).unwrap(),
            index,
        )
    }

    fn kinds(mutations: &[ResourceMutation]) -> Vec<String> {
        mutations
            .iter()
            .map(|m| {
                format!(
                    "{:?} {}",
                    m.resource_mutation_info.mutation_type, m.resource.resource_name
                )
            })
            .collect()
    }

    #[test]
    fn paths_record_the_nodes_yaml_text() {
        let after = BEFORE
            .replace("replicas: 1", "replicas: 3")
            .replace(
                "  name: web\nspec",
                "  name: web\n  labels:\n    app: web\n    tier: [front, edge]\nspec",
            )
            .replace("        image: nginx\n", "        args:\n        - --a\n");
        let mutations = diff_texts(BEFORE, &after, 2);
        assert_eq!(kinds(&mutations), ["Update /web", "None /web"]);
        assert_eq!(
            summary(&mutations[0]),
            [
                "metadata.labels Add \"app: web\\ntier: [front, edge]\\n\" @2",
                "spec.replicas Update \"3\\n\" @2",
                "spec.template.spec.containers.0.args Add \"- --a\\n\" @2",
                "spec.template.spec.containers.0.image Delete \"nginx\\n\" @2",
            ]
        );
        // The unchanged Service: a None record without paths, predicate set, aliases kept.
        let service = &mutations[1];
        assert!(service.path_mutation_map.is_empty());
        assert!(service.resource_mutation_info.predicate);
        assert_eq!(service.aliases, BTreeSet::from(["/web".to_owned()]));
        assert_eq!(
            service.aliases_without_scopes,
            BTreeSet::from(["web".to_owned()])
        );
    }

    #[test]
    fn shapes_change_as_updates_of_the_whole_path() {
        let before = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n\
            s: 3\nq: \"x\"\nm: {}\nn: 5\ne: 5\nl:\n  k: v\nz: [1]\n";
        let after = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n\
            s: \"3\"\nq: 'x'\nm:\n  k: v\nn: {}\ne: []\nl: [a]\nz: {}\n";
        let mutations = diff_texts(before, after, 0);
        assert_eq!(
            summary(&mutations[0]),
            [
                "l Update \"[a]\\n\" @0",
                "m Update \"k: v\\n\" @0",
                "q Update \"'x'\\n\" @0",
                "s Update \"\\\"3\\\"\\n\" @0",
                "z Update \"{}\\n\" @0",
            ],
            "n and e: an empty collection over a scalar is no change to ConfigHub"
        );
        let emptied = diff_texts(before, &before.replace("l:\n  k: v\n", "l: {}\n"), 0);
        assert_eq!(summary(&emptied[0]), ["l.k Delete \"v\\n\" @0"]);
    }

    #[test]
    fn values_are_kyamls_text_of_the_node() {
        let before = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n\
            c: 1 # one\nb: |\n  x\nf: {a: 1}\nn: &n 1\nl:\n# first\n- x\n";
        let after = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n\
            c: 1 # uno\nb: |-\n  x\n  y\nf: {a: 2,\n  b: [1,\n  2]}\nn: &n 2\nl:\n# first\n- y  # why\n";
        let mutations = diff_texts(before, after, 0);
        assert_eq!(
            summary(&mutations[0]),
            [
                "b Update \"|-\\n  x\\n  y\\n\" @0",
                // A comment is part of the text: changing it alone is an Update.
                "c Update \"1 # uno\\n\" @0",
                "f.a Update \"2\\n\" @0",
                "f.b Add \"[1, 2]\\n\" @0",
                // An item carries its head comment.
                "l.0 Update \"# first\\ny # why\\n\" @0",
                "n Update \"&n 2\\n\" @0",
            ]
        );
    }

    #[test]
    fn comments_count_where_kyamls_text_holds_them() {
        let before = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n\
            m:\n  # about k\n  k: v\nl:\n  # first\n  - x\n  - y\n  # last\nz: 1\n";
        // A key's head comment is no value's text: no record.
        let rekeyed = before.replace("# about k", "# about the key");
        assert!(
            diff_texts(before, &rekeyed, 0)[0]
                .path_mutation_map
                .is_empty()
        );
        // An item's head and foot comments are its text: the item is updated.
        let after = before
            .replace("# first", "# one")
            .replace("# last", "# end");
        assert_eq!(
            summary(&diff_texts(before, &after, 0)[0]),
            [
                "l.0 Update \"# one\\nx\\n\" @0",
                "l.1 Update \"y\\n# end\\n\" @0",
            ]
        );
    }

    #[test]
    fn added_and_deleted_resources_hold_kyamls_text() {
        let before = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n";
        let after = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n\
            data:   # the data\n  list:\n    - a\n  flow: {a: 1,\n    b: 2}\n";
        let mutations = diff_texts(before, after, 0);
        assert_eq!(kinds(&mutations), ["Add /c", "Delete /s"]);
        assert_eq!(
            mutations[0].resource_mutation_info.value,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n\
            data: # the data\n  list:\n  - a\n  flow: {a: 1, b: 2}\n"
        );
        assert_eq!(mutations[1].resource_mutation_info.value, before);
    }

    #[test]
    fn aliases_are_compared_as_written() {
        let before = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\nx: &v 1\ny: *v\nz:\n  w: 1\n";
        let after = before.replace("&v 1", "&v 2").replace("w: 1", "w: 3");
        let mutations = diff_texts(before, &after, 0);
        let paths: Vec<_> = mutations[0].path_mutation_map.keys().collect();
        assert_eq!(paths, ["x", "z.w"]);
    }

    #[test]
    fn renamed_resources_are_updates_unless_too_different() {
        let before = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n";
        let renamed = diff_texts(before, &before.replace("name: a", "name: b"), 1);
        assert_eq!(kinds(&renamed), ["Update /b"]);
        assert_eq!(summary(&renamed[0]), ["metadata.name Update \"b\\n\" @1"]);
        assert_eq!(
            renamed[0].aliases_without_scopes,
            BTreeSet::from(["a".to_owned(), "b".to_owned()])
        );
        // A Secret is similar to a ConfigMap; a Service is not.
        let retyped = before
            .replace("ConfigMap", "Secret")
            .replace("name: a", "name: b");
        assert_eq!(kinds(&diff_texts(before, &retyped, 1)), ["Update /b"]);
        let other = before.replace("ConfigMap", "Service");
        assert_eq!(
            kinds(&diff_texts(before, &other, 1)),
            ["Add /a", "Delete /a"]
        );
        // More records than lines: another resource.
        let flow = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n\
            data: {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6}\n";
        let rewritten = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n\
            data: {a: 9, b: 9, c: 9, d: 9, e: 9, f: 9}\n";
        let mutations = diff_texts(flow, rewritten, 1);
        assert_eq!(kinds(&mutations), ["Add /b", "Delete /a"]);
        assert!(
            mutations[1]
                .resource_mutation_info
                .value
                .contains("kind: ConfigMap")
        );
    }

    #[test]
    fn merged_as_confighub_adds_mutations() {
        let only_service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n";
        let relabeled = BEFORE.replace("  name: web\nspec", "  name: web\n  labels: {a: b}\nspec");
        // Deleted, then added back: a Replace.
        let mut merged = diff_texts(BEFORE, only_service, 0);
        assert_eq!(kinds(&merged), ["None /web", "Delete /web"]);
        merge(&mut merged, diff_texts(only_service, BEFORE, 1));
        assert_eq!(kinds(&merged), ["None /web", "Replace /web"]);

        // A first Update keeps its type and index; paths merge, a later one replacing the
        // records below it; a path deleted then written again is a Replace.
        let mut merged = diff_texts(BEFORE, &relabeled, 0);
        let relabeled_again = relabeled
            .replace("{a: b}", "{a: c}")
            .replace("        image: nginx\n", "");
        merge(&mut merged, diff_texts(&relabeled, &relabeled_again, 1));
        let restored = relabeled_again
            .replace("labels: {a: c}", "labels: [x]")
            .replace(
                "      - name: main\n",
                "      - name: main\n        image: nginx:2\n",
            );
        merge(&mut merged, diff_texts(&relabeled_again, &restored, 2));
        assert_eq!(kinds(&merged), ["Update /web", "None /web"]);
        assert_eq!(merged[0].resource_mutation_info.index, 0);
        assert_eq!(
            summary(&merged[0]),
            [
                "metadata.labels Add \"[x]\\n\" @2",
                "spec.template.spec.containers.0.image Replace \"nginx:2\\n\" @2",
            ]
        );
    }

    #[test]
    fn records_of_renamed_resources_merge_through_their_aliases() {
        let before = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n";
        let renamed = before.replace("name: a", "name: b");
        let mut merged = diff_texts(before, &before.replace("k: v", "k: w"), 0);
        merge(
            &mut merged,
            diff_texts(
                &before.replace("k: v", "k: w"),
                &renamed.replace("k: v", "k: w"),
                1,
            ),
        );
        assert_eq!(kinds(&merged), ["Update /b"]);
        assert_eq!(
            merged[0].aliases_without_scopes,
            BTreeSet::from(["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(merged[0].path_mutation_map.len(), 2, "{merged:#?}");
    }
}
