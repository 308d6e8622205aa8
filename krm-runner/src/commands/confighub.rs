//! ConfigHub's typed functions from the command line, as its `fctl` offers them: `do` (one
//! invocation), `doseq` (a sequence), `list` (the signatures) and `listpaths` (the path
//! registry), printed in fctl's layout so that scripts written for fctl keep working. The
//! executor runs in this process; no server is needed.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use krm_function_executor::api::{
    FunctionArgument, FunctionInvocation, FunctionInvocationRequest, FunctionInvocationResponse,
    FunctionSignature, hash_config_data, render_output,
};
use krm_function_executor::executor::MAX_CONFIG_BYTES;
use krm_function_executor::{Executor, ExecutorError, Toolchain};
use krm_plugin_api::CancelReason;
use krm_plugin_loader::HostCallContext;

use super::{BadInvocation, Exit, configure, exit_code};
use crate::allocator;
use crate::cli::{DoArgs, DoSeqArgs, Flags, ToolchainArg};
use crate::config::Config;
use crate::confighub::{add_contributed, serving};
use crate::runtime::{Purpose, Runtime};

/// fctl's fixed context (its test IDs), so that outputs naming them match fctl's.
const UNIT_ID: &str = "5837950a-619e-44da-9b75-f957c2aee14c";
const SPACE_ID: &str = "c73bbc39-7ad1-4f32-aba0-1ef0789c9571";
const SPACE_SLUG: &str = "DeepSpace";
const ORGANIZATION_ID: &str = "362c7a01-ba2d-40f6-9454-805c9a4fbbbe";

/// fctl's function names, `[a-z0-9_-]*`, or a plugin's function qualified by the evaluator
/// instance contributing it, `INSTANCE/NAME`.
fn is_function_name(name: &str) -> bool {
    let fctl = |name: &str| {
        name.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    };
    match name.split_once('/') {
        None => fctl(name),
        Some((instance, name)) => {
            !instance.is_empty()
                && instance
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && fctl(name)
        }
    }
}

/// fctl's unit names: `[a-zA-Z0-9_ .()@#-]*`.
fn is_unit_name(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_ .()@#".contains(c))
}

/// What of a response to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// The SUCCESS header, the data when it changed, the output.
    Full,
    /// Only the resulting data, changed or not.
    DataOnly,
    /// Only the output.
    OutputOnly,
}

