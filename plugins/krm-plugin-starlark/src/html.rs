//! `html.star` and `bsoup.star` (qri-io/starlib v0.5.0), over one HTML tree parsed by
//! html5ever (the scraper crate).
//!
//! `html(body)` is goquery's selection API: a selection of nodes with `attr`, `children`,
//! `children_filtered`, `contents`, `find`, `filter`, `get`, `has`, `parent`, `parents_until`,
//! `siblings`, `text`, `first`, `last`, `len` and `eq`, selectors being CSS (an invalid one
//! matches nothing, as in goquery).
//!
//! `bsoup.parseHtml(text)` is starlib's BeautifulSoup subset over the `<html>` element: nodes
//! with `find`, `find_all` (tag name, `""` for any, and attributes from dicts or keywords, a
//! value matching one of the attribute's space-separated words), `attrs`, `contents`, `child`,
//! `parent`, `next_sibling`, `prev_sibling` and `get_text` (the first direct text that is not
//! only spaces, as starlib's soup gives); `str()` of a node is its HTML. Where starlib would
//! hand back a node with nothing behind it (no parent or sibling), this gives `None`.
//!
//! A document is measured before it is parsed (what its tree could take at most) and each
//! selection, list and text is measured before it is made, against what is left of the heap
//! budget.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use allocative::Allocative;
use ego_tree::iter::Edge;
use ego_tree::{NodeId, NodeRef};
use scraper::{ElementRef, Html, Node, Selector};
use starlark::environment::{
    GlobalsBuilder, GlobalsStatic, Methods, MethodsBuilder, MethodsStatic,
};
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::AllocList;
use starlark::values::none::NoneOr;
use starlark::values::tuple::{AllocTuple, UnpackTuple};
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagablePanic, StarlarkValue, Value, ValueLike,
};
use starlark_derive::starlark_value;
use starlark_map::small_map::SmallMap;

use super::{heap_left, hold_outside_heap, over_budget};

/// Bytes the parsed tree may take per byte of the document, at most: `<a>` (three bytes) is an
/// element node of about two hundred.
const TREE_BYTES_PER_INPUT_BYTE: u64 = 64;
/// Bytes the parsed tree takes per node, about (the node, its links, its name or text header).
const TREE_BYTES_PER_NODE: u64 = 192;
/// Tags a document may have: html5ever looks through the open elements for many tags, so a
/// document nesting all its tags takes time growing with the square of their number.
const MAX_TAGS: usize = 10_000;
/// Nodes nested deeper than this are refused, as browsers cap the depth they build: matching a
/// selector walks a node's ancestors, so its cost is the number of nodes times the depth.
const MAX_DEPTH: usize = 512;
/// Heap bytes of a Starlark string, list or small value besides what it holds.
const VALUE_OVERHEAD: u64 = 48;

/// A parsed document, shared by the values that point into it. The tree's strings are not
/// `Sync`; the lock makes the document shareable, and the program's one thread never waits.
#[derive(Clone)]
struct Document(Arc<Mutex<Html>>);

impl Document {
    /// Parses `text` when its tree fits what is left of the heap budget.
    fn parse(function: &str, text: &str, heap: Heap) -> starlark::Result<Document> {
        let most = (text.len() as u64).saturating_mul(TREE_BYTES_PER_INPUT_BYTE);
        let left = heap_left(heap);
        if most > left {
            return Err(over_budget(
                &format!("`{function}` of a {}-byte document", text.len()),
                Some(most),
                left,
            ));
        }
        let tags = text
            .as_bytes()
            .windows(2)
            .filter(|pair| pair[0] == b'<' && pair[1].is_ascii_alphabetic())
            .count();
        if tags > MAX_TAGS {
            return Err(error(
                function,
                format!(
                    "the document has {tags} tags, more than the {MAX_TAGS} krm-runner parses \
                     (building the tree can take time growing with the square of its nesting)"
                ),
            ));
        }
        let html = Html::parse_document(text);
        let nodes = html.tree.nodes().count() as u64;
        hold_outside_heap(
            (text.len() as u64).saturating_add(nodes.saturating_mul(TREE_BYTES_PER_NODE)),
        );
        let (mut depth, mut deepest) = (0usize, 0usize);
        for edge in html.tree.root().traverse() {
            match edge {
                Edge::Open(_) => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                Edge::Close(_) => depth -= 1,
            }
        }
        if deepest > MAX_DEPTH {
            return Err(error(
                function,
                format!(
                    "the document nests its nodes {deepest} deep, more than the {MAX_DEPTH} \
                     levels krm-runner reads (a selector's cost grows with the depth)"
                ),
            ));
        }
        Ok(Document(Arc::new(Mutex::new(html))))
    }

