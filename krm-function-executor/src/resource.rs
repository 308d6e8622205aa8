//! A unit of configuration: a multi-document YAML text, parsed once per invocation into the
//! lossless tree, with each document's resource identity.

use crate::api::ResourceInfo;
use crate::yaml::{Doc, Kind, NodeId, ParseError};

/// One document of the unit.
#[derive(Debug, Clone)]
pub struct Element {
    /// Its position among the documents of the text (empty documents included).
    pub document: usize,
    pub root: NodeId,
    pub info: ResourceInfo,
    /// Why it is not a usable resource (no `kind`, not a mapping, ...), if it is not.
    pub problem: Option<String>,
}

impl Element {
    /// The identity, or an error naming the element and what is missing.
    pub(crate) fn checked_info(&self) -> Result<&ResourceInfo, String> {
        match &self.problem {
            None => Ok(&self.info),
            Some(problem) => Err(format!("resource/element {}: {problem}", self.document)),
        }
    }
}

/// How a toolchain names the resource a document of its model holds: the element of document
/// number `document`, whose root node is `root`.
pub type Identify = fn(doc: &Doc, document: usize, root: NodeId) -> Element;

/// The parsed unit. Documents that are empty (a trailing `---`) are not elements.
pub struct Unit<'a> {
    pub doc: Doc<'a>,
    pub elements: Vec<Element>,
}

impl<'a> Unit<'a> {
    /// A unit whose resources `identify` names (see [`crate::Toolchain::parse`]).
    pub fn parse_with(text: &'a str, identify: Identify) -> Result<Self, ParseError> {
        let doc = Doc::parse(text)?;
        let elements = doc
            .roots
            .iter()
            .enumerate()
            .filter(|&(_, &root)| !doc.is_null(root))
            .map(|(document, &root)| identify(&doc, document, root))
            .collect();
        Ok(Self { doc, elements })
    }

    /// The text of one element's document, without `---` separators.
    pub fn element_text(&self, element: &Element) -> &'a str {
        let node = self.doc.node(element.root);
        let start = self.doc.line_start(node.start());
        let end = self.doc.line_end(node.end());
        &self.doc.src[start..end.max(start)]
    }

    /// The byte range that removing `element` takes out of the text: its lines and the
    /// separator that follows it (or, for the last document, the separator before it).
    pub fn removal_span(&self, element: &Element) -> (usize, usize) {
        let doc = &self.doc;
        let roots = &doc.roots;
        let at = element.document;
        let start = doc.line_start(doc.node(roots[at]).start());
        let end = doc.line_end(doc.node(roots[at]).end());
        match roots.get(at + 1) {
            Some(&next) => {
                let next_start = doc.line_start(doc.node(next).start()).max(end);
                let after = separator_lines(doc.src, end, next_start)
                    .first()
                    .map_or(next_start, |&(_, line_end)| line_end);
                (start, after)
            }
            None if at > 0 => {
                let previous_end = doc.line_end(doc.node(roots[at - 1]).end()).min(start);
                let before = separator_lines(doc.src, previous_end, start)
                    .last()
                    .map_or(start, |&(line_start, _)| line_start);
                (before, doc.src.len())
            }
            None => (0, doc.src.len()),
        }
    }
}

self_cell::self_cell!(
    /// A unit with the text it was parsed from, so that a sequence parses each text once:
    /// the unit a mutating invocation leaves is the next invocation's.
    pub struct OwnedUnit {
        owner: String,
        #[covariant]
        dependent: Unit,
    }
);

impl OwnedUnit {
    /// See [`Unit::parse_with`].
    pub fn parse_with(text: String, identify: Identify) -> Result<Self, ParseError> {
        Self::try_new(text, |text| Unit::parse_with(text, identify))
    }

    pub fn unit(&self) -> &Unit<'_> {
        self.borrow_dependent()
    }

    pub fn text(&self) -> &str {
        self.borrow_owner()
    }

    pub fn into_text(self) -> String {
        self.into_owner()
    }
}

/// The `---` lines between two byte offsets that start lines, as (start, end) spans.
fn separator_lines(src: &str, from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut lines = Vec::new();
    let mut at = from;
    while at < to {
        let line_end = src[at..to].find('\n').map_or(to, |i| at + i + 1);
        if src[at..line_end].starts_with("---") {
            lines.push((at, line_end));
        }
        at = line_end;
    }
    lines
}

/// Every scalar below `node` with its resolved path (keys escaped), in document order.
/// Aliases are not followed: what they point at is visited where it is written.
pub fn scalars(doc: &Doc, node: NodeId) -> Vec<(String, NodeId)> {
    let mut out = Vec::new();
    let mut keys = Vec::new();
    collect_scalars(doc, node, &mut keys, &mut out);
    out
}

fn collect_scalars(
    doc: &Doc,
    node: NodeId,
    keys: &mut Vec<String>,
    out: &mut Vec<(String, NodeId)>,
) {
    match &doc.node(node).kind {
        Kind::Scalar { .. } => out.push((keys.join("."), node)),
        Kind::Map(_) => {
            for &(key, value) in doc.entries(node) {
                keys.push(crate::path::escape(doc.str(key).unwrap_or_default()).into_owned());
                collect_scalars(doc, value, keys, out);
                keys.pop();
            }
        }
        Kind::Seq(_) => {
            for (index, &item) in doc.items(node).iter().enumerate() {
                keys.push(index.to_string());
                collect_scalars(doc, item, keys, out);
                keys.pop();
            }
        }
        Kind::Alias(_) => {}
    }
}

#[cfg(test)]
mod tests {

    const UNIT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: prod
---
# a comment
apiVersion: v1
kind: Service
metadata:
  name: web
---
";

    #[test]
    fn identities_follow_confighub() {
        let unit = crate::Toolchain::KubernetesYaml.parse(UNIT).unwrap();
        assert_eq!(unit.elements.len(), 2);
        let [deployment, service] = &unit.elements[..] else {
            panic!()
        };
        assert_eq!(deployment.info.resource_type, "apps/v1/Deployment");
        assert_eq!(deployment.info.resource_name, "prod/web");
        assert_eq!(service.info.resource_type, "v1/Service");
        assert_eq!(service.info.resource_name, "/web");
        assert_eq!(service.info.resource_name_without_scope, "web");
        assert!(unit.element_text(service).starts_with("apiVersion: v1\n"));
    }

    #[test]
    fn removal_keeps_the_other_documents_whole() {
        let unit = crate::Toolchain::KubernetesYaml.parse(UNIT).unwrap();
        let remove = |i: usize| {
            let (start, end) = unit.removal_span(&unit.elements[i]);
            format!("{}{}", &UNIT[..start], &UNIT[end..])
        };
        assert_eq!(
            remove(0),
            "# a comment\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n---\n"
        );
        let two = "a: 1\nkind: K\n---\napiVersion: v1\nkind: K\n";
        let unit = crate::Toolchain::KubernetesYaml.parse(two).unwrap();
        let (start, end) = unit.removal_span(&unit.elements[1]);
        assert_eq!(
            format!("{}{}", &two[..start], &two[end..]),
            "a: 1\nkind: K\n"
        );
    }

    #[test]
    fn elements_without_identity_are_named() {
        let unit = crate::Toolchain::KubernetesYaml
            .parse("kind: X\n---\n- a\n")
            .unwrap();
        assert_eq!(
            unit.elements[0].checked_info().unwrap_err(),
            "resource/element 0: no apiVersion"
        );
        assert_eq!(
            unit.elements[1].checked_info().unwrap_err(),
            "resource/element 1: not a mapping"
        );
    }
}