/// A command of this module.
pub enum Typed<'a> {
    Do(&'a DoArgs),
    Doseq(&'a DoSeqArgs),
    List(&'a ToolchainArg),
    Listpaths(&'a ToolchainArg),
}

/// Starts the evaluator plugins, for their typed functions: the runtime, or every problem.
pub type StartPlugins<'s> = &'s dyn Fn() -> Result<Runtime, Vec<String>>;

/// Runs `typed` on the configuration `flags` make. ConfigHub's typed functions run in this
/// process; the evaluator plugins start only when their typed functions are needed.
pub fn run(flags: &Flags, typed: Typed<'_>) -> Exit {
    let config = configure(flags)?.without_problems()?;
    allocator::keep_freed_heap();
    Ok(exit_code(
        typed.run(&config, &|| Runtime::start(&config, Purpose::Serve)),
    ))
}

impl Typed<'_> {
    /// Runs the command with the executor `config` declares; its result is the exit status. The plugins are started only when
    /// their functions are needed: for `list` and `listpaths`, and for invocations of
    /// functions the builtin executor does not have.
    pub fn run(self, config: &Config, plugins: StartPlugins<'_>) -> anyhow::Result<i32> {
        match self {
            Typed::Do(args) => run_do(args, config, plugins),
            Typed::Doseq(args) => run_doseq(args, config, plugins),
            Typed::List(toolchain) => run_list(toolchain, config, plugins),
            Typed::Listpaths(toolchain) => run_listpaths(toolchain, config, plugins),
        }
    }
}

/// `krm-runner do FILE UNIT FUNCTION [ARG...]`: exit status 0, or 1 when the invocation failed.
fn run_do(args: &DoArgs, config: &Config, plugins: StartPlugins<'_>) -> anyhow::Result<i32> {
    check_function_name(&args.function)?;
    // fctl takes its flags anywhere, after the function's arguments too; neither flag has a
    // value, so neither can be a named argument (`--name=value`).
    let (mut data_only, mut output_only) = (args.data_only, args.output_only);
    let mut words = Vec::with_capacity(args.arguments.len());
    for word in &args.arguments {
        match word.as_str() {
            "--data-only" => data_only = true,
            "--output-only" => output_only = true,
            _ => words.push(word.clone()),
        }
    }
    if data_only && output_only {
        return Err(BadInvocation::error(
            "--data-only cannot be used with --output-only",
        ));
    }
    let arguments = parse_arguments(&words)?;
    let view = match (data_only, output_only) {
        (true, _) => View::DataOnly,
        (_, true) => View::OutputOnly,
        _ => View::Full,
    };
    let invocations = vec![FunctionInvocation::new(args.function.clone(), arguments)];
    let request = Request {
        file: &args.file,
        unit: &args.unit,
        toolchain: &args.toolchain,
        invocations,
        num_filters: 0,
        stop_on_error: false,
        timeout: args.timeout,
    };
    invoke(request, view, config, plugins)
}

/// `krm-runner doseq FILE UNIT INVOCATIONS_JSON`: exit status 0, or 1 when an invocation failed.
fn run_doseq(args: &DoSeqArgs, config: &Config, plugins: StartPlugins<'_>) -> anyhow::Result<i32> {
    let invocations: Vec<FunctionInvocation> = serde_json::from_str(&args.invocations)
        .map_err(|error| {
            BadInvocation::error(format!(
                "INVOCATIONS is not a FunctionInvocationList \
                 ([{{\"FunctionName\": ..., \"Arguments\": [{{\"ParameterName\": ..., \"Value\": ...}}]}}]): {error}"
            ))
        })?;
    for invocation in &invocations {
        check_function_name(&invocation.function_name)?;
    }
    let request = Request {
        file: &args.file,
        unit: &args.unit,
        toolchain: &args.toolchain,
        invocations,
        num_filters: args.num_filters,
        stop_on_error: args.stop,
        timeout: args.timeout,
    };
    invoke(request, View::Full, config, plugins)
}

/// `krm-runner list`: fctl's table of signatures, by name.
fn run_list(
    toolchain: &ToolchainArg,
    config: &Config,
    plugins: StartPlugins<'_>,
) -> anyhow::Result<i32> {
    let executor = with_plugins(executor_for(toolchain, config)?, plugins)?;
    emit(&signature_table(executor.list().values()))?;
    Ok(0)
}

/// `krm-runner listpaths`: the path registry as indented JSON.
fn run_listpaths(
    toolchain: &ToolchainArg,
    config: &Config,
    plugins: StartPlugins<'_>,
) -> anyhow::Result<i32> {
    let executor = with_plugins(executor_for(toolchain, config)?, plugins)?;
    emit(&format!(
        "{}\n",
        serde_json::to_string_pretty(executor.registry())?
    ))?;
    Ok(0)
}

/// The executor of a toolchain: Kubernetes/YAML's with the attributes `config` declares,
/// AppConfig/Properties' builtin one.
fn executor_for(toolchain: &ToolchainArg, config: &Config) -> anyhow::Result<Executor> {
    let toolchain = Toolchain::from_name(&toolchain.toolchain)
        .map_err(|unknown| BadInvocation::error(format!("--toolchain: {unknown}")))?;
    match toolchain {
        // The configuration's problems were reported before any command ran.
        Toolchain::KubernetesYaml => config.typed_executor().map_err(anyhow::Error::new),
        Toolchain::AppConfigProperties => Ok(config.properties_executor()),
    }
}

/// `executor` with the typed functions the plugins contribute, when it is Kubernetes/YAML's
/// (plugins' functions work on Kubernetes resources); clashes and problems are logged as
/// warnings, as at a server's start-up.
fn with_plugins(mut executor: Executor, plugins: StartPlugins<'_>) -> anyhow::Result<Executor> {
    if executor.toolchain() != Toolchain::KubernetesYaml {
        return Ok(executor);
    }
    let runtime = plugins().map_err(|problems| BadInvocation::error(problems.join("\n")))?;
    for report in add_contributed(&mut executor, &runtime) {
        tracing::warn!("{report}");
    }
    Ok(executor)
}

struct Request<'a> {
    file: &'a Path,
    unit: &'a str,
    toolchain: &'a ToolchainArg,
    invocations: Vec<FunctionInvocation>,
    num_filters: usize,
    stop_on_error: bool,
    timeout: Option<f64>,
}

fn invoke(
    request: Request<'_>,
    view: View,
    config: &Config,
    plugins: StartPlugins<'_>,
) -> anyhow::Result<i32> {
    if !is_unit_name(request.unit) {
        return Err(BadInvocation::error(format!(
            "unit name {:?} contains characters other than letters, digits, space and -_.()@#",
            request.unit
        )));
    }
    let deadline = match request.timeout {
        None => None,
        Some(seconds) => Some(serving::deadline_after(seconds).ok_or_else(|| {
            BadInvocation::error(format!("--timeout: {seconds} is not a number of seconds"))
        })?),
    };
    let mut executor = executor_for(request.toolchain, config)?;
    let needs_plugins = request
        .invocations
        .iter()
        .any(|invocation| executor.function(&invocation.function_name).is_none());
    if needs_plugins {
        executor = with_plugins(executor, plugins)?;
    }
    for invocation in &request.invocations {
        let name = &invocation.function_name;
        if executor.function(name).is_none() {
            // The response says what ConfigHub's says; the person at the terminal gets a pointer.
            eprintln!("krm-runner: {}", unknown_function_hint(name, &executor));
        }
    }
    let input = read_input(request.file)?;
    let mut invocation = FunctionInvocationRequest {
        config_data: input.clone(),
        cast_string_args_to_scalars: true,
        num_filters: request.num_filters,
        stop_on_error: request.stop_on_error,
        combine_validation_results: true,
        function_invocations: request.invocations,
        ..FunctionInvocationRequest::default()
    };
    let context = &mut invocation.context;
    context.toolchain_type = request.toolchain.toolchain.clone();
    context.unit_slug = request.unit.to_lowercase();
    context.unit_id = UNIT_ID.to_owned();
    context.space_id = SPACE_ID.to_owned();
    context.space_slug = SPACE_SLUG.to_owned();
    context.organization_id = ORGANIZATION_ID.to_owned();
    context.revision_num = 1;
    context.new = true;
    // fctl (function/client/do.go InvokeFunctions) hashes the data it sends, so that
    // is-approved sees it unchanged.
    context.previous_content_hash = hash_config_data(&input);
    let call = HostCallContext::new(deadline);
    if let Some(deadline) = deadline {
        let expiring = call.clone();
        std::thread::spawn(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            expiring.cancel(CancelReason::DeadlineExceeded);
        });
    }
    // fctl's layout shows no mutation records.
    let response = executor.invoke_within_unrecorded(&invocation, &call.as_call_context());
    if let Err(error @ ExecutorError::Cancelled { .. }) = response {
        return Err(anyhow::anyhow!("{error} (--timeout)"));
    }
    let response = response.map_err(|error| {
        let at_fault = match &error {
            ExecutorError::Toolchain(_) | ExecutorError::OtherToolchain { .. } => {
                "--toolchain".to_owned()
            }
            ExecutorError::TooManyInvocations { .. } => "INVOCATIONS".to_owned(),
            _ => input_name(request.file),
        };
        BadInvocation::error(format!("{at_fault}: {error}"))
    })?;
    emit(&render_response(&input, &response, view)?)?;
    if !needs_plugins {
        // The process ends here: its registry (thousands of entries) goes back with the
        // process rather than freed entry by entry, a sixth of a `do`'s instructions. With
        // plugins started, the executor is dropped so that they stop in order.
        std::mem::forget(executor);
    }
    Ok(if response.success { 0 } else { 1 })
}