    fn html(&self) -> MutexGuard<'_, Html> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn same(&self, other: &Document) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn error(function: &str, message: impl fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("{function}: {message}"))
}

/// Refuses making `bytes` more bytes when they pass what is left of the heap budget.
fn within_budget(what: &str, bytes: u64, heap: Heap) -> starlark::Result<()> {
    let left = heap_left(heap);
    if bytes > left {
        return Err(over_budget(what, Some(bytes), left));
    }
    Ok(())
}

/// Go's `html.Render` of a text node's escaping.
fn escape_text(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

/// `node` written as HTML.
fn render(node: NodeRef<Node>) -> String {
    match node.value() {
        Node::Text(text) => {
            let mut out = String::with_capacity(text.len());
            escape_text(text, &mut out);
            out
        }
        Node::Comment(comment) => format!("<!--{}-->", &**comment),
        Node::Element(_) => ElementRef::wrap(node).map(|e| e.html()).unwrap_or_default(),
        Node::Doctype(doctype) => format!("<!DOCTYPE {}>", doctype.name()),
        Node::Document | Node::Fragment => node.children().map(render).collect::<Vec<_>>().concat(),
        Node::ProcessingInstruction(_) => String::new(),
    }
}

/// The text of `node` and its descendants, in document order.
fn all_text(node: NodeRef<Node>, out: &mut String) {
    for n in node.descendants() {
        if let Node::Text(text) = n.value() {
            out.push_str(text);
        }
    }
}

fn text_bytes(node: NodeRef<Node>) -> u64 {
    node.descendants()
        .filter_map(|n| n.value().as_text().map(|t| t.len() as u64))
        .sum()
}

pub fn add_html(builder: &mut GlobalsBuilder) {
    builder.set("html", HTML_FUNCTION.function());
}

pub fn add_bsoup(builder: &mut GlobalsBuilder) {
    builder.namespace("bsoup", bsoup_module);
}

static HTML_FUNCTION: GlobalsStatic = GlobalsStatic::new("krm-html", html_function);

#[starlark_module]
fn html_function(builder: &mut GlobalsBuilder) {
    /// A selection holding the parsed document.
    fn html<'v>(
        #[starlark(require = pos)] body: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let document = Document::parse("html", body, heap)?;
        let root = document.html().tree.root().id();
        Ok(Selection::alloc(heap, document, vec![root]))
    }
}

// ---------------------------------------------------------------------------------------------
// html.star: goquery's Selection.

#[derive(ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct Selection {
    #[allocative(skip)]
    document: Document,
    #[allocative(skip)]
    nodes: Vec<NodeId>,
}

starlark_simple_value!(Selection);

impl fmt::Debug for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Selection({} nodes)", self.nodes.len())
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<html selection of {} nodes>", self.nodes.len())
    }
}

