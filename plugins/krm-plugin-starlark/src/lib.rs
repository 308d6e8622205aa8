//! `starlark`: the kpt catalog's starlark function (`functions/go/starlark`), a plugin of its
//! own so that a call of another catalog function never maps the interpreter. It answers to
//! images as the `builtin` plugin's functions do (`krm_catalog_function`).
//!
//! The function runs the Starlark program of a `StarlarkRun`
//! (or of a ConfigMap's `data.source`) over the items, with facebook's starlark-rust
//! interpreter. The program sees `ctx.resource_list` as plain dicts and lists and changes them
//! in place; afterwards its items are compared with the input and only what changed is edited
//! in the input text (see [`apply`]), so everything else keeps its bytes, comments included.
//!
//! The program runs sandboxed: no builtin reaches files, the network, processes, the clock or
//! the environment. It is bounded by a step budget, a heap budget, a call-depth limit and a wall
//! clock budget, and stops as soon as the call is cancelled or its deadline passes.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use krm_catalog_function::{Catalog, Config};
use krm_plugin_api::{
    BuildContext, ConfigError, EvalError, EvalResponse, Parameter, ParameterType, Plugin,
};
use starlark::codemap::{FileSpan, FileSpanRef, ResolvedFileSpan};
use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::{BeforeStmtFunc, BeforeStmtFuncDyn, Evaluator};
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::dict::AllocDict;
use starlark::values::list::AllocList;
use starlark::values::structs::AllocStruct;

use krm_catalog_function::rl::{FnResult, ResourceList, split_api_version};
use krm_catalog_function::{Ctx, Exit, Function, Interruption, param};
use krm_yaml_edit::{Editor, NodeId, Stop};

mod amplify;
mod apply;
mod binary;
mod convert;
mod csv;
mod geo;
mod html;
mod library;
mod methods;
mod open_api;
mod repeat;
mod zipfile;

pub struct StarlarkPlugin;

impl Plugin for StarlarkPlugin {
    const NAME: &'static str = "starlark";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "the kpt catalog's starlark function: a sandboxed Starlark program edits the items";
    type Config = Config;
    type Evaluator = Catalog;

    fn build(config: Config, context: &BuildContext) -> Result<Catalog, ConfigError> {
        Catalog::build(Self::NAME, FUNCTIONS, config, context)
    }
}

krm_plugin_api::export_plugin!(StarlarkPlugin);

/// Its calls run in workers at their memory limit, where starlark-rust's maps (starlark_map's
/// `Vec2`) would write through the null pointer of a failed allocation.
#[global_allocator]
static ALLOCATOR: krm_plugin_api::AbortOnFailedAllocation = krm_plugin_api::AbortOnFailedAllocation;

/// The functions this plugin serves.
const FUNCTIONS: &[&Function] = &[&FUNCTION];

/// Runs the function named `name` over `input`, for tests and benchmarks.
#[doc(hidden)]
pub fn run_function(name: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
    krm_catalog_function::run_named(FUNCTIONS, name, input)
}

static FUNCTION: Function = Function {
    name: "starlark",
    description: "Run a Starlark program (StarlarkRun `source`, or ConfigMap `data.source`) \
                  that edits, adds or removes items and reports results; sandboxed and bounded.",
    tags: &[
        (
            "v0.5.1",
            "catalog release this reproduces (StarlarkRun and ConfigMap forms, load() names, \
             krmfn matching, error results with exit 1)",
        ),
        ("v0.5", "minor line of v0.5.1"),
    ],
    parameters,
    changes: &["items (whatever the program changes)", "results"],
    run,
    legacy_results: false,
    pure: true,
};

/// Steps (function calls and loop iterations) a program may take.
const MAX_STEPS: u64 = 20_000_000;
/// Bytes the program's values may occupy on the Starlark heap, inputs included.
const MAX_HEAP_BYTES: usize = 256 << 20;
/// Nested function calls (recursion depth).
const MAX_CALL_DEPTH: usize = 1000;
/// Wall-clock time a program may run when the caller set no earlier deadline.
const MAX_RUN_TIME: Duration = Duration::from_secs(30);
/// The interpreter recurses on the native stack; its own thread gets room for the call depth.
const EVAL_STACK_BYTES: usize = 256 << 20;
/// What did not fit when the interpreter's thread could not start.
const INTERPRETER_STACK: &str = "the Starlark interpreter's 256 MiB stack";
/// `print` output kept for the log; the rest is counted, not kept.
const MAX_LOG_BYTES: usize = 1 << 20;