/// Writes `text` to stdout; a reader that went away (`| head`) ends the output quietly.
fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to stdout: {error}"))
        }
        _ => Ok(()),
    }
}

fn check_function_name(name: &str) -> anyhow::Result<()> {
    if is_function_name(name) {
        Ok(())
    } else {
        Err(BadInvocation::error(format!(
            "function name {name:?} contains characters other than a-z, 0-9, - and _"
        )))
    }
}

/// fctl's arguments: positional values, or `--name=value` pairs, after which every argument
/// must be named.
fn parse_arguments(words: &[String]) -> anyhow::Result<Vec<FunctionArgument>> {
    let mut arguments = Vec::with_capacity(words.len());
    let mut named = false;
    for word in words {
        match word
            .strip_prefix("--")
            .and_then(|rest| rest.split_once('='))
        {
            Some((name, value)) => {
                named = true;
                arguments.push(FunctionArgument::named(name, value));
            }
            None if named => {
                return Err(BadInvocation::error(format!(
                    "positional argument {word:?} cannot follow named arguments (--name=value)"
                )));
            }
            None => arguments.push(FunctionArgument::positional(word.as_str())),
        }
    }
    Ok(arguments)
}

fn input_name(file: &Path) -> String {
    if file == Path::new("-") {
        "stdin".to_owned()
    } else {
        file.display().to_string()
    }
}

