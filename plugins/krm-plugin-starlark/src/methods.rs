//! String methods whose result can be far larger than their operands: `s.replace("", s)`,
//! `sep.join(l)` and `"{0}{0}".format(s)` build their text in one Rust buffer, so a program
//! doubling a string through them would ask the allocator for more than the machine has and
//! abort the process. starlark-rust offers no hook for method calls and no way to replace a
//! type's methods, so the program is routed instead: every `x.replace`, `x.join` and `x.format`
//! of its source becomes a call of a hidden global, `H(x, "replace")`, which gives the method
//! back, guarded when `x` is a string (its result is measured before it is built) and as the
//! interpreter has it otherwise. `getattr` is replaced the same way. Errors are located in the
//! program as written: [`Routed::resolve`] maps positions back.

use std::fmt;

use allocative::Allocative;
use starlark::codemap::{CodeMap, FileSpan, Pos, ResolvedFileSpan, Span};
use starlark::environment::{GlobalsBuilder, GlobalsStatic};
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_complex_value;
use starlark::starlark_module;
use starlark::syntax::AstModule;
use starlark::syntax::ast::{AstExpr, ExprP};
use starlark::values::{
    Coerce, Freeze, FrozenValue, Heap, NoSerialize, ProvidesStaticType, StarlarkPagable,
    StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
};
use starlark_derive::starlark_value;

use super::{amplify, heap_left, over_budget};

/// The string methods routed through their guards.
const GUARDED: [&str; 3] = ["format", "join", "replace"];

/// A program whose guarded method uses go through the global [`Routed::hidden`].
pub struct Routed {
    /// The source that runs.
    pub source: String,
    /// The name of the routing global: an identifier the program as written does not contain,
    /// so it can neither name nor shadow it.
    pub hidden: String,
    /// Where each change of the source is, in the routed and in the written source, in order.
    edits: Vec<Edit>,
    /// The program as written, to resolve positions in.
    written: CodeMap,
}

/// Routed bytes `routed..routed_end` stand for written bytes `written..written_end`.
struct Edit {
    routed: usize,
    routed_end: usize,
    written: usize,
    written_end: usize,
}

/// Routes the guarded method uses of `ast` (parsed from `source`), or `None` when it has none.
pub fn route(ast: &AstModule, name: &str, source: &str) -> Option<Routed> {
    let mut uses = Vec::new();
    ast.statement()
        .visit_expr(|expr| find_expr(expr, &mut uses));
    if uses.is_empty() {
        return None;
    }
    let mut hidden = String::from("__krm_guarded_method");
    while source.contains(&hidden) {
        hidden.push('_');
    }
    // (where, up to, text, receiver length): insertions at one place go outermost first.
    let mut changes: Vec<(usize, usize, String, usize)> = Vec::with_capacity(uses.len() * 3);
    for found in uses {
        let receiver = (
            found.receiver.begin().get() as usize,
            found.receiver.end().get() as usize,
        );
        let name_end = found.dot.end().get() as usize;
        let name_begin = name_end - found.method.len();
        let Some(dot) = dot_position(&source[receiver.1..name_begin]) else {
            continue;
        };
        let dot = receiver.1 + dot;
        // `x.name` becomes `H(x, "name")`; brackets around `x` stay where they are, and a line
        // break between the dot and the name stays a (continued) line, so line numbers hold.
        let breaks = "\\\n".repeat(source[dot..name_end].matches('\n').count());
        let length = receiver.1 - receiver.0;
        changes.push((receiver.0, receiver.0, format!("{hidden}("), length));
        changes.push((
            receiver.1,
            receiver.1,
            format!(", \"{}\")", found.method),
            length,
        ));
        changes.push((dot, name_end, breaks, length));
    }
    changes.sort_by(|a, b| {
        (a.0, a.1, std::cmp::Reverse(a.3)).cmp(&(b.0, b.1, std::cmp::Reverse(b.3)))
    });
    let mut routed = String::with_capacity(source.len() + changes.len() * (hidden.len() + 16));
    let mut edits = Vec::with_capacity(changes.len());
    let mut copied = 0;
    for (at, up_to, text, _) in changes {
        routed.push_str(&source[copied..at]);
        edits.push(Edit {
            routed: routed.len(),
            routed_end: routed.len() + text.len(),
            written: at,
            written_end: up_to,
        });
        routed.push_str(&text);
        copied = up_to;
    }
    routed.push_str(&source[copied..]);
    Some(Routed {
        source: routed,
        hidden,
        edits,
        written: CodeMap::new(name.to_owned(), source.to_owned()),
    })
}