impl Selection {
    fn alloc(heap: Heap<'_>, document: Document, nodes: Vec<NodeId>) -> Value<'_> {
        hold_outside_heap(nodes.len() as u64 * std::mem::size_of::<NodeId>() as u64);
        heap.alloc_simple(Selection { document, nodes })
    }

    fn from<'v>(value: Value<'v>, function: &str) -> starlark::Result<&'v Selection> {
        value
            .downcast_ref::<Selection>()
            .ok_or_else(|| error(function, "not an html selection"))
    }

    /// A new selection of the nodes `step` gives for each node of this one, each node once, in
    /// the order they are met; refused when its list could pass the heap budget.
    fn map<'v>(
        &self,
        function: &str,
        heap: Heap<'v>,
        step: impl Fn(NodeRef<Node>, &mut dyn FnMut(NodeId)),
    ) -> starlark::Result<Value<'v>> {
        let html = self.document.html();
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        let left = heap_left(heap) / (2 * std::mem::size_of::<NodeId>() as u64);
        let mut too_many = false;
        for &id in &self.nodes {
            if let Some(node) = html.tree.get(id) {
                step(node, &mut |next| {
                    if (found.len() as u64) < left {
                        if seen.insert(next) {
                            found.push(next);
                        }
                    } else {
                        too_many = true;
                    }
                });
            }
        }
        drop(html);
        if too_many {
            return Err(over_budget(&format!("`{function}`"), None, heap_left(heap)));
        }
        Ok(Selection::alloc(heap, self.document.clone(), found))
    }

    /// The nodes of this selection that `keep` holds for.
    fn filter<'v>(&self, heap: Heap<'v>, keep: impl Fn(NodeRef<Node>) -> bool) -> Value<'v> {
        let html = self.document.html();
        let kept = self
            .nodes
            .iter()
            .copied()
            .filter(|&id| html.tree.get(id).is_some_and(&keep))
            .collect();
        drop(html);
        Selection::alloc(heap, self.document.clone(), kept)
    }

    fn at<'v>(&self, heap: Heap<'v>, index: Option<usize>) -> Value<'v> {
        let nodes = index
            .and_then(|i| self.nodes.get(i))
            .map(|&id| vec![id])
            .unwrap_or_default();
        Selection::alloc(heap, self.document.clone(), nodes)
    }
}

/// goquery's selector: an invalid one matches nothing. A selector nesting `:has()` is
/// refused: each level multiplies its cost by the number of nodes.
fn matcher(function: &str, selector: &str) -> starlark::Result<Option<Selector>> {
    if selector.matches(":has(").count() > 1 {
        return Err(error(
            function,
            format!("selector {selector:?} nests `:has()`, which krm-runner does not match"),
        ));
    }
    Ok(Selector::parse(selector).ok())
}

fn matches(selector: &Option<Selector>, node: NodeRef<Node>) -> bool {
    match (selector, ElementRef::wrap(node)) {
        (Some(selector), Some(element)) => selector.matches(&element),
        _ => false,
    }
}

fn is_element(node: &NodeRef<Node>) -> bool {
    node.value().is_element()
}

/// goquery's index: from the end when negative.
fn index(len: usize, i: i64) -> Option<usize> {
    let i = if i < 0 { len as i64 + i } else { i };
    usize::try_from(i).ok().filter(|&i| i < len)
}

static SELECTION_METHODS: MethodsStatic =
    MethodsStatic::new("krm-html-selection-methods", selection_methods);

#[starlark_value(type = "html_selection")]
impl<'v> StarlarkValue<'v> for Selection {
    fn get_methods() -> Option<&'static Methods> {
        Some(SELECTION_METHODS.methods())
    }
}