const DEFAULT_PROGRAM_NAME: &str = "starlark-function-run";

fn parameters() -> Vec<Parameter> {
    let mut source = param(
        "source",
        ParameterType::String,
        true,
        "The Starlark program (StarlarkRun `source`, or ConfigMap `data.source`).",
    );
    source.example = Some(
        "for r in ctx.resource_list[\"items\"]:\n  r[\"metadata\"][\"namespace\"] = \"prod\""
            .into(),
    );
    let params = param(
        "params",
        ParameterType::Object,
        false,
        "Values for the program, read as ctx.resource_list[\"functionConfig\"][\"params\"] \
         (ConfigMap: the other `data` keys, under [\"data\"]).",
    );
    vec![source, params]
}

/// What the functionConfig asks for.
struct Program {
    name: String,
    source: String,
}

/// Reads a `StarlarkRun` (any version of `fn.kpt.dev`) or a core `ConfigMap`, as the catalog's
/// `StarlarkRun.Config` does, with its messages.
fn program(ctx: &Ctx) -> Result<Program, String> {
    let Some((api_version, kind)) = ctx.config_gvk() else {
        return Err("FunctionConfig is missing. Expect `ConfigMap` or `StarlarkRun`".into());
    };
    let doc = ctx.doc();
    let fc = ctx.rl.function_config.unwrap_or_default();
    let group = split_api_version(api_version).0;
    let source = match (group, kind) {
        ("", "ConfigMap") => doc.get_str(fc, &["data", "source"]).map(str::to_owned),
        ("fn.kpt.dev", "StarlarkRun") => match doc.get(fc, "source") {
            None => None,
            Some(node) if doc.is_null(node) => None,
            Some(node) => match doc.str(node) {
                Some(text) => Some(text.to_owned()),
                None => {
                    return Err("unable to read StarlarkRun: `source` must be a string".into());
                }
            },
        },
        _ => {
            let got = match split_api_version(api_version) {
                ("", version) => format!("/{version}, Kind={kind}"),
                (group, version) => format!("{group}/{version}, Kind={kind}"),
            };
            return Err(format!(
                "`functionConfig` must be either /v1, Kind=ConfigMap or \
                 fn.kpt.dev/v1alpha1, Kind=StarlarkRun, but we got: {got}"
            ));
        }
    };
    if group == "fn.kpt.dev"
        && let Some(params) = doc.get(fc, "params")
        && !doc.is_null(params)
        && !doc.is_map(params)
    {
        return Err("unable to read StarlarkRun: `params` must be a map".into());
    }
    let source = source.unwrap_or_default();
    if source.is_empty() {
        return Err("`source` must not be empty".into());
    }
    let name = doc
        .get_str(fc, &["metadata", "name"])
        .filter(|name| !name.is_empty())
        .unwrap_or(DEFAULT_PROGRAM_NAME)
        .to_owned();
    Ok(Program { name, source })
}