/// The unit's config data from FILE, or stdin for `-`, up to the executor's limit.
fn read_input(file: &Path) -> anyhow::Result<Vec<u8>> {
    let name = input_name(file);
    let mut data = Vec::new();
    let limit = MAX_CONFIG_BYTES as u64 + 1;
    let read = if file == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut data)
    } else {
        std::fs::File::open(file).and_then(|opened| opened.take(limit).read_to_end(&mut data))
    };
    read.map_err(|error| BadInvocation::error(format!("{name}: cannot read: {error}")))?;
    if data.len() > MAX_CONFIG_BYTES {
        return Err(BadInvocation::error(format!(
            "{name}: config data is more than the limit of {MAX_CONFIG_BYTES} bytes"
        )));
    }
    Ok(data)
}

/// A response in fctl's layout: a borderless SUCCESS (and ERRORMESSAGES) table; CONFIGDATA
/// with the data when it changed; OUTPUT with the output, when there is one.
fn render_response(
    input: &[u8],
    response: &FunctionInvocationResponse,
    view: View,
) -> anyhow::Result<String> {
    let mut out = String::new();
    if view == View::Full {
        let mut rows = vec![vec!["SUCCESS".to_owned(), response.success.to_string()]];
        if !response.success {
            let messages: String = response
                .error_messages
                .iter()
                .map(|message| format!("{message}; "))
                .collect();
            rows.push(vec!["ERRORMESSAGES".to_owned(), messages]);
        }
        out.push_str(&table(&rows));
    }
    let data_changed = response.config_data != input;
    if (data_changed || view == View::DataOnly) && view != View::OutputOnly {
        if view == View::Full {
            out.push_str("CONFIGDATA\n---------\n");
        }
        out.push_str(&String::from_utf8_lossy(&response.config_data));
    }
    if view != View::DataOnly
        && let Some(output) = render_output(response.output_type, &response.output)?
    {
        if view == View::Full {
            out.push_str("OUTPUT\n------\n");
        }
        out.push_str(&output);
    }
    Ok(out)
}