#[starlark_module]
fn selection_methods(builder: &mut MethodsBuilder) {
    /// The attribute of the first node, `None` when it has none of that name.
    fn attr<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] name: &str,
    ) -> starlark::Result<NoneOr<String>> {
        let selection = Selection::from(this, "attr")?;
        let html = selection.document.html();
        Ok(NoneOr::from_option(
            selection
                .nodes
                .first()
                .and_then(|&id| html.tree.get(id))
                .and_then(|node| node.value().as_element().and_then(|e| e.attr(name)))
                .map(str::to_owned),
        ))
    }

    fn children<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Selection::from(this, "children")?.map("children", heap, |node, add| {
            node.children().filter(is_element).for_each(|c| add(c.id()))
        })
    }

    fn children_filtered<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] selector: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selector = matcher("children_filtered", selector)?;
        Selection::from(this, "children_filtered")?.map("children_filtered", heap, |node, add| {
            node.children()
                .filter(|c| matches(&selector, *c))
                .for_each(|c| add(c.id()))
        })
    }

    /// The children of each node, text and comments included.
    fn contents<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Selection::from(this, "contents")?.map("contents", heap, |node, add| {
            node.children().for_each(|c| add(c.id()))
        })
    }

    fn find<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] selector: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selector = matcher("find", selector)?;
        Selection::from(this, "find")?.map("find", heap, |node, add| {
            node.descendants()
                .skip(1)
                .filter(|d| matches(&selector, *d))
                .for_each(|d| add(d.id()))
        })
    }

    fn filter<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] selector: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selector = matcher("filter", selector)?;
        Ok(Selection::from(this, "filter")?.filter(heap, |node| matches(&selector, node)))
    }

    /// The name of the `i`th node (its tag, or a text node's text); without `i`, a tuple of
    /// them all.
    fn get<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] i: Option<i64>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selection = Selection::from(this, "get")?;
        let html = selection.document.html();
        let data = |id: NodeId| -> String {
            match html.tree.get(id).map(|n| n.value()) {
                Some(Node::Element(element)) => element.name().to_owned(),
                Some(Node::Text(text)) => text.to_string(),
                Some(Node::Comment(comment)) => comment.to_string(),
                Some(Node::Doctype(doctype)) => doctype.name().to_owned(),
                _ => String::new(),
            }
        };
        let bytes_of = |id: NodeId| match html.tree.get(id).map(|n| n.value()) {
            Some(Node::Text(text)) => text.len() as u64,
            Some(Node::Comment(comment)) => comment.len() as u64,
            _ => 16,
        };
        match i {
            None => {
                let bytes = selection
                    .nodes
                    .iter()
                    .map(|&id| bytes_of(id) + VALUE_OVERHEAD)
                    .sum();
                within_budget("`get`", bytes, heap)?;
                Ok(heap.alloc(AllocTuple(
                    selection.nodes.iter().map(|&id| heap.alloc(data(id))),
                )))
            }
            Some(i) => match index(selection.nodes.len(), i) {
                Some(i) => Ok(heap.alloc(data(selection.nodes[i]))),
                None => Ok(Value::new_none()),
            },
        }
    }

    /// The nodes with a descendant matching `selector`.
    fn has<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] selector: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selector = matcher("has", selector)?;
        Ok(Selection::from(this, "has")?.filter(heap, |node| {
            node.descendants().skip(1).any(|d| matches(&selector, d))
        }))
    }

    fn parent<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Selection::from(this, "parent")?.map("parent", heap, |node, add| {
            if let Some(parent) = node.parent().filter(is_element) {
                add(parent.id());
            }
        })
    }

    /// The ancestors of each node up to, not including, the first matching `selector`.
    fn parents_until<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] selector: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selector = matcher("parents_until", selector)?;
        Selection::from(this, "parents_until")?.map("parents_until", heap, |node, add| {
            node.ancestors()
                .filter(is_element)
                .take_while(|a| !matches(&selector, *a))
                .for_each(|a| add(a.id()))
        })
    }

    /// The element siblings of each node.
    fn siblings<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Selection::from(this, "siblings")?.map("siblings", heap, |node, add| {
            node.prev_siblings()
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .chain(node.next_siblings())
                .filter(is_element)
                .for_each(|s| add(s.id()))
        })
    }

    /// The text of every node and its descendants, joined.
    fn text<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<String> {
        let selection = Selection::from(this, "text")?;
        let html = selection.document.html();
        let nodes: Vec<NodeRef<Node>> = selection
            .nodes
            .iter()
            .filter_map(|&id| html.tree.get(id))
            .collect();
        let bytes = nodes.iter().map(|&n| text_bytes(n)).sum();
        within_budget("`text`", bytes, heap)?;
        let mut out = String::new();
        nodes.into_iter().for_each(|n| all_text(n, &mut out));
        Ok(out)
    }

    fn first<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let selection = Selection::from(this, "first")?;
        Ok(selection.at(heap, index(selection.nodes.len(), 0)))
    }

    fn last<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let selection = Selection::from(this, "last")?;
        Ok(selection.at(heap, index(selection.nodes.len(), -1)))
    }

    fn len<'v>(this: Value<'v>) -> starlark::Result<i64> {
        Ok(Selection::from(this, "len")?.nodes.len() as i64)
    }

    /// The `i`th node (from the end when negative), or an empty selection.
    fn eq<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] i: i64,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let selection = Selection::from(this, "eq")?;
        Ok(selection.at(heap, index(selection.nodes.len(), i)))
    }
}

// ---------------------------------------------------------------------------------------------
// bsoup.star: starlib's BeautifulSoup subset.

