//! Repetition (`"x" * n`, `[v] * n`, `(v,) * n`) is the one operator whose result can be
//! far larger than its operands: starlark-rust reserves the whole result before the heap budget
//! is checked again, so `("x" * 2**30) * 2**30` would ask the allocator for an exabyte and abort
//! the process. Every `*` of a program therefore calls [`MULTIPLY`], which refuses a repetition
//! larger than what is left of the heap budget before anything is allocated, then multiplies as
//! the operator does. `*=` is refused when the program is read (see [`unguarded_assignment`]).

use std::collections::HashMap;

use starlark::codemap::Span;
use starlark::environment::{GlobalsBuilder, GlobalsStatic};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::syntax::AstModule;
use starlark::syntax::ast::{AssignOp, AstStmt, StmtP};
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, Value};

/// The global every `*` calls. Not an identifier, so no program can name, shadow or redefine it.
pub const MULTIPLY: &str = "*";

/// Makes every `a * b` of `ast` a call of [`MULTIPLY`].
pub fn guard_multiplications(ast: &mut AstModule) {
    ast.replace_binary_operators(&HashMap::from([(MULTIPLY.to_owned(), MULTIPLY.to_owned())]));
}

/// The guarded `*`, on a heap that lives as long as the process (the globals refer to it).
static GUARDED_MULTIPLY: GlobalsStatic =
    GlobalsStatic::new("krm-guarded-multiply", guarded_multiply);

/// Adds [`MULTIPLY`] to the globals being built.
pub fn add_multiply(builder: &mut GlobalsBuilder) {
    builder.set(MULTIPLY, GUARDED_MULTIPLY.function());
}

/// Where the program first uses `*=` or `%=`, which cannot be routed through their guards (the
/// interpreter offers no rewrite of augmented assignments), and which of the two.
pub fn unguarded_assignment(ast: &AstModule) -> Option<(Span, &'static str)> {
    fn find(stmt: &AstStmt) -> Option<(Span, &'static str)> {
        match &stmt.node {
            StmtP::AssignModify(_, AssignOp::Multiply, _) => return Some((stmt.span, "*")),
            StmtP::AssignModify(_, AssignOp::Percent, _) => return Some((stmt.span, "%")),
            _ => {}
        }
        let mut found = None;
        stmt.visit_stmt(|child| {
            if found.is_none() {
                found = find(child);
            }
        });
        found
    }
    find(ast.statement())
}

/// Bytes a repetition `sequence * count` would hold, if `sequence` is a repeatable sequence.
fn repetition_bytes(sequence: Value, count: i32) -> Option<(&'static str, u64)> {
    let count = u64::try_from(count).unwrap_or(0);
    let value_bytes = std::mem::size_of::<Value>() as u64;
    let (kind, unit_bytes) = if let Some(text) = sequence.unpack_str() {
        ("string", text.len() as u64)
    } else if let Some(list) = ListRef::from_value(sequence) {
        ("list", list.len() as u64 * value_bytes)
    } else if let Some(tuple) = TupleRef::from_value(sequence) {
        ("tuple", tuple.len() as u64 * value_bytes)
    } else {
        return None;
    };
    Some((kind, unit_bytes.saturating_mul(count)))
}

fn check_repetition(lhs: Value, rhs: Value, heap: Heap) -> starlark::Result<()> {
    let repetition = match (lhs.unpack_i32(), rhs.unpack_i32()) {
        (_, Some(count)) => repetition_bytes(lhs, count),
        (Some(count), None) => repetition_bytes(rhs, count),
        (None, None) => None,
    };
    let Some((kind, bytes)) = repetition else {
        return Ok(());
    };
    let left = super::heap_left(heap);
    if bytes > left {
        return Err(super::over_budget(
            &format!("repeating a {kind}"),
            Some(bytes),
            left,
        ));
    }
    Ok(())
}

#[starlark_module]
fn guarded_multiply(builder: &mut GlobalsBuilder) {
    /// `lhs * rhs`, refused when it would repeat a sequence beyond the heap budget.
    fn multiply<'v>(
        #[starlark(require = pos)] lhs: Value<'v>,
        #[starlark(require = pos)] rhs: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        check_repetition(lhs, rhs, heap)?;
        lhs.mul(rhs, heap)
    }
}