/// fctl's `list` table, by function name.
fn signature_table<'a>(signatures: impl Iterator<Item = &'a FunctionSignature>) -> String {
    let header = [
        "FUNCTIONNAME",
        "REQ'DPARAMETERS",
        "VARARGS",
        "MUTATING",
        "VALIDATING",
        "HERMETIC",
        "IDEMPOTENT",
        "DESCRIPTION",
        "PARAMETERS",
    ];
    let mut rows = vec![header.map(str::to_owned).to_vec()];
    let mut signatures: Vec<&FunctionSignature> = signatures.collect();
    signatures.sort_by(|a, b| a.function_name.cmp(&b.function_name));
    for signature in signatures {
        let parameters: String = signature
            .parameters
            .iter()
            .map(|parameter| {
                let required = if parameter.required { "req" } else { "opt" };
                format!(
                    "{}:{}({required}), ",
                    parameter.parameter_name,
                    go_quoted(&parameter.description)
                )
            })
            .collect();
        rows.push(vec![
            signature.function_name.clone(),
            signature.required_parameters.to_string(),
            signature.var_args.to_string(),
            signature.mutating.to_string(),
            signature.validating.to_string(),
            signature.hermetic.to_string(),
            signature.idempotent.to_string(),
            signature.description.clone(),
            parameters,
        ]);
    }
    table(&rows)
}

/// A borderless table as fctl's table writer prints it: every cell left-aligned, padded to
/// its column's width and followed by four spaces; a cell with several lines spreads its row
/// over as many lines.
fn table(rows: &[Vec<String>]) -> String {
    const PADDING: &str = "    ";
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .flat_map(|cell| cell.split('\n'))
                .map(|line| line.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<Vec<&str>> = (0..columns)
            .map(|column| {
                row.get(column)
                    .map_or_else(|| vec![""], |cell| cell.split('\n').collect())
            })
            .collect();
        let height = cells.iter().map(Vec::len).max().unwrap_or(1);
        for line in 0..height {
            for (column, cell) in cells.iter().enumerate() {
                let text = cell.get(line).copied().unwrap_or("");
                out.push_str(text);
                let fill = widths[column].saturating_sub(text.chars().count());
                out.extend(std::iter::repeat_n(' ', fill));
                out.push_str(PADDING);
            }
            out.push('\n');
        }
    }
    out
}

/// `text` quoted as Go's `%q` prints it: escapes for quotes, backslashes and control
/// characters; other characters as they are.
fn go_quoted(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\u{7}' => quoted.push_str("\\a"),
            '\u{8}' => quoted.push_str("\\b"),
            '\u{c}' => quoted.push_str("\\f"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            '\u{b}' => quoted.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => {
                quoted.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// What to say of a function `executor` does not have: the closest name it has, and where the
/// whole list is.
fn unknown_function_hint(name: &str, executor: &Executor) -> String {
    let known = executor.list();
    let closest = known
        .keys()
        .map(|known| (strsim::damerau_levenshtein(name, known), known))
        .filter(|(distance, _)| *distance <= 3)
        .min();
    let suggestion = match closest {
        Some((_, known)) => format!("did you mean {known}? "),
        None => String::new(),
    };
    format!(
        "no typed function {}: {suggestion}`krm-runner list` lists them",
        krm_plugin_api::quoted(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_every_cell_and_follow_it_with_four_spaces() {
        let rows = vec![
            vec!["SUCCESS".to_owned(), "false".to_owned()],
            vec!["ERRORMESSAGES".to_owned(), "a; ".to_owned()],
        ];
        assert_eq!(
            table(&rows),
            "SUCCESS          false    \nERRORMESSAGES    a;       \n"
        );
    }

    #[test]
    fn go_quoting_escapes_what_go_escapes() {
        assert_eq!(go_quoted("a \"b\"\n\\ é\u{1}"), r#""a \"b\"\n\\ é\x01""#);
    }

    #[test]
    fn positional_arguments_cannot_follow_named_ones() {
        let words = ["x", "--name=v=w", "y"].map(str::to_owned);
        let error = parse_arguments(&words).unwrap_err().to_string();
        assert!(error.contains("positional argument \"y\""), "{error}");
        let arguments = parse_arguments(&words[..2]).unwrap();
        assert_eq!(arguments[1], FunctionArgument::named("name", "v=w"));
        assert_eq!(arguments[0], FunctionArgument::positional("x"));
    }
}