#[derive(ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct SoupNode {
    #[allocative(skip)]
    document: Document,
    #[allocative(skip)]
    node: NodeId,
}

starlark_simple_value!(SoupNode);

impl fmt::Debug for SoupNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SoupNode({:?})", self.node)
    }
}

impl fmt::Display for SoupNode {
    /// The node as HTML, as starlib writes it. Its size is bounded by the document's, and
    /// `str()`, `print` and formatting measure it against the heap budget before keeping it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let html = self.document.html();
        match html.tree.get(self.node) {
            Some(node) => f.write_str(&render(node)),
            None => Ok(()),
        }
    }
}

impl SoupNode {
    fn from<'v>(value: Value<'v>, function: &str) -> starlark::Result<&'v SoupNode> {
        value
            .downcast_ref::<SoupNode>()
            .ok_or_else(|| error(function, "not a SoupNode"))
    }

    fn alloc<'v>(&self, heap: Heap<'v>, node: NodeId) -> Value<'v> {
        heap.alloc_simple(SoupNode {
            document: self.document.clone(),
            node,
        })
    }

    /// Its node's relative, `None` when there is none.
    fn relative<'v>(
        &self,
        heap: Heap<'v>,
        step: impl Fn(NodeRef<Node>) -> Option<NodeRef<Node>>,
    ) -> Value<'v> {
        let html = self.document.html();
        let next = html.tree.get(self.node).and_then(step).map(|n| n.id());
        drop(html);
        match next {
            Some(id) => self.alloc(heap, id),
            None => Value::new_none(),
        }
    }

    fn nodes<'v>(
        &self,
        heap: Heap<'v>,
        function: &str,
        ids: Vec<NodeId>,
    ) -> starlark::Result<Value<'v>> {
        within_budget(
            &format!("`{function}`"),
            ids.len() as u64 * VALUE_OVERHEAD,
            heap,
        )?;
        Ok(heap.alloc(AllocList(ids.into_iter().map(|id| self.alloc(heap, id)))))
    }
}

static SOUP_METHODS: MethodsStatic = MethodsStatic::new("krm-bsoup-methods", soup_methods);

#[starlark_value(type = "SoupNode")]
impl<'v> StarlarkValue<'v> for SoupNode {
    fn get_methods() -> Option<&'static Methods> {
        Some(SOUP_METHODS.methods())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<SoupNode>()
            .is_some_and(|o| o.node == self.node && o.document.same(&self.document)))
    }
}

/// What `find` and `find_all` look for: a tag name (`""`: any) and attributes, each of whose
/// values must be one of the attribute's space-separated words.
struct Wanted {
    tag: String,
    attributes: Vec<(String, String)>,
}

impl Wanted {
    /// starlib's arguments: at most one positional tag name, dicts of attributes, keywords.
    fn from<'v>(
        function: &str,
        args: &[Value<'v>],
        kwargs: &SmallMap<String, Value<'v>>,
    ) -> starlark::Result<Wanted> {
        let text = |value: Value<'v>| {
            value.unpack_str().map(str::to_owned).ok_or_else(|| {
                error(
                    function,
                    format!("expected a string, not {}: {}", value.get_type(), value),
                )
            })
        };
        let mut tag = None;
        let mut attributes = Vec::new();
        for &arg in args {
            if let Some(name) = arg.unpack_str() {
                if tag.is_some() {
                    return Err(error(
                        function,
                        format!("only one tagName parameter is allowed, found {name}"),
                    ));
                }
                tag = Some(name.to_owned());
            } else if let Some(dict) = DictRef::from_value(arg) {
                for (key, value) in dict.iter() {
                    attributes.push((text(key)?, text(value)?));
                }
            } else {
                return Err(error(function, format!("invalid parameter {arg}")));
            }
        }
        for (key, value) in kwargs {
            attributes.push((key.clone(), text(*value)?));
        }
        Ok(Wanted {
            tag: tag.unwrap_or_default(),
            attributes,
        })
    }

    fn matches(&self, node: NodeRef<Node>) -> bool {
        let Some(element) = node.value().as_element() else {
            return false;
        };
        (self.tag.is_empty() || element.name() == self.tag)
            && self.attributes.iter().all(|(name, value)| {
                element
                    .attr(name)
                    .is_some_and(|words| words.split_whitespace().any(|w| w == value))
            })
    }
}