fn run(ctx: &mut Ctx) -> Exit {
    let program = match program(ctx) {
        Ok(program) => program,
        Err(message) => return failure(ctx, message),
    };
    let (rl, stop) = (ctx.rl, &ctx.limits.stop);
    let outcome = std::thread::scope(|scope| {
        let evaluation = std::thread::Builder::new()
            .name("starlark".into())
            .stack_size(EVAL_STACK_BYTES)
            .spawn_scoped(scope, || evaluate(rl, stop, &program));
        match evaluation {
            Ok(handle) => handle.join().map_err(|panic| {
                Unfinished::Panicked(
                    panic
                        .downcast_ref::<&str>()
                        .map(|text| (*text).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default(),
                )
            }),
            Err(_) => Err(Unfinished::NoThread),
        }
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // The interpreter's arena panics when the program passes the heap budget (a failed
        // allocation ends the process instead, see `ALLOCATOR`), and its thread cannot start
        // when its stack does not fit: a limit reached, not a failure of the program.
        Err(Unfinished::Panicked(panic)) if panic.contains("out of memory") => {
            return Exit::Interrupted(Interruption::OutOfMemory("the program"));
        }
        Err(Unfinished::NoThread) => {
            return Exit::Interrupted(Interruption::OutOfMemory(INTERPRETER_STACK));
        }
        Err(Unfinished::Panicked(panic)) => Err(format!(
            "the Starlark interpreter failed unexpectedly: {panic}"
        )),
    };
    let evaluated = match outcome {
        Ok(evaluated) => evaluated,
        Err(message) => return failure(ctx, message),
    };
    ctx.log = evaluated.log;
    let (editor, results) = match evaluated.outcome {
        Ok(done) => done,
        Err(message) => return failure(ctx, message),
    };
    ctx.ed = editor;
    let failed = results.iter().any(|r| r.severity == Some("error"));
    ctx.results.extend(results);
    if failed {
        return Exit::Failed(FAILURE.into());
    }
    Exit::Ok
}

/// Why the interpreter's thread gave no outcome.
enum Unfinished {
    Panicked(String),
    /// The thread could not start: its stack does not fit in what the process may map.
    NoThread,
}

/// The SDK's message when a function reports failure: the catalog's stderr.
const FAILURE: &str = "error: function failure";

/// The catalog's failure: one error result, items as they came in, exit status 1.
fn failure(ctx: &mut Ctx, message: String) -> Exit {
    ctx.results.push(FnResult::error(message));
    Exit::Failed(FAILURE.into())
}

/// What a program left: its `print` output and either the edits of the input text with its
/// results, or the error that stopped it.
struct Evaluated {
    log: String,
    outcome: Result<(Editor, Vec<FnResult>), String>,
}

/// Collects `print` lines for the function's log, up to [`MAX_LOG_BYTES`].
#[derive(Default)]
struct PrintLog {
    text: RefCell<String>,
    dropped: Cell<usize>,
}

impl starlark::PrintHandler for PrintLog {
    fn println(&self, line: &str) -> starlark::Result<()> {
        let mut text = self.text.borrow_mut();
        if text.len() + line.len() < MAX_LOG_BYTES {
            text.push_str(line);
            text.push('\n');
        } else {
            self.dropped.set(self.dropped.get() + line.len() + 1);
        }
        Ok(())
    }
}

impl PrintLog {
    fn into_text(self) -> String {
        let mut text = self.text.into_inner();
        let dropped = self.dropped.get();
        if dropped > 0 {
            text.push_str(&format!(
                "[{dropped} more bytes of print output not kept]\n"
            ));
        }
        text
    }
}

/// The Starlark dialect the catalog enables: standard Starlark plus top-level `for`/`if`, the
/// `set` type, recursion and reassigning globals (the last two are always allowed here).
fn dialect() -> Dialect {
    Dialect {
        enable_top_level_stmt: true,
        ..Dialect::Standard
    }
}

fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        GlobalsBuilder::extended_by(&[
            LibraryExtension::StructType,
            LibraryExtension::Print,
            LibraryExtension::SetType,
        ])
        .with(repeat::add_multiply)
        .with(amplify::add_guarded_text)
        .with(methods::add_guarded_getattr)
        .build()
    })
}

