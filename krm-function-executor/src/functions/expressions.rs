//! Expression languages over the unit: `cel-validate` (a CEL expression judged per resource,
//! crate `cel`) and `yq` (an expression in the jq language over every document, crate
//! `jaq`). Both are checked before they run: a bad expression is an argument error naming
//! its parameter.
//!
//! Bounds, because an expression is hostile input like any other: its length and nesting;
//! for CEL, how deeply comprehensions (`all`, `exists`, `map`, ...) nest; for yq, the subset
//! of the language (no definitions, no `reduce`/`foreach`, no unbounded generators, no
//! environment or input access, repetition only by small literal factors), the number and
//! size of the results; for both, a time budget checked between resources and results.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Arena, File, Loader, lex::StrPart};
use jaq_core::path::Part;
use jaq_json::Val;
use krm_plugin_api::quoted;
use serde_json::Value;

use crate::api::{DataType, OutputType, ValidationResult, YamlPayload};
use crate::args::Arguments;
use crate::functions::definition::{ALL_TOOLCHAINS, Definition, FunctionKind, Options};
use crate::functions::{Call, FunctionError, Outcome, Output};
use crate::signature::ParameterBuilder;
use crate::yaml::{Doc, Kind, MAX_DEPTH, New, NodeId, Style, block_entries, block_items};

/// Expressions longer than this are refused.
pub const MAX_EXPRESSION_BYTES: usize = 4 * 1024;
/// How deeply a CEL expression may nest (the parser's recursion limit).
const MAX_CEL_DEPTH: u16 = 32;
/// How deeply CEL comprehensions may nest: each level multiplies the work by the size of
/// the list it walks.
const MAX_COMPREHENSION_NESTING: usize = 2;
/// How deeply brackets may nest in a yq expression.
const MAX_YQ_NESTING: usize = 32;
/// The largest literal factor a yq `*` may have (string and array repetition).
const MAX_YQ_FACTOR: f64 = 1000.0;
/// yq results beyond this count are refused.
const MAX_YQ_RESULTS: usize = 100_000;
/// yq output beyond this size is refused.
const MAX_YQ_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// Time one invocation may spend evaluating, checked between resources (CEL) and results
/// (yq).
const EVALUATION_BUDGET: Duration = Duration::from_secs(10);

fn check_length(expression: &str) -> Result<(), String> {
    if expression.len() > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "the expression is {} bytes, more than the limit of {MAX_EXPRESSION_BYTES}",
            expression.len()
        ));
    }
    Ok(())
}

fn over_budget(started: Instant) -> Result<(), String> {
    if started.elapsed() > EVALUATION_BUDGET {
        return Err(format!(
            "evaluation took more than {} s; stopped",
            EVALUATION_BUDGET.as_secs()
        ));
    }
    Ok(())
}

// ---- CEL ----

const CEL_PARAMETER: &str = "validation-expr";

/// Parses a CEL expression within the bounds.
fn cel_expression(expression: &str) -> Result<cel::IdedExpr, String> {
    check_length(expression)?;
    let parsed = cel::Env::stdlib()
        .parser()
        .max_recursion_depth(MAX_CEL_DEPTH)
        .parse(expression)
        .map_err(|e| {
            format!(
                "{} does not parse: {}",
                quoted(expression),
                parse_errors(&e)
            )
        })?;
    let nesting = comprehension_nesting(&parsed);
    if nesting > MAX_COMPREHENSION_NESTING {
        return Err(format!(
            "{} nests {nesting} comprehensions (all, exists, exists_one, map, filter), more than the limit of {MAX_COMPREHENSION_NESTING}",
            quoted(expression)
        ));
    }
    if not_boolean(&parsed) {
        return Err(format!(
            "expression {} does not evaluate to a boolean",
            quoted(expression)
        ));
    }
    Ok(parsed)
}

