//! Hostile input never panics the starlark function: arbitrary bytes for a ResourceList, and
//! programs pieced together from Starlark fragments, then edited line by line so that most
//! no longer parse. Whatever the program does, a call answers with a short error or with a
//! ResourceList that parses again. `cargo test` runs proptest's default 256 cases.

use proptest::prelude::*;

use crate::run_function;

/// What programs over a ResourceList do, including what fails at run time.
const FRAGMENTS: &[&str] = &[
    "items = ctx.resource_list[\"items\"]",
    "for item in ctx.resource_list[\"items\"]:\n  item[\"metadata\"][\"labels\"] = {\"a\": \"b\"}",
    "ctx.resource_list[\"items\"].append({\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"n\"}})",
    "ctx.resource_list[\"items\"] = []",
    "ctx.resource_list[\"items\"][0][\"spec\"] = {\"k\": [1, 2, {\"n\": None}]}",
    "ctx.resource_list[\"items\"].append(\"not a mapping\")",
    "ctx.resource_list[\"results\"] = [{\"message\": \"m\", \"severity\": \"error\"}]",
    "ctx.resource_list[\"functionConfig\"] = None",
    "x = [i * 2 for i in range(50)]",
    "def f(n):\n  return n + 1",
    "print(f(3))",
    "s = \"é\" * 100",
    "fail(\"no\")",
    "y = 1 // 0",
    "z = undefined_name",
    "def g():\n  return g()\ng()",
    "load(\"@stdlib//re\", \"re\")",
    "k = {\"a\": 1}[\"b\"]",
];

fn program() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..8).prop_map(|parts| parts.join("\n"))
}

/// `program` with a few lines dropped, repeated, indented further or cut in half, as a hurried
/// edit leaves a program: most no longer parse, some fail in new ways.
fn mutated(program: String) -> impl Strategy<Value = String> {
    let edits = prop::collection::vec((any::<prop::sample::Index>(), 0..4u8), 0..4);
    (Just(program), edits).prop_map(|(program, edits)| {
        let mut lines: Vec<String> = program.lines().map(str::to_owned).collect();
        for (at, edit) in edits {
            if lines.is_empty() {
                break;
            }
            let at = at.index(lines.len());
            match edit {
                0 => {
                    lines.remove(at);
                }
                1 => lines.insert(at, lines[at].clone()),
                2 => lines[at].insert_str(0, "  "),
                _ => {
                    let line = &mut lines[at];
                    let half = (0..=line.len() / 2)
                        .rev()
                        .find(|&cut| line.is_char_boundary(cut))
                        .unwrap_or(0);
                    line.truncate(half);
                }
            }
        }
        lines.join("\n")
    })
}

fn resource_list(source: &str) -> String {
    let indented: String = source.lines().map(|line| format!("    {line}\n")).collect();
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  \
         kind: ConfigMap\n  metadata:\n    name: a\nfunctionConfig:\n  apiVersion: \
         fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: prog\n  source: |\n{indented}"
    )
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_input_never_panics_and_answers_short_errors_or_valid_yaml(
        input in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            program().prop_flat_map(mutated).prop_map(|source| resource_list(&source).into_bytes()),
        ]
    ) {
        match run_function("starlark", &input) {
            Ok(response) => {
                let output = String::from_utf8(response.resource_list)
                    .map_err(|e| TestCaseError::fail(format!("output is not UTF-8: {e}")))?;
                prop_assert!(
                    krm_yaml_edit::Doc::parse(&output).is_ok(),
                    "output does not parse again:\n{}", output
                );
            }
            Err(error) => prop_assert!(
                error.message.len() < 2048,
                "{} bytes of message: {}", error.message.len(), error.message
            ),
        }
    }
}
