//! Functions over the strings of every resource.

use serde_json::Value;

use crate::api::DataType;
use crate::functions::definition::{ALL_TOOLCHAINS, Definition, FunctionKind, Options};
use crate::functions::resources::identified;
use crate::functions::{Call, FunctionError, Outcome};
use crate::resource::scalars;
use crate::signature::ParameterBuilder;
use crate::yaml::Editor;

fn search_replace(call: &Call) -> Result<Outcome, FunctionError> {
    let search = call.arguments.str("search-value").unwrap_or_default();
    let replace = call.arguments.str("replace-value").unwrap_or_default();
    if search.is_empty() {
        return Err("search-value must not be empty".into());
    }
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    // The unit's size as the replacements so far leave it: a short search and a long
    // replacement multiply a value, so each is counted before it is built.
    let mut size = doc.src.len();
    for (element, _) in identified(call)? {
        call.stop_if_cancelled()?;
        for (_, node) in scalars(doc, element.root) {
            // Only string values: numbers and booleans keep their type.
            let Value::String(text) = doc.to_json(node) else {
                continue;
            };
            let found = text.matches(search).count();
            if found == 0 {
                continue;
            }
            size = size
                .saturating_add(found.saturating_mul(replace.len()))
                .saturating_sub(found * search.len());
            call.check_output_size(size, "the unit after search-replace")?;
            editor.set_scalar(doc, node, &text.replace(search, replace), true);
            edits += 1;
        }
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

pub static SEARCH_REPLACE: Definition = Definition {
    name: "search-replace",
    description: "Replace a substring in every string value of every resource",
    parameters: |_| {
        vec![
            ParameterBuilder::new("search-value", DataType::String, "Substring to find"),
            ParameterBuilder::new("replace-value", DataType::String, "Replacement"),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: search_replace,
    options: Options::DEFAULT,
};