/// Whether ConfigHub's CEL type checker, with `r` declared dynamic, gives `expr` a type that
/// is not exactly bool, which its genericFnCELValidate refuses before evaluating: `r` or a
/// field or item reached from it (dyn), `dyn()`, a literal other than a boolean, a list or
/// map, arithmetic and the functions of other types, `map`/`filter`, or a conditional with
/// such a branch. Anything this cannot tell is left to the evaluation, which refuses a value
/// that is not a boolean.
fn not_boolean(expr: &cel::IdedExpr) -> bool {
    use cel::common::ast::{Expr, LiteralValue, operators};
    let from_r = |mut expr: &cel::IdedExpr| loop {
        match &expr.expr {
            Expr::Ident(name) => return name == "r",
            Expr::Select(select) if !select.test => expr = &select.operand,
            Expr::Call(call) if call.func_name == operators::INDEX => match call.args.first() {
                Some(operand) => expr = operand,
                None => return false,
            },
            _ => return false,
        }
    };
    match &expr.expr {
        Expr::Literal(literal) => !matches!(literal, LiteralValue::Boolean(_)),
        Expr::List(_) | Expr::Map(_) => true,
        Expr::Comprehension(c) => matches!(c.accu_init.expr, Expr::List(_)),
        Expr::Call(call) => match call.func_name.as_str() {
            operators::CONDITIONAL => call.args.iter().skip(1).any(not_boolean),
            operators::ADD
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE
            | "size"
            | "int"
            | "uint"
            | "double"
            | "string"
            | "bytes"
            | "type"
            | "dyn" => true,
            _ => from_r(expr),
        },
        Expr::Ident(_) | Expr::Select(_) => from_r(expr),
        Expr::Struct(_) | Expr::Unspecified => false,
    }
}