fn evaluate(rl: &ResourceList, stop: &Stop, program: &Program) -> Result<Evaluated, String> {
    let written = match AstModule::parse(&program.name, program.source.clone(), &dialect()) {
        Ok(ast) => ast,
        Err(e) => {
            return Ok(Evaluated {
                log: String::new(),
                outcome: Err(describe_parse_error(&e)),
            });
        }
    };
    if let Some((span, op)) = repeat::unguarded_assignment(&written) {
        return Ok(Evaluated {
            log: String::new(),
            outcome: Err(located(
                &written.file_span(span).resolve(),
                &format!(
                    "`{op}=` is not supported (its result cannot be bounded); write `x = x {op} y`"
                ),
            )),
        });
    }
    let routed = methods::route(&written, &program.name, &program.source);
    let mut ast = match &routed {
        None => written,
        Some(routed) => match AstModule::parse(&program.name, routed.source.clone(), &dialect()) {
            Ok(ast) => ast,
            Err(e) => {
                return Ok(Evaluated {
                    log: String::new(),
                    outcome: Err(describe_error(&e, None, Some(routed))),
                });
            }
        },
    };
    repeat::guard_multiplications(&mut ast);
    amplify::guard_formatting(&mut ast);
    let started = Instant::now();
    let out_of_time = move || stop.requested() || started.elapsed() > MAX_RUN_TIME;
    let print = PrintLog::default();
    let loader = library::Loader;
    let statement = Rc::new(RefCell::new(None));
    let doc = &rl.doc;
    let outcome = Module::with_temp_heap(|module| {
        let heap = module.heap();
        let inputs: Vec<(NodeId, Value)> = rl
            .items
            .iter()
            .map(|&item| (item, convert::to_value(doc, item, heap)))
            .collect();
        let items = heap.alloc(AllocList(inputs.iter().map(|&(_, value)| value)));
        let function_config = rl
            .function_config
            .map_or_else(Value::new_none, |fc| convert::to_value(doc, fc, heap));
        let resource_list = heap.alloc(AllocDict([
            ("apiVersion", heap.alloc("config.kubernetes.io/v1")),
            ("kind", heap.alloc("ResourceList")),
            ("items", items),
            ("functionConfig", function_config),
            ("results", heap.alloc(AllocList::EMPTY)),
        ]));
        let ctx_value = heap.alloc(AllocStruct([
            ("resource_list", resource_list),
            // The runner's environment holds its own secrets: programs see none of it.
            ("environment", heap.alloc(AllocDict::EMPTY)),
            ("open_api", open_api::document(heap)),
        ]));
        module.set("ctx", ctx_value);
        if let Some(routed) = &routed {
            module.set(&routed.hidden, methods::routing_global().to_value());
        }

        let mut eval = Evaluator::new(&module);
        // The input items are also held outside the heap, to match them afterwards: they
        // must not move.
        eval.disable_gc();
        eval.set_loader(&loader);
        eval.set_print_handler(&print);
        eval.set_check_cancelled(Box::new(out_of_time));
        eval.before_stmt_for_dap(BeforeStmtFunc::Dyn(Box::new(HeapGuard(statement.clone()))));
        eval.set_max_tick_count(MAX_STEPS)
            .and_then(|()| eval.set_max_heap_size(MAX_HEAP_BYTES))
            .and_then(|()| eval.set_max_callstack_size(MAX_CALL_DEPTH))
            .map_err(|e| format!("cannot limit the Starlark interpreter: {e}"))?;
        let ran = eval.eval_module(ast, globals());
        drop(eval);
        let last = statement.borrow().clone();
        let describe_error =
            |e: &starlark::Error| describe_error(e, last.as_ref(), routed.as_ref());
        Ok::<_, String>(match ran {
            Err(e) if stop.requested() => Err(format!(
                "the program was stopped because the call ended ({})",
                describe_error(&e)
            )),
            Err(e) if started.elapsed() > MAX_RUN_TIME => Err(format!(
                "the program ran longer than {} s and was stopped ({})",
                MAX_RUN_TIME.as_secs(),
                describe_error(&e)
            )),
            Err(e) => Err(describe_error(&e)),
            Ok(_) => amplify::check_output(resource_list, heap).and_then(|()| {
                let mut editor = Editor::default();
                apply::plan(doc, rl, &inputs, resource_list, &mut editor)
                    .map(|results| (editor, results))
            }),
        })
    })?;
    Ok(Evaluated {
        log: print.into_text(),
        outcome,
    })
}

thread_local! {
    /// Bytes the program's library values hold outside the Starlark heap (archives, parsed
    /// documents, binary data): they count against the heap budget as its values do. Each
    /// program runs on its own thread, which starts at zero.
    static OUTSIDE_HEAP_BYTES: Cell<u64> = const { Cell::new(0) };
}