/// Where the `.` is in the text between a receiver and its method name: brackets closing the
/// receiver, blanks, line continuations and comments may stand around it.
fn dot_position(between: &str) -> Option<usize> {
    let mut found = None;
    let mut offset = 0;
    for line in between.split_inclusive('\n') {
        let code = line.split('#').next().unwrap_or_default();
        if let Some(at) = code.rfind('.') {
            found = Some(offset + at);
        }
        offset += line.len();
    }
    found
}

/// A guarded method named on a receiver: the spans of `receiver.method` and of `receiver`
/// (without the brackets that may enclose it).
struct MethodUse {
    dot: Span,
    receiver: Span,
    method: &'static str,
}

fn find_expr(expr: &AstExpr, uses: &mut Vec<MethodUse>) {
    if let ExprP::Dot(receiver, name) = &expr.node
        && let Some(method) = GUARDED.iter().find(|&&m| m == name.node)
    {
        uses.push(MethodUse {
            dot: expr.span,
            receiver: receiver.span,
            method,
        });
    }
    expr.visit_expr(|child| find_expr(child, uses));
}

impl Routed {
    /// `span` as the program was written, when it is a span of the routed program.
    pub fn resolve(&self, span: &FileSpan) -> Option<ResolvedFileSpan> {
        if span.file.source() != self.source {
            return None;
        }
        let begin = self.written_position(span.span.begin().get() as usize);
        let end = self
            .written_position(span.span.end().get() as usize)
            .max(begin);
        let span = Span::new(Pos::new(begin as u32), Pos::new(end as u32));
        Some(self.written.file_span(span).resolve())
    }

    fn written_position(&self, routed: usize) -> usize {
        let before = self.edits.partition_point(|edit| edit.routed <= routed);
        match before.checked_sub(1).map(|i| &self.edits[i]) {
            None => routed,
            Some(edit) if routed < edit.routed_end => edit.written,
            Some(edit) => routed - edit.routed_end + edit.written_end,
        }
    }
}

/// The routing global, to be set in the program's module under [`Routed::hidden`].
pub fn routing_global() -> FrozenValue {
    ROUTING.function()
}

static ROUTING: GlobalsStatic = GlobalsStatic::new("krm-guarded-method", routing);
static GETATTR: GlobalsStatic = GlobalsStatic::new("krm-guarded-getattr", guarded_getattr);

/// Replaces `getattr` in the globals being built.
pub fn add_guarded_getattr(builder: &mut GlobalsBuilder) {
    GETATTR.populate(builder);
}

/// `receiver.method`, guarded when it is one of the string methods that can amplify.
fn attribute<'v>(
    receiver: Value<'v>,
    method: &str,
    heap: Heap<'v>,
) -> starlark::Result<Option<Value<'v>>> {
    let Some(found) = receiver.get_attr(method, heap)? else {
        return Ok(None);
    };
    match GUARDED.iter().find(|&&m| m == method) {
        Some(&method) if receiver.unpack_str().is_some() => {
            Ok(Some(heap.alloc(GuardedMethodGen {
                receiver,
                method: found,
                name: method.to_owned(),
            })))
        }
        _ => Ok(Some(found)),
    }
}