/// The parser's errors on one line each joined by `; `, without the source excerpt it
/// draws under each (the expression is quoted already).
fn parse_errors(errors: &cel::ParseErrors) -> String {
    errors
        .to_string()
        .lines()
        .filter(|line| !line.starts_with('|'))
        .map(|line| {
            let line = line.trim();
            match line.strip_prefix("ERROR: <input>:") {
                Some(located) => format!("at {located}"),
                None => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// How deeply comprehensions nest in `expr`.
fn comprehension_nesting(expr: &cel::IdedExpr) -> usize {
    use cel::common::ast::{EntryExpr, Expr};
    let deepest = |exprs: &mut dyn Iterator<Item = &cel::IdedExpr>| {
        exprs.map(comprehension_nesting).max().unwrap_or(0)
    };
    let entries = |entries: &[cel::common::ast::IdedEntryExpr]| {
        entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::StructField(field) => vec![&field.value],
                EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
            })
            .map(comprehension_nesting)
            .max()
            .unwrap_or(0)
    };
    match &expr.expr {
        Expr::Comprehension(c) => {
            let inner = [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ];
            1 + deepest(&mut inner.into_iter())
        }
        Expr::Call(call) => deepest(&mut call.target.iter().map(|t| &**t).chain(&call.args)),
        Expr::List(list) => deepest(&mut list.elements.iter()),
        Expr::Map(map) => entries(&map.entries),
        Expr::Struct(s) => entries(&s.entries),
        Expr::Select(select) => comprehension_nesting(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

/// A resource as a CEL value. Converted by hand rather than through serde: with serde_json's
/// `arbitrary_precision` (which another crate of the build may switch on) numbers serialize
/// as maps.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        // Every number is a double, as in ConfigHub's genericFnCELValidate, which reads each
        // resource through sigs.k8s.io/yaml into Go's float64.
        Value::Number(n) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(entries) => entries
            .iter()
            .map(|(key, value)| (key.clone(), to_cel(value)))
            .collect::<HashMap<String, cel::Value>>()
            .into(),
    }
}

/// `cel-validate`'s expression, compiled before the call: its problem, if any.
fn check_cel(arguments: &Arguments) -> Vec<String> {
    let expression = arguments.str(CEL_PARAMETER).unwrap_or_default();
    match cel_expression(expression) {
        Ok(_) => Vec::new(),
        Err(problem) => vec![format!("parameter {CEL_PARAMETER}: {problem}")],
    }
}

/// `cel-validate`: true when the expression holds for every resource (bound to `r`); the
/// details name each resource that fails it, as ConfigHub's do. As in ConfigHub's
/// genericFnCELValidate, a resource on which the expression cannot be evaluated (a missing
/// key, a type error) fails the invocation, every such resource named; so does an expression
/// that evaluates to something other than a boolean.
fn cel_validate(call: &Call) -> Result<Outcome, FunctionError> {
    let source = call.arguments.str(CEL_PARAMETER).unwrap_or_default();
    let expression =
        cel_expression(source).map_err(|e| format!("parameter {CEL_PARAMETER}: {e}"))?;
    let root = cel::Context::default();
    let started = Instant::now();
    let mut details = Vec::new();
    let mut unevaluated = Vec::new();
    let source = quoted(source).bounded();
    for element in &call.unit.elements {
        over_budget(started)?;
        call.stop_if_cancelled()?;
        let name = match element.checked_info() {
            Ok(info) => quoted(&info.resource_name).bounded().into_owned(),
            Err(_) => "unknown".to_owned(),
        };
        let resource = to_cel(&call.unit.doc.to_json(element.root));
        let mut scope = root.new_inner_scope();
        scope.add_variable_from_value("r", resource);
        match cel::Value::resolve(&expression, &scope) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => details.push(format!(
                "resource {name} failed validation expression {source}"
            )),
            Ok(other) => {
                return Err(format!(
                    "expression {source} does not evaluate to a boolean (on resource {name}: {:?})",
                    other.type_of()
                )
                .into());
            }
            // The interpreter's error may print the whole resource.
            Err(e) => unevaluated.push(format!(
                "validation expression {source} resulted in error on resource {name}: {}",
                quoted(&e.to_string()).bounded()
            )),
        }
    }
    if !unevaluated.is_empty() {
        return Err(unevaluated.join("; ").into());
    }
    let result = if details.is_empty() {
        ValidationResult::passed()
    } else {
        ValidationResult::failed(details)
    };
    Ok(Outcome::output(Output::Validation(result)))
}

// ---- yq ----

const YQ_PARAMETER: &str = "yq-expression";

/// Builtins a yq expression may call: jq's, less those that loop without bound (`range`,
/// `repeat`, `while`, `until`, `recurse` with arguments, `combinations`), read the
/// environment or other inputs (`env`, `input`, `inputs`, `input_filename`), write
/// (`debug`, `stderr`) or stop the process (`halt`, `halt_error`).
const YQ_BUILTINS: &[&str] = &[
    // jaq parses the literals as calls.
    "null",
    "true",
    "false",
    "IN",
    "INDEX",
    "abs",
    "add",
    "all",
    "any",
    "arrays",
    "ascii",
    "ascii_downcase",
    "ascii_upcase",
    "booleans",
    "capture",
    "ceil",
    "contains",
    "del",
    "delpaths",
    "empty",
    "endswith",
    "error",
    "explode",
    "first",
    "flatten",
    "floor",
    "from_entries",
    "fromjson",
    "getpath",
    "group_by",
    "has",
    "implode",
    "in",
    "index",
    "indices",
    "inside",
    "isempty",
    "isinfinite",
    "isnan",
    "isnormal",
    "iterables",
    "join",
    "keys",
    "keys_unsorted",
    "last",
    "leaf_paths",
    "length",
    "limit",
    "ltrimstr",
    "map",
    "map_values",
    "match",
    "max",
    "max_by",
    "min",
    "min_by",
    "not",
    "nth",
    "nulls",
    "numbers",
    "objects",
    "path",
    "paths",
    "pick",
    "reverse",
    "rindex",
    "round",
    "rtrimstr",
    "scalars",
    "scan",
    "select",
    "setpath",
    "sort",
    "sort_by",
    "split",
    "splits",
    "sqrt",
    "startswith",
    "strings",
    "sub",
    "gsub",
    "test",
    "to_entries",
    "toarray",
    "tojson",
    "tonumber",
    "tostring",
    "transpose",
    "trim",
    "ltrim",
    "rtrim",
    "type",
    "unique",
    "unique_by",
    "utf8bytelength",
    "values",
    "walk",
    "with_entries",
];

/// Checks a yq expression against the bounds and the supported subset.
fn vet_yq(expression: &str) -> Result<(), String> {
    check_length(expression)?;
    let mut depth = 0usize;
    let mut deepest = 0usize;
    for c in expression.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_YQ_NESTING {
        return Err(format!(
            "brackets nest {deepest} deep, more than the limit of {MAX_YQ_NESTING}"
        ));
    }
    let term = jaq_core::load::parse(expression, |p| p.term())
        .ok_or_else(|| format!("{} does not parse as a jq expression", quoted(expression)))?;
    let mut problems = Vec::new();
    vet_term(&term, &mut problems);
    problems.dedup();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", quoted(expression), problems.join("; ")))
    }
}

fn small_literal_factor(term: &Term<&str>) -> bool {
    match term {
        Term::Num(n) => n.parse::<f64>().is_ok_and(|n| n.abs() <= MAX_YQ_FACTOR),
        Term::Neg(inner) => small_literal_factor(inner),
        // `*` on objects is a deep merge.
        Term::Obj(_) => true,
        _ => false,
    }
}

fn vet_pattern(pattern: &Pattern<&str>, problems: &mut Vec<String>) {
    match pattern {
        Pattern::Var(_) => {}
        Pattern::Arr(items) => items.iter().for_each(|p| vet_pattern(p, problems)),
        Pattern::Obj(entries) => {
            for (key, value) in entries {
                vet_term(key, problems);
                vet_pattern(value, problems);
            }
        }
    }
}

fn vet_term(term: &Term<&str>, problems: &mut Vec<String>) {
    match term {
        Term::Id | Term::Recurse | Term::Num(_) | Term::Break(_) => {}
        Term::Str(_, parts) => {
            for part in parts {
                if let StrPart::Term(inner) = part {
                    vet_term(inner, problems);
                }
            }
        }
        Term::Arr(inner) => inner.iter().for_each(|t| vet_term(t, problems)),
        Term::Obj(entries) => {
            for (key, value) in entries {
                vet_term(key, problems);
                value.iter().for_each(|t| vet_term(t, problems));
            }
        }
        Term::Neg(inner) | Term::Label(_, inner) => vet_term(inner, problems),
        Term::BinOp(left, op, right) => {
            let multiplies = matches!(
                op,
                BinaryOp::Math(jaq_core::ops::Math::Mul)
                    | BinaryOp::UpdateMath(jaq_core::ops::Math::Mul)
            );
            if multiplies && !small_literal_factor(left) && !small_literal_factor(right) {
                problems.push(format!(
                    "`*` needs a number literal of at most {MAX_YQ_FACTOR} or an object literal on one side"
                ));
            }
            if let BinaryOp::Pipe(Some(pattern)) = op {
                vet_pattern(pattern, problems);
            }
            vet_term(left, problems);
            vet_term(right, problems);
        }
        Term::Fold(..) => problems.push("reduce and foreach are not supported".into()),
        Term::Def(_, rest) => {
            problems.push("definitions (def) are not supported".into());
            vet_term(rest, problems);
        }
        Term::TryCatch(body, catch) => {
            vet_term(body, problems);
            catch.iter().for_each(|t| vet_term(t, problems));
        }
        Term::IfThenElse(branches, otherwise) => {
            for (condition, then) in branches {
                vet_term(condition, problems);
                vet_term(then, problems);
            }
            otherwise.iter().for_each(|t| vet_term(t, problems));
        }
        Term::Call(name, arguments) => {
            if !YQ_BUILTINS.contains(name) {
                problems.push(format!(
                    "{name}/{} is not supported (yq-specific operators and jq's unbounded, environment and input builtins are not available)",
                    arguments.len()
                ));
            }
            arguments.iter().for_each(|t| vet_term(t, problems));
        }
        Term::Var(name) => {
            if *name == "$ENV" {
                problems.push("$ENV is not available".into());
            }
        }
        Term::Path(base, path) => {
            vet_term(base, problems);
            for (part, _) in &path.0 {
                match part {
                    Part::Index(index) => vet_term(index, problems),
                    Part::Range(from, to) => {
                        from.iter().chain(to).for_each(|t| vet_term(t, problems))
                    }
                }
            }
        }
    }
}

/// A document node as a jq value, keys in document order.
fn to_val(doc: &Doc, id: NodeId, depth: usize) -> Val {
    if depth > MAX_DEPTH {
        return Val::Null;
    }
    let id = doc.deref(id);
    match &doc.node(id).kind {
        Kind::Scalar {
            style: Style::Plain,
            tagged: false,
            ..
        } => from_json(&doc.to_json(id)),
        Kind::Scalar { .. } => {
            Val::utf8_str(doc.str(id).unwrap_or_default().to_owned().into_bytes())
        }
        Kind::Map(_) => {
            let mut map = jaq_json::Map::default();
            for &(key, value) in doc.entries(id) {
                let key = doc.str(key).unwrap_or_default().to_owned();
                map.insert(
                    Val::utf8_str(key.into_bytes()),
                    to_val(doc, value, depth + 1),
                );
            }
            Val::obj(map)
        }
        Kind::Seq(_) => doc
            .items(id)
            .iter()
            .map(|&i| to_val(doc, i, depth + 1))
            .collect(),
        Kind::Alias(_) => Val::Null,
    }
}

fn from_json(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Val::Num(jaq_json::Num::from_integral(i)),
            None => Val::Num(jaq_json::Num::Float(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => Val::utf8_str(s.clone().into_bytes()),
        Value::Array(items) => items.iter().map(from_json).collect(),
        Value::Object(entries) => {
            let mut map = jaq_json::Map::default();
            for (key, value) in entries {
                map.insert(Val::utf8_str(key.clone().into_bytes()), from_json(value));
            }
            Val::obj(map)
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A jq value as new YAML content.
fn to_new(value: &Val) -> New {
    match value {
        Val::TStr(s) | Val::BStr(s) => New::Str(text(s)),
        Val::Arr(items) => New::Seq(items.iter().map(to_new).collect()),
        Val::Obj(entries) => New::Map(
            entries
                .iter()
                .map(|(key, value)| {
                    let key = match key {
                        Val::TStr(s) | Val::BStr(s) => text(s),
                        other => other.to_string(),
                    };
                    (key, to_new(value))
                })
                .collect(),
        ),
        // null, booleans and numbers print as jq prints them, which is plain YAML.
        scalar => New::Plain(scalar.to_string()),
    }
}

/// One result as a YAML document, ending in a newline.
fn render_yaml(value: &Val, out: &mut String) {
    match to_new(value) {
        New::Map(entries) if !entries.is_empty() => block_entries(&entries, 0, out),
        New::Seq(items) if !items.is_empty() => block_items(&items, 0, out),
        other => {
            other.flow_plain(out);
            out.push('\n');
        }
    }
}

/// `yq`'s expression, compiled before the call: its problem, if any.
fn check_yq(arguments: &Arguments) -> Vec<String> {
    let expression = arguments.str(YQ_PARAMETER).unwrap_or_default();
    match vet_yq(expression).and_then(|()| compile_yq(expression).map(drop)) {
        Ok(()) => Vec::new(),
        Err(problem) => vec![format!("parameter {YQ_PARAMETER}: {problem}")],
    }
}

/// `yq`: the expression's results over each document (as `yq eval-all` evaluates them,
/// document by document), rendered as YAML; the results of different documents are
/// separated by `---`.
fn yq(call: &Call) -> Result<Outcome, FunctionError> {
    let expression = call.arguments.str(YQ_PARAMETER).unwrap_or_default();
    let filter = vet_yq(expression)
        .and_then(|()| compile_yq(expression))
        .map_err(|e| format!("parameter {YQ_PARAMETER}: {e}"))?;
    let started = Instant::now();
    let mut out = String::new();
    let mut results = 0usize;
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        let input = to_val(&call.unit.doc, element.root, 0);
        let context = jaq_core::Ctx::<jaq_core::data::JustLut<Val>>::new(
            &filter.lut,
            jaq_core::Vars::new([]),
        );
        let mut first_of_document = true;
        for result in filter.id.run((context, input)).map(jaq_core::unwrap_valr) {
            over_budget(started)?;
            call.stop_if_cancelled()?;
            // jaq's error prints the value it failed on, which may be the whole document.
            let value = result.map_err(|e| {
                format!(
                    "yq expression evaluation failed: {}",
                    quoted(&e.to_string()).bounded()
                )
            })?;
            results += 1;
            if results > MAX_YQ_RESULTS {
                return Err(format!("more than {MAX_YQ_RESULTS} results; stopped").into());
            }
            if first_of_document && !out.is_empty() {
                out.push_str("---\n");
            }
            first_of_document = false;
            render_yaml(&value, &mut out);
            if out.len() > MAX_YQ_OUTPUT_BYTES {
                return Err(format!(
                    "the output is more than {MAX_YQ_OUTPUT_BYTES} bytes; stopped"
                )
                .into());
            }
        }
    }
    let payload = serde_json::to_value(YamlPayload { payload: out }).map_err(|e| e.to_string())?;
    Ok(Outcome::output(Output::Other(OutputType::Yaml, payload)))
}

type YqFilter = jaq_core::compile::Filter<jaq_core::Native<jaq_core::data::JustLut<Val>>>;

fn compile_yq(expression: &str) -> Result<YqFilter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(
            &arena,
            File {
                code: expression,
                path: (),
            },
        )
        .map_err(|errors| {
            format!(
                "{} does not parse ({} errors)",
                quoted(expression),
                errors.len()
            )
        })?;
    jaq_core::Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| {
            let names: Vec<String> = errors
                .iter()
                .flat_map(|(_, errors)| errors.iter().map(|(name, _)| (*name).to_owned()))
                .collect();
            format!(
                "{} does not compile: undefined {}",
                quoted(expression),
                names.join(", ")
            )
        })
}

pub static CEL_VALIDATE: Definition = Definition {
    name: "cel-validate",
    description: "Returns true if the validation expression (CEL) evaluates to true for all resources; the resource is r",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                CEL_PARAMETER,
                DataType::Cel,
                "CEL (Common Expression Language) expression to validate each resource, which is r (see https://cel.dev/)",
            )
            .example("r.kind != 'Deployment' || r.spec.replicas >= 2"),
        ]
    },
    kind: FunctionKind::Validating {
        result: "passed",
        description: "True if validation passed, false otherwise",
    },
    toolchains: ALL_TOOLCHAINS,
    run: cel_validate,
    options: Options {
        check: Some(check_cel),
        ..Options::DEFAULT
    },
};

