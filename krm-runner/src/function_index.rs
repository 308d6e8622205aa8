//! The functions evaluators implement themselves, with their signatures: what `krm-runner
//! functions` and the `krmrunner.v1.FunctionCatalog` gRPC service show.

use std::fmt::Write as _;

use krm_plugin_api::{FunctionSignature, Parameter, pick_function};

/// Every function some instance implements, with that instance's name, in instance order.
#[derive(Debug, Clone, Default)]
pub struct FunctionIndex {
    entries: Vec<(String, FunctionSignature)>,
}

/// The order in which instances are asked for function `name`: the instance named `name`
/// first (the `starlark` instance for `starlark`, before a chain that delegates to it and
/// every other plugin), then the others as given (name order).
pub fn asking_order<'a, T>(
    items: &'a [T],
    name: &str,
    instance: impl Fn(&T) -> &str + Copy,
) -> impl Iterator<Item = &'a T> {
    let named = items.iter().filter(move |item| instance(item) == name);
    named.chain(items.iter().filter(move |item| instance(item) != name))
}

impl FunctionIndex {
    pub fn new(entries: Vec<(String, FunctionSignature)>) -> Self {
        Self { entries }
    }

    /// Every function, with the instance implementing it, in instance order.
    pub fn entries(&self) -> &[(String, FunctionSignature)] {
        &self.entries
    }

    /// The function `name` picks (see [`pick_function`]), the instances asked in
    /// [`asking_order`].
    pub fn find(&self, name: &str) -> Option<&(String, FunctionSignature)> {
        let entries = asking_order(&self.entries, name, |(instance, _)| instance);
        pick_function(entries, name, |(_, signature)| signature)
    }

    /// Why no function is found by `name`, naming those that are.
    pub fn not_found(&self, name: &str) -> String {
        let names: Vec<&str> = self.entries.iter().map(|(_, s)| s.name.as_str()).collect();
        format!(
            "no evaluator implements a function named {name:?} (known: {})",
            names.join(", ")
        )
    }

    /// The table `krm-runner functions` prints.
    pub fn table(&self) -> String {
        let mut out = format!("{:<24} {:<10} DESCRIPTION\n", "NAME", "EVALUATOR");
        for (instance, signature) in &self.entries {
            let _ = writeln!(
                out,
                "{:<24} {:<10} {}",
                signature.name, instance, signature.description
            );
        }
        out
    }

    /// One function's signature, as `krm-runner functions NAME` prints it.
    pub fn describe(instance: &str, signature: &FunctionSignature) -> String {
        let mut out = format!(
            "{} (evaluator {instance})\n  {}\n",
            signature.name, signature.description
        );
        if !signature.changes.is_empty() {
            let _ = writeln!(out, "changes: {}", signature.changes.join(", "));
        }
        let _ = writeln!(
            out,
            "validates: {}",
            if signature.validates { "yes" } else { "no" }
        );
        out.push_str("parameters:\n");
        if signature.parameters.is_empty() {
            out.push_str("  (none)\n");
        }
        for parameter in &signature.parameters {
            let _ = writeln!(out, "  {}", describe_parameter(parameter));
            if !parameter.description.is_empty() {
                let _ = writeln!(out, "      {}", parameter.description);
            }
            if let Some(example) = &parameter.example {
                let _ = writeln!(out, "      example: {example}");
            }
        }
        out.push_str("images:\n");
        for image in &signature.images {
            let _ = writeln!(out, "  {image}");
        }
        out
    }
}

fn describe_parameter(parameter: &Parameter) -> String {
    let kind = parameter.parameter_type.as_str();
    let mut line = format!(
        "{} ({kind}, {})",
        parameter.name,
        if parameter.required {
            "required"
        } else {
            "optional"
        }
    );
    if let Some(pattern) = &parameter.pattern {
        let _ = write!(line, " matching /{pattern}/");
    }
    if !parameter.allowed.is_empty() {
        let _ = write!(line, " one of [{}]", parameter.allowed.join(", "));
    }
    match (parameter.minimum, parameter.maximum) {
        (Some(min), Some(max)) => {
            let _ = write!(line, " in {min}..={max}");
        }
        (Some(min), None) => {
            let _ = write!(line, " >= {min}");
        }
        (None, Some(max)) => {
            let _ = write!(line, " <= {max}");
        }
        (None, None) => {}
    }
    line
}