#[starlark_module]
fn routing(builder: &mut GlobalsBuilder) {
    /// `receiver.method` of the program as written.
    fn method<'v>(
        #[starlark(require = pos)] receiver: Value<'v>,
        #[starlark(require = pos)] method: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        match attribute(receiver, method, heap)? {
            Some(found) => Ok(found),
            None => receiver.get_attr_error(method, heap),
        }
    }
}

#[starlark_module]
fn guarded_getattr(builder: &mut GlobalsBuilder) {
    /// `getattr(a, attr[, default])`, with the string methods that can amplify guarded.
    fn getattr<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] attr: &str,
        #[starlark(require = pos)] default: Option<Value<'v>>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        match (attribute(a, attr, heap)?, default) {
            (Some(found), _) => Ok(found),
            (None, Some(default)) => Ok(default),
            (None, None) => a.get_attr_error(attr, heap),
        }
    }
}

/// A string's `replace`, `join` or `format`, which measures its result before building it.
#[derive(
    Clone,
    Debug,
    Trace,
    Coerce,
    Freeze,
    NoSerialize,
    ProvidesStaticType,
    Allocative,
    StarlarkPagable,
)]
#[repr(C)]
pub struct GuardedMethodGen<V: ValueLifetimeless> {
    receiver: V,
    method: V,
    #[freeze(identity)]
    name: String,
}

starlark_complex_value!(GuardedMethod);

impl<V: ValueLifetimeless> fmt::Display for GuardedMethodGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.method, f)
    }
}

#[starlark_value(type = "function")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for GuardedMethodGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        let positional: Vec<Value<'v>> = args.positions(heap)?.collect();
        let named = args.names_map()?;
        let named: Vec<(&str, Value<'v>)> = named
            .iter()
            .map(|(name, &value)| (name.as_str(), value))
            .collect();
        let receiver = self.receiver.to_value();
        if let Some(text) = receiver.unpack_str() {
            match self.name.as_str() {
                "replace" => check_replace(text, &positional, heap)?,
                "join" => check_join(text, positional.first().copied(), heap)?,
                _ => {
                    let arguments = positional.iter().chain(named.iter().map(|(_, v)| v));
                    amplify::check_format(text, arguments.copied(), heap)?
                }
            }
        }
        eval.eval_function(self.method.to_value(), &positional, &named)
    }
}

/// Refuses `text.replace(old, new[, count])` when its result would pass the heap budget.
fn check_replace<'v>(text: &str, arguments: &[Value<'v>], heap: Heap<'v>) -> starlark::Result<()> {
    let (Some(old), Some(new)) = (
        arguments.first().and_then(|v| v.unpack_str()),
        arguments.get(1).and_then(|v| v.unpack_str()),
    ) else {
        return Ok(());
    };
    if new.len() <= old.len() {
        return Ok(());
    }
    let limit = arguments
        .get(2)
        .and_then(|v| v.unpack_i32())
        .and_then(|count| u64::try_from(count).ok())
        .unwrap_or(u64::MAX);
    let places = if old.is_empty() {
        text.chars().count() as u64 + 1
    } else {
        text.matches(old).count() as u64
    };
    let growth = (new.len() - old.len()) as u64;
    let bytes = (text.len() as u64).saturating_add(places.min(limit).saturating_mul(growth));
    let left = heap_left(heap);
    if bytes > left {
        return Err(over_budget("`replace`", Some(bytes), left));
    }
    Ok(())
}

/// Refuses `separator.join(items)` when its result would pass the heap budget.
fn check_join<'v>(
    separator: &str,
    items: Option<Value<'v>>,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    let Some(items) = items else {
        return Ok(());
    };
    let left = heap_left(heap);
    let mut bytes: u64 = 0;
    for (i, item) in items.iterate(heap)?.enumerate() {
        let Some(item) = item.unpack_str() else {
            // The method itself reports the item that is not a string.
            return Ok(());
        };
        let step = if i == 0 { 0 } else { separator.len() as u64 };
        bytes = bytes.saturating_add(step + item.len() as u64);
        if bytes > left {
            return Err(over_budget("`join`", None, left));
        }
    }
    Ok(())
}