pub static YQ: Definition = Definition {
    name: "yq",
    description: "Returns the result of running yq with the specified expression on the configuration data (the jq-compatible subset)",
    parameters: |_| {
        vec![
            ParameterBuilder::new(YQ_PARAMETER, DataType::String, "yq expression")
                .example(".spec.replicas"),
        ]
    },
    kind: FunctionKind::Readonly {
        result: "yq output",
        description: "Output from yq",
        output: OutputType::Yaml,
    },
    toolchains: ALL_TOOLCHAINS,
    run: yq,
    options: Options {
        check: Some(check_yq),
        ..Options::DEFAULT
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yq_takes_the_jq_compatible_subset() {
        for accepted in [
            ".spec.replicas",
            "select(.kind == \"Deployment\") | .metadata.name",
            ".spec.replicas * 2",
            ". * {\"metadata\": {\"labels\": {\"a\": \"b\"}}}",
            "[.. | strings] | length",
            ".metadata.labels | to_entries | map(.key) | join(\",\")",
            "try error(\"x\") catch .",
            ".[\"metadata\"] as $m | $m.name",
        ] {
            assert_eq!(vet_yq(accepted), Ok(()), "{accepted}");
        }
    }

    #[test]
    fn yq_refuses_what_could_run_without_bound_or_read_the_environment() {
        for (refused, why) in [
            ("def f: f; f", "def"),
            ("reduce .[] as $x (0; . + $x)", "reduce"),
            ("[limit(5; repeat(.))]", "repeat/1"),
            ("range(100000000)", "range/1"),
            ("recurse(.[])", "recurse/1"),
            ("env.HOME", "env/0"),
            ("$ENV.HOME", "$ENV"),
            ("input", "input/0"),
            (".metadata.name * .spec.replicas", "`*`"),
            (".metadata.name * 100000", "`*`"),
            ("debug", "debug/0"),
        ] {
            let problem = vet_yq(refused).expect_err(refused);
            assert!(problem.contains(why), "{refused}: {problem}");
        }
    }

    #[test]
    fn long_and_deeply_nested_expressions_are_refused() {
        let long = format!(".a{}", " | .b".repeat(MAX_EXPRESSION_BYTES));
        assert!(vet_yq(&long).unwrap_err().contains("bytes"));
        assert!(cel_expression(&long).unwrap_err().contains("bytes"));
        let nested = format!("{}.{}", "(".repeat(40), ")".repeat(40));
        assert!(vet_yq(&nested).unwrap_err().contains("nest"));
        let nested = format!("{}true{}", "(".repeat(60), ")".repeat(60));
        assert!(cel_expression(&nested).is_err());
    }

    #[test]
    fn cel_comprehensions_nest_at_most_twice() {
        assert!(cel_expression("r.a.all(x, r.b.exists(y, x == y))").is_ok());
        let problem =
            cel_expression("r.a.all(x, r.b.exists(y, [y].map(z, z == x).size() > 0))").unwrap_err();
        assert!(problem.contains("nests 3 comprehensions"), "{problem}");
    }

    #[test]
    fn cel_expressions_typed_other_than_bool_are_refused_before_evaluating() {
        for accepted in [
            "r.spec.replicas > 1",
            "r.kind != 'Deployment' || r.spec.replicas >= 2",
            "has(r.spec)",
            "!has(r.spec) ? true : r.spec.replicas > 0",
            "r.metadata.name.startsWith('w')",
            "'web' in r.metadata.labels",
            "r.spec.template.spec.containers.all(c, c.image != '')",
            "r.a.exists_one(x, x == 1)",
            "[1, 2].map(x, x > 1)[0]",
            "bool(r.flag)",
            "true",
        ] {
            assert!(cel_expression(accepted).is_ok(), "{accepted}");
        }
        for refused in [
            "r",
            "r.spec.paused",
            "r.spec.containers[0]",
            "dyn(r.spec.paused)",
            "has(r.spec) ? r.spec.paused : false",
            "r.a.map(x, x > 1)",
            "size(r.a)",
            "r.a + 1",
            "'x'",
            "[true]",
        ] {
            let problem = cel_expression(refused).expect_err(refused);
            assert!(
                problem.contains("does not evaluate to a boolean"),
                "{refused}: {problem}"
            );
        }
    }

    #[test]
    fn resources_reach_cel_as_confighub_reads_them() {
        let resource = serde_json::json!({"n": 2, "f": 1.5, "s": "x", "l": [true, null]});
        let mut context = cel::Context::default();
        context.add_variable_from_value("r", to_cel(&resource));
        let holds = |text: &str| cel::Value::resolve(&cel_expression(text).unwrap(), &context);
        // Numbers are doubles (Go's float64 behind sigs.k8s.io/yaml), compared across types.
        assert_eq!(
            holds(
                "type(r.n) == double && r.n == 2 && r.n < 3 && r.f == 1.5 && r.s == 'x' && r.l[0] && r.l[1] == null"
            ),
            Ok(cel::Value::Bool(true))
        );
        assert!(holds("r.n % 2 == 0").is_err());
    }

    #[test]
    fn yq_keeps_key_order_and_renders_yaml() {
        let doc = Doc::parse("b: 1\na: [x, {c: null}]\ns: 'it''s'\n").unwrap();
        let mut out = String::new();
        render_yaml(&to_val(&doc, doc.roots[0], 0), &mut out);
        assert_eq!(out, "b: 1\na:\n- x\n- c: null\ns: it's\n");
    }
}
