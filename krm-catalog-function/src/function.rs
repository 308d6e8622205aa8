//! The catalog-function framework: the call context a function edits, the limits bounding it,
//! how it ends, and its signature and validation.

use krm_plugin_api::{Parameter, ParameterType};
use krm_yaml_edit::{Doc, Editor, NodeId, Stop, Stopped};
use serde_json::Value;

use crate::rl::{FnResult, ResourceList};

/// One call of a function.
pub struct Ctx<'r, 'a> {
    pub rl: &'r ResourceList<'a>,
    pub ed: Editor,
    pub results: Vec<FnResult>,
    pub limits: &'r Limits,
    /// What the function writes to its log (stderr), such as a program's `print` lines.
    pub log: String,
}

/// What bounds one call's work.
pub struct Limits {
    /// Requested when the call is cancelled or its deadline passes.
    pub stop: Stop,
    /// The most output a call may produce (the runner's `max_message_bytes`).
    pub max_output_bytes: usize,
}

impl Limits {
    /// Why work whose output is `output_bytes` long so far must stop, if it must.
    pub fn interruption(&self, output_bytes: usize) -> Option<Interruption> {
        if self.stop.requested() {
            return Some(Interruption::Stopped(Stopped));
        }
        (output_bytes > self.max_output_bytes).then_some(Interruption::OutputTooLarge {
            max_output_bytes: self.max_output_bytes,
        })
    }
}

/// Why a function gave up without output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Interruption {
    /// The call ended (cancelled, or past its deadline).
    #[error(transparent)]
    Stopped(#[from] Stopped),
    /// The output would be larger than a call may return.
    #[error("the output would be over {max_output_bytes} bytes (max_message_bytes)")]
    OutputTooLarge {
        /// The runner's `max_message_bytes`.
        max_output_bytes: usize,
    },
    /// The work needed more memory than its process may use (a worker's address-space
    /// limit): a limit reached, not a failure of the function.
    #[error("{0} needed more memory than this process may use (out of memory)")]
    OutOfMemory(&'static str),
}

/// Why a function's work ended without a result: the call's limits, or the function's own
/// failure (its message, as the catalog's function words it).
#[derive(Debug)]
pub enum Halt {
    /// See [`Limits::interruption`].
    Interrupted(Interruption),
    /// The function failed.
    Failed(String),
}

impl From<String> for Halt {
    fn from(message: String) -> Self {
        Halt::Failed(message)
    }
}

impl From<Interruption> for Halt {
    fn from(interruption: Interruption) -> Self {
        Halt::Interrupted(interruption)
    }
}

/// How the function ended, in catalog terms.
pub enum Exit {
    /// Exit status 0 (results may still hold errors, as with set-namespace).
    Ok,
    /// Non-zero exit status with this message on stderr.
    Failed(String),
    /// Gave up without output: the call ended, or a limit was reached.
    Interrupted(Interruption),
}

impl<'r, 'a> Ctx<'r, 'a> {
    pub fn new(rl: &'r ResourceList<'a>, limits: &'r Limits) -> Self {
        Self {
            rl,
            ed: Editor::default(),
            results: Vec::new(),
            limits,
            log: String::new(),
        }
    }

    /// Why the function must give up now, if it must: the call ended, or the edits queued
    /// so far would make the output larger than a call may return. Checked once per object.
    pub fn interrupted(&self) -> Option<Exit> {
        self.interruption().map(Exit::Interrupted)
    }

    /// [`Ctx::interrupted`] as an error, for work that ends with `?`.
    pub fn interruption(&self) -> Option<Interruption> {
        self.limits
            .interruption(self.rl.doc.src.len() + self.ed.queued_bytes())
    }

    /// How a function whose work ended with `halt` exits.
    pub fn halt(&mut self, halt: Halt) -> Exit {
        match halt {
            Halt::Interrupted(interruption) => Exit::Interrupted(interruption),
            Halt::Failed(message) => self.fail(message),
        }
    }

    pub fn doc(&self) -> &'r Doc<'a> {
        &self.rl.doc
    }

    /// Fails with an error result carrying `message`, as the kyaml/SDK functions do.
    pub fn fail(&mut self, message: impl Into<String>) -> Exit {
        let message = message.into();
        self.results.push(FnResult::error(message.clone()));
        Exit::Failed(message)
    }

    /// The functionConfig's kind and apiVersion, if there is one.
    pub fn config_gvk(&self) -> Option<(&'r str, &'r str)> {
        let fc = self.rl.function_config?;
        let doc = self.doc();
        Some((
            doc.get_str(fc, &["apiVersion"]).unwrap_or_default(),
            doc.get_str(fc, &["kind"]).unwrap_or_default(),
        ))
    }

    /// The functionConfig's `data` map as (key, string value) pairs.
    pub fn config_data(&self) -> Vec<(String, String)> {
        let Some(fc) = self.rl.function_config else {
            return Vec::new();
        };
        let doc = self.doc();
        let Some(data) = doc.get(fc, "data") else {
            return Vec::new();
        };
        doc.entries(data)
            .iter()
            .filter_map(|&(k, v)| Some((doc.str(k)?.to_owned(), doc.str(v)?.to_owned())))
            .collect()
    }

    pub fn config_json(&self) -> Value {
        self.rl
            .function_config
            .map_or(Value::Null, |fc| self.doc().to_json(fc))
    }

    /// Adds results a function gathered apart: the list itself when there are none yet,
    /// rather than a copy of it.
    pub fn add_results(&mut self, mut results: Vec<FnResult>) {
        if self.results.is_empty() {
            self.results = results;
        } else {
            self.results.append(&mut results);
        }
    }

    /// Items that are not local-config objects.
    pub fn non_local_items(&self) -> Vec<NodeId> {
        self.rl
            .items
            .iter()
            .copied()
            .filter(|&i| !self.rl.obj(i).is_local_config())
            .collect()
    }
}

/// A function the plugin implements.
pub struct Function {
    pub name: &'static str,
    pub description: &'static str,
    /// Tags reproduced by default, each with the reason.
    pub tags: &'static [(&'static str, &'static str)],
    pub parameters: fn() -> Vec<Parameter>,
    pub changes: &'static [&'static str],
    pub run: fn(&mut Ctx) -> Exit,
    /// Emits the kyaml-framework `results: {name, items}` shape.
    pub legacy_results: bool,
    /// Its answer depends on its ResourceList alone (see `FunctionSignature::pure`), so the
    /// runner may cache it.
    pub pure: bool,
}

