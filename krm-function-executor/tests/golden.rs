//! Golden cases: each `tests/golden/cases/NAME.json` is a request (an input file from
//! `tests/golden/inputs/`, its toolchain when not Kubernetes/YAML, and invocations, plus any
//! request flags); its rendered response is
//! compared with `NAME.golden`. `KRM_UPDATE_GOLDEN=1 cargo test -p krm-function-executor
//! --test golden` rewrites the golden files; review the diff before committing.
//!
//! The rendering follows fctl's: SUCCESS, ERRORMESSAGES when any, the output, then the
//! mutations and, when the data changed, the new data.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use krm_function_executor::api::{
    FunctionInvocation, FunctionInvocationRequest, hash_config_data, render_output,
};
use krm_function_executor::{Executor, Toolchain};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// A file in `tests/golden/inputs/`.
    input: String,
    /// ConfigHub's toolchain name; Kubernetes/YAML when absent.
    #[serde(default)]
    toolchain: String,
    invocations: Vec<FunctionInvocation>,
    #[serde(default)]
    num_filters: usize,
    #[serde(default)]
    stop_on_error: bool,
    /// fctl asks for one combined result; a case can ask for the list.
    #[serde(default = "yes")]
    combine_validation_results: bool,
    #[serde(default)]
    approved_by: Option<Vec<String>>,
    /// A file in `tests/golden/inputs/`: the request's LiveState.
    #[serde(default)]
    live_state: Option<String>,
    /// The ConfigHub rule the expected data follows: a file of confighub/sdk and the function
    /// in it (e.g. "function/internal/handlers/generic/standard_functions.go
    /// GetVisitorMapForPath: ...").
    #[serde(default)]
    note: Option<String>,
}

fn yes() -> bool {
    true
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn request(case: &Case) -> FunctionInvocationRequest {
    let read = |name: &str| {
        std::fs::read(golden_dir().join("inputs").join(name))
            .unwrap_or_else(|e| panic!("input {name}: {e}"))
    };
    let input = read(&case.input);
    let mut request = FunctionInvocationRequest {
        config_data: input,
        cast_string_args_to_scalars: true,
        num_filters: case.num_filters,
        stop_on_error: case.stop_on_error,
        combine_validation_results: case.combine_validation_results,
        function_invocations: case.invocations.clone(),
        live_state: case.live_state.as_deref().map(read).unwrap_or_default(),
        ..FunctionInvocationRequest::default()
    };
    request.context.toolchain_type = case.toolchain.clone();
    // fctl's fixed context.
    request.context.unit_display_name = "golden".into();
    request.context.unit_slug = "golden".into();
    request.context.unit_id = "5837950a-0000-4000-8000-000000000001".into();
    request.context.space_id = "c73bbc39-0000-4000-8000-000000000002".into();
    request.context.space_slug = "DeepSpace".into();
    request.context.revision_num = 1;
    request.context.new = true;
    // fctl fills PreviousContentHash with the hash of the data it sends.
    request.context.previous_content_hash = hash_config_data(&request.config_data);
    request.context.approved_by = case.approved_by.clone();
    request
}

fn render(executor: &Executor, case: &Case) -> String {
    let request = request(case);
    let response = match executor.invoke(&request) {
        Ok(response) => response,
        Err(error) => return format!("REQUEST ERROR  {error}\n"),
    };
    let mut out = format!("SUCCESS  {}\n", response.success);
    if !response.error_messages.is_empty() {
        out.push_str(&format!(
            "ERRORMESSAGES  {}\n",
            response.error_messages.join("; ")
        ));
    }
    out.push_str(&format!("MUTATORS  {:?}\n", response.mutators));
    let output = String::from_utf8(response.output).unwrap();
    if let Some(output_type) = response.output_type {
        out.push_str(&format!("\nOUTPUT  {output_type:?}\n------\n"));
        let rendered = render_output(Some(output_type), output.as_bytes())
            .unwrap_or_else(|e| panic!("output does not read as its type: {e}: {output}"));
        out.push_str(rendered.as_deref().unwrap_or("null"));
        out.push('\n');
    } else {
        assert_eq!(output, "null", "no output type but an output");
    }
    if !response.mutations.is_empty() {
        out.push_str("\nMUTATIONS\n---------\n");
        out.push_str(&serde_json::to_string_pretty(&response.mutations).unwrap());
        out.push('\n');
    }
    if response.config_data != request.config_data {
        out.push_str("\nCONFIGDATA\n----------\n");
        out.push_str(std::str::from_utf8(&response.config_data).unwrap());
    }
    out
}

#[test]
fn golden_cases() {
    let executors: Vec<Executor> = Toolchain::ALL.into_iter().map(Executor::built_in).collect();
    let update = std::env::var_os("KRM_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let cases_dir = golden_dir().join("cases");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&cases_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no cases in {}", cases_dir.display());
    let mut failures = Vec::new();
    let mut invoked = BTreeSet::new();
    for path in &names {
        let case: Case = serde_json::from_slice(&std::fs::read(path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Some(note) = &case.note {
            assert!(
                note.contains(".go "),
                "{}: a note names the confighub/sdk file and function it follows: {note}",
                path.display()
            );
        }
        let toolchain = Toolchain::from_name(&case.toolchain)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        invoked.extend(
            case.invocations
                .iter()
                .map(|i| (toolchain, i.function_name.clone())),
        );
        let executor = executors
            .iter()
            .find(|executor| executor.toolchain() == toolchain)
            .unwrap();
        let actual = render(executor, &case);
        let golden = path.with_extension("golden");
        if update {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&golden) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{}: differs from its golden file\n--- expected\n{expected}\n--- actual\n{actual}",
                path.display()
            )),
            Err(e) => failures.push(format!(
                "{}: {e} (KRM_UPDATE_GOLDEN=1 writes it)",
                golden.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // One case per function of each toolchain at least.
    let untested: Vec<_> = executors
        .iter()
        .flat_map(|executor| {
            executor
                .list()
                .into_keys()
                .map(|name| (executor.toolchain(), name))
        })
        .filter(|key| !invoked.contains(key))
        .collect();
    assert!(
        untested.is_empty(),
        "functions without a golden case: {untested:?}"
    );
}