/// Counts `bytes` a library value keeps outside the Starlark heap, measured first by its caller
/// against [`heap_left`].
fn hold_outside_heap(bytes: u64) {
    OUTSIDE_HEAP_BYTES.with(|held| held.set(held.get().saturating_add(bytes)));
}

/// Bytes the program's values occupy, on the Starlark heap and outside it.
fn used_bytes(heap: starlark::values::Heap) -> u64 {
    (heap.allocated_bytes() as u64).saturating_add(OUTSIDE_HEAP_BYTES.with(Cell::get))
}

/// Bytes a program may still allocate before its heap budget runs out.
fn heap_left(heap: starlark::values::Heap) -> u64 {
    (MAX_HEAP_BYTES as u64).saturating_sub(used_bytes(heap))
}

/// `what` would make `bytes` (or, when the measure stopped early, more than `left`) bytes.
fn over_budget(what: &str, bytes: Option<u64>, left: u64) -> starlark::Error {
    let made = match bytes {
        Some(bytes) => format!("{bytes} bytes, more than"),
        None => "more than".to_owned(),
    };
    starlark::Error::new_other(anyhow::anyhow!(
        "{what} would make {made} the {left} bytes left of the program's heap budget of {} MiB",
        MAX_HEAP_BYTES >> 20
    ))
}

/// Checks the heap before every statement (the interpreter's own check runs every thousand
/// steps, between which a loop doubling a string would already have asked for exabytes), and
/// remembers the statement, to name it when a budget stops the program.
struct HeapGuard(Rc<RefCell<Option<FileSpan>>>);

impl<'e> BeforeStmtFuncDyn<'e> for HeapGuard {
    fn call<'v>(
        &mut self,
        span: FileSpanRef,
        _continued: bool,
        eval: &mut Evaluator<'v, '_, 'e>,
    ) -> starlark::Result<()> {
        *self.0.borrow_mut() = Some(span.to_file_span());
        if used_bytes(eval.heap()) > MAX_HEAP_BYTES as u64 {
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "the program's values exceed the heap budget of {} MiB",
                MAX_HEAP_BYTES >> 20
            )));
        }
        Ok(())
    }
}

/// A syntax error, said plainly for `while`: the catalog's interpreter (go.starlark.net with
/// `resolve.AllowRecursion`) runs `while` loops, starlark-rust reserves the word and has none.
fn describe_parse_error(error: &starlark::Error) -> String {
    let message = error.without_diagnostic().to_string();
    match error.span() {
        Some(span) if message.contains("reserved keyword `while`") => located(
            &span.resolve(),
            "`while` loops are not supported: krm-runner's Starlark interpreter (starlark-rust) \
             has no `while` statement, unlike the catalog's go.starlark.net; write the loop as \
             `for _ in range(n):` with `break`",
        ),
        _ => describe_error(error, None, None),
    }
}

/// `name:line:col: message`, the position being where the error was raised (innermost frame),
/// else the statement that was running (`last`) when a budget ran out; in the program as
/// written when it ran `routed`.
fn describe_error(
    error: &starlark::Error,
    last: Option<&FileSpan>,
    routed: Option<&methods::Routed>,
) -> String {
    let message = error.without_diagnostic().to_string();
    let message = message.trim();
    let location = error
        .span()
        .or_else(|| {
            error
                .call_stack()
                .frames
                .iter()
                .rev()
                .find_map(|frame| frame.location.as_ref())
        })
        .or(last)
        .map(|span| {
            routed
                .and_then(|routed| routed.resolve(span))
                .unwrap_or_else(|| span.resolve())
        });
    match location {
        Some(span) => located(&span, message),
        None => message.to_owned(),
    }
}

/// `name:line:col: message`.
fn located(span: &ResolvedFileSpan, message: &str) -> String {
    format!(
        "{}:{}:{}: {message}",
        span.file,
        span.span.begin.line + 1,
        span.span.begin.column + 1
    )
}

#[cfg(test)]
mod library_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