pub fn param(
    name: &str,
    parameter_type: ParameterType,
    required: bool,
    description: &str,
) -> Parameter {
    Parameter {
        name: name.to_owned(),
        parameter_type,
        required,
        description: description.to_owned(),
        ..Parameter::default()
    }
}

/// A functionConfig's value that breaks its parameter's rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parameter `{parameter}` {rule}")]
pub struct BrokenRule {
    /// The parameter's name.
    pub parameter: String,
    /// The rule, as the catalog words it (`is required`, `must be a string`).
    pub rule: String,
}

impl BrokenRule {
    fn new(parameter: &str, rule: impl Into<String>) -> Self {
        Self {
            parameter: parameter.to_owned(),
            rule: rule.into(),
        }
    }
}

/// Checks `params` (the functionConfig seen as parameter name -> value) against the signature.
pub fn validate(parameters: &[Parameter], params: &Value) -> Result<(), BrokenRule> {
    for p in parameters {
        let value = params.get(&p.name).filter(|v| !v.is_null());
        let Some(value) = value else {
            if p.required {
                return Err(BrokenRule::new(&p.name, "is required"));
            }
            continue;
        };
        let type_ok = match p.parameter_type {
            ParameterType::String => value.is_string(),
            ParameterType::Integer => {
                value.is_i64() || value.as_str().is_some_and(|s| s.parse::<i64>().is_ok())
            }
            ParameterType::Boolean => value.is_boolean(),
            ParameterType::Map => value
                .as_object()
                .is_some_and(|m| m.values().all(|v| !v.is_object() && !v.is_array())),
            ParameterType::List => value.is_array(),
            ParameterType::Object => value.is_object(),
        };
        if !type_ok {
            let expected = match p.parameter_type {
                ParameterType::String => "a string",
                ParameterType::Integer => "an integer",
                ParameterType::Boolean => "a boolean",
                ParameterType::Map => "a map of strings",
                ParameterType::List => "a list",
                ParameterType::Object => "an object",
            };
            return Err(BrokenRule::new(&p.name, format!("must be {expected}")));
        }
        if p.required && value.as_str().is_some_and(str::is_empty) {
            return Err(BrokenRule::new(
                &p.name,
                "is required and must not be empty",
            ));
        }
        if let Some(s) = value.as_str() {
            if !p.allowed.is_empty() && !p.allowed.iter().any(|a| a == s) {
                return Err(BrokenRule::new(
                    &p.name,
                    format!("must be one of [{}], got {s:?}", p.allowed.join(", ")),
                ));
            }
            if let Some(pattern) = &p.pattern
                && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
            {
                return Err(BrokenRule::new(
                    &p.name,
                    format!("must match the pattern `{pattern}`, got {s:?}"),
                ));
            }
        }
        if p.parameter_type == ParameterType::Integer {
            let n = value
                .as_i64()
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()));
            if let Some(n) = n
                && (p.minimum.is_some_and(|min| n < min) || p.maximum.is_some_and(|max| n > max))
            {
                return Err(BrokenRule::new(
                    &p.name,
                    format!(
                        "must be within [{}, {}], got {n}",
                        p.minimum.map_or("-inf".into(), |v| v.to_string()),
                        p.maximum.map_or("inf".into(), |v| v.to_string())
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Runs validation and turns a broken rule into the function's failure.
pub fn check(ctx: &mut Ctx, parameters: &[Parameter], params: &Value) -> Result<(), Exit> {
    validate(parameters, params).map_err(|rule| ctx.fail(format!("invalid functionConfig: {rule}")))
}

/// Group of an apiVersion.
pub fn group_of(api_version: &str) -> &str {
    crate::rl::split_api_version(api_version).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validation_names_parameter_and_rule() {
        let mut mode = param("editMode", ParameterType::String, false, "");
        mode.allowed = vec!["prepend".into(), "append".into()];
        let params = vec![param("substring", ParameterType::String, true, ""), mode];
        assert_eq!(
            validate(&params, &json!({})).unwrap_err(),
            BrokenRule::new("substring", "is required")
        );
        assert_eq!(
            validate(&params, &json!({"substring": ["x"]}))
                .unwrap_err()
                .to_string(),
            "parameter `substring` must be a string"
        );
        assert!(
            validate(&params, &json!({"substring": "x", "editMode": "middle"}))
                .unwrap_err()
                .to_string()
                .contains("`editMode` must be one of [prepend, append]")
        );
        assert!(validate(&params, &json!({"substring": "x", "editMode": "append"})).is_ok());
    }
}