#[starlark_module]
fn bsoup_module(builder: &mut GlobalsBuilder) {
    /// The document's `<html>` element. Named, and its parameter too, as starlib names them.
    #[allow(non_snake_case)]
    fn parseHtml<'v>(
        #[starlark(require = pos)] htmlText: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let document = Document::parse("bsoup.parseHtml", htmlText, heap)?;
        let root = document.html().root_element().id();
        Ok(heap.alloc_simple(SoupNode {
            document,
            node: root,
        }))
    }
}

#[starlark_module]
fn soup_methods(builder: &mut MethodsBuilder) {
    /// The first descendant that matches, `None` when none does.
    fn find<'v>(
        this: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let soup = SoupNode::from(this, "find")?;
        let wanted = Wanted::from("find", &args.items, &kwargs)?;
        Ok(soup.relative(heap, |node| {
            node.descendants().skip(1).find(|d| wanted.matches(*d))
        }))
    }

    /// Every descendant that matches, in document order.
    fn find_all<'v>(
        this: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let soup = SoupNode::from(this, "find_all")?;
        let wanted = Wanted::from("find_all", &args.items, &kwargs)?;
        let html = soup.document.html();
        let found: Vec<NodeId> = html
            .tree
            .get(soup.node)
            .map(|node| {
                node.descendants()
                    .skip(1)
                    .filter(|d| wanted.matches(*d))
                    .map(|d| d.id())
                    .collect()
            })
            .unwrap_or_default();
        drop(html);
        soup.nodes(heap, "find_all", found)
    }

    /// The element's attributes (the first of each name).
    fn attrs<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let soup = SoupNode::from(this, "attrs")?;
        let html = soup.document.html();
        let attributes: Vec<(String, String)> = html
            .tree
            .get(soup.node)
            .and_then(|n| n.value().as_element())
            .map(|e| {
                e.attrs()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        drop(html);
        let bytes = attributes
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64 + 2 * VALUE_OVERHEAD)
            .sum();
        within_budget("`attrs`", bytes, heap)?;
        let mut dict = Vec::with_capacity(attributes.len());
        for (key, value) in attributes {
            if !dict.iter().any(|(k, _): &(String, String)| *k == key) {
                dict.push((key, value));
            }
        }
        Ok(heap.alloc(AllocDict(dict)))
    }

    /// The node's children, text included.
    fn contents<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let soup = SoupNode::from(this, "contents")?;
        let html = soup.document.html();
        let children: Vec<NodeId> = html
            .tree
            .get(soup.node)
            .map(|n| n.children().map(|c| c.id()).collect())
            .unwrap_or_default();
        drop(html);
        soup.nodes(heap, "contents", children)
    }

    /// The first child element named `tag_name`, `None` when there is none.
    fn child<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] tag_name: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let soup = SoupNode::from(this, "child")?;
        Ok(soup.relative(heap, |node| {
            node.children()
                .find(|c| c.value().as_element().is_some_and(|e| e.name() == tag_name))
        }))
    }

    fn parent<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Ok(SoupNode::from(this, "parent")?.relative(heap, |n| n.parent()))
    }

    /// The next node (text included), `None` at the end.
    fn next_sibling<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Ok(SoupNode::from(this, "next_sibling")?.relative(heap, |n| n.next_sibling()))
    }

    fn prev_sibling<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Ok(SoupNode::from(this, "prev_sibling")?.relative(heap, |n| n.prev_sibling()))
    }

    /// The first direct text that is not only spaces, `""` when there is none (starlib's soup
    /// `Text`).
    fn get_text<'v>(this: Value<'v>) -> starlark::Result<String> {
        let soup = SoupNode::from(this, "get_text")?;
        let html = soup.document.html();
        Ok(html
            .tree
            .get(soup.node)
            .and_then(|node| {
                node.children()
                    .filter_map(|c| c.value().as_text().map(|t| t.to_string()))
                    .find(|t| !t.chars().all(char::is_whitespace))
            })
            .unwrap_or_default())
    }
}
