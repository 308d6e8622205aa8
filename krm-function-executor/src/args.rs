//! Checking an invocation's arguments against the signature before anything runs: count,
//! names, order, types (strings cast to int/bool), ranges, patterns and enums. Every problem
//! is reported, each naming the parameter at fault.

use krm_plugin_api::quoted;
use regex::Regex;
use serde_json::Value;

use crate::api::{DataType, FunctionInvocation};
use crate::signature::TypedSignature;

/// Invocations with more arguments than this are refused.
pub const MAX_ARGUMENTS: usize = 1024;

/// A checked argument value.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    String(String),
    Int(i64),
    Bool(bool),
}

impl ArgValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            ArgValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            ArgValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            ArgValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            ArgValue::String(s) => Value::String(s.clone()),
            ArgValue::Int(i) => Value::from(*i),
            ArgValue::Bool(b) => Value::Bool(*b),
        }
    }
}

/// Arguments in parameter order: (parameter name, value); a varargs parameter may appear
/// several times, last.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Arguments(pub Vec<(String, ArgValue)>);

impl Arguments {
    pub fn get(&self, name: &str) -> Option<&ArgValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(ArgValue::as_str)
    }

    pub fn values(&self) -> impl Iterator<Item = &ArgValue> {
        self.0.iter().map(|(_, v)| v)
    }

    /// Every value given for `name` (varargs).
    pub fn all(&self, name: &str) -> Vec<&ArgValue> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect()
    }
}

/// Checks `invocation` against `signature`.
pub fn check(
    signature: &TypedSignature,
    invocation: &FunctionInvocation,
) -> Result<Arguments, Vec<String>> {
    let name = &invocation.function_name;
    let parameters = &signature.base.parameters;
    let var_args = signature.typed.var_args && !parameters.is_empty();
    let mut problems = Vec::new();
    if invocation.arguments.len() > MAX_ARGUMENTS {
        return Err(vec![format!(
            "{name}: {} arguments, more than the limit of {MAX_ARGUMENTS}",
            invocation.arguments.len()
        )]);
    }
    // Which parameter each argument is for.
    let mut slots: Vec<Option<usize>> = Vec::with_capacity(invocation.arguments.len());
    let mut seen_named = false;
    for (i, argument) in invocation.arguments.iter().enumerate() {
        let slot = if argument.parameter_name.is_empty() {
            if seen_named {
                problems.push(format!(
                    "{name}: positional argument {} follows named arguments",
                    i + 1
                ));
                None
            } else if i < parameters.len() {
                Some(i)
            } else if var_args {
                Some(parameters.len() - 1)
            } else {
                problems.push(format!(
                    "{name}: too many arguments: got {}, expected at most {} ({})",
                    invocation.arguments.len(),
                    parameters.len(),
                    usage(signature)
                ));
                break;
            }
        } else {
            seen_named = true;
            match parameters
                .iter()
                .position(|p| p.name == argument.parameter_name)
            {
                Some(index) => Some(index),
                None => {
                    problems.push(format!(
                        "{name}: {} is not a parameter ({})",
                        quoted(&argument.parameter_name),
                        usage(signature)
                    ));
                    None
                }
            }
        };
        if let Some(index) = slot
            && slots.contains(&Some(index))
            && !(var_args && index == parameters.len() - 1)
        {
            problems.push(format!(
                "{name}: parameter {} given more than once",
                parameters[index].name
            ));
            slots.push(None);
            continue;
        }
        slots.push(slot);
    }
    for (index, parameter) in parameters.iter().enumerate() {
        if parameter.required && !slots.contains(&Some(index)) {
            problems.push(format!(
                "{name}: missing required parameter {} ({})",
                parameter.name,
                usage(signature)
            ));
        }
    }
    let mut checked = Vec::new();
    for (argument, slot) in invocation.arguments.iter().zip(&slots) {
        let Some(index) = *slot else { continue };
        let parameter = &parameters[index];
        match value(signature, index, &argument.value) {
            Ok(value) => checked.push((index, parameter.name.clone(), value)),
            Err(problem) => {
                problems.push(format!("{name}: parameter {}: {problem}", parameter.name))
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    checked.sort_by_key(|(index, ..)| *index);
    Ok(Arguments(
        checked.into_iter().map(|(_, n, v)| (n, v)).collect(),
    ))
}

fn usage(signature: &TypedSignature) -> String {
    let parameters: Vec<String> = signature
        .base
        .parameters
        .iter()
        .map(|p| {
            let data_type = signature.data_type(p);
            let optional = if p.required { "" } else { "?" };
            format!("{}{optional}: {}", p.name, data_type.as_str())
        })
        .collect();
    format!("parameters: {}", parameters.join(", "))
}

/// Go's strconv.ParseBool.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn value(signature: &TypedSignature, index: usize, raw: &Value) -> Result<ArgValue, String> {
    let parameter = &signature.base.parameters[index];
    let data_type = signature.data_type(parameter);
    let value = match (data_type, raw) {
        (DataType::Int, Value::String(text)) => text
            .trim()
            .parse::<i64>()
            .map(ArgValue::Int)
            .map_err(|_| format!("{} is not an integer", quoted(text)))?,
        (DataType::Int, Value::Number(number)) => match number.as_i64() {
            Some(i) => ArgValue::Int(i),
            None => match number.as_f64() {
                // JSON numbers may arrive as floats; whole ones are integers.
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => ArgValue::Int(f as i64),
                _ => {
                    return Err(format!(
                        "{} is not an integer",
                        quoted(&number.to_string()).bounded()
                    ));
                }
            },
        },
        (DataType::Bool, Value::String(text)) => parse_bool(text)
            .map(ArgValue::Bool)
            .ok_or_else(|| format!("{} is not a boolean", quoted(text)))?,
        (DataType::Bool, Value::Bool(b)) => ArgValue::Bool(*b),
        (t, Value::String(text)) if t.is_serialized_as_string() => ArgValue::String(text.clone()),
        (t, Value::Number(_) | Value::Bool(_)) => {
            return Err(format!(
                "{} given, but the parameter is of type {}",
                quoted(&raw.to_string()).bounded(),
                t.as_str()
            ));
        }
        (_, Value::Null | Value::Array(_) | Value::Object(_)) => {
            return Err("the value must be a string, an integer or a boolean".into());
        }
        (t, _) => return Err(format!("parameters of type {:?} take no value", t.as_str())),
    };
    match &value {
        ArgValue::Int(i) => {
            let below = parameter.minimum.is_some_and(|min| *i < min);
            let above = parameter.maximum.is_some_and(|max| *i > max);
            if below || above {
                let bound = |b: Option<i64>| b.map(|b| b.to_string()).unwrap_or_default();
                return Err(format!(
                    "{i} is out of range [{},{}]",
                    bound(parameter.minimum),
                    bound(parameter.maximum)
                ));
            }
        }
        ArgValue::String(text) => {
            if let Some(pattern) = &parameter.pattern {
                let regexp = Regex::new(pattern)
                    .map_err(|e| format!("its pattern {pattern:?} is invalid: {e}"))?;
                if !regexp.is_match(text) {
                    return Err(format!("{} does not match {pattern}", quoted(text)));
                }
            }
            if !parameter.allowed.is_empty() && !parameter.allowed.iter().any(|a| a == text) {
                return Err(format!(
                    "{} is not one of {}",
                    quoted(text),
                    parameter.allowed.join(", ")
                ));
            }
        }
        ArgValue::Bool(_) => {}
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FunctionArgument as Arg;
    use crate::signature::{ParameterBuilder, TypedFacet};
    use krm_plugin_api::FunctionSignature;
    use serde_json::json;

    fn signature(var_args: bool) -> TypedSignature {
        let (name, _) = ParameterBuilder::new("container-name", DataType::String, "")
            .pattern("^[a-z*-]+$")
            .build();
        let (replicas, _) = ParameterBuilder::new("replicas", DataType::Int, "")
            .range(Some(0), Some(100))
            .build();
        let (mode, _) = ParameterBuilder::new("mode", DataType::Enum, "")
            .allowed(&["all", "cap"])
            .optional()
            .build();
        let (flag, _) = ParameterBuilder::new("flag", DataType::Bool, "")
            .optional()
            .build();
        TypedSignature {
            base: FunctionSignature {
                name: "f".into(),
                parameters: vec![name, replicas, mode, flag],
                ..FunctionSignature::default()
            },
            typed: TypedFacet {
                var_args,
                ..TypedFacet::default()
            },
        }
    }

    fn run(var_args: bool, arguments: Vec<Arg>) -> Result<Arguments, Vec<String>> {
        check(
            &signature(var_args),
            &FunctionInvocation::new("f", arguments),
        )
    }

    #[test]
    fn positional_and_named_arguments_land_in_parameter_order() {
        let positional = run(false, vec![Arg::positional("web"), Arg::positional("3")]).unwrap();
        assert_eq!(
            positional.0,
            [
                ("container-name".to_owned(), ArgValue::String("web".into())),
                ("replicas".to_owned(), ArgValue::Int(3))
            ]
        );
        let named = run(
            false,
            vec![
                Arg::named("flag", "true"),
                Arg::named("replicas", json!(4.0)),
                Arg::named("container-name", "web"),
            ],
        )
        .unwrap();
        assert_eq!(named.get("replicas"), Some(&ArgValue::Int(4)));
        assert_eq!(named.0[2], ("flag".to_owned(), ArgValue::Bool(true)));
    }

    #[test]
    fn every_problem_is_named() {
        let problems = run(
            false,
            vec![
                Arg::named("replicas", "many"),
                Arg::named("mode", "floor"),
                Arg::named("colour", "red"),
                Arg::named("flag", json!([1])),
            ],
        )
        .unwrap_err();
        let text = problems.join("\n");
        for expected in [
            "\"colour\" is not a parameter",
            "missing required parameter container-name",
            "parameter replicas: \"many\" is not an integer",
            "parameter mode: \"floor\" is not one of all, cap",
            "parameter flag: the value must be a string, an integer or a boolean",
        ] {
            assert!(text.contains(expected), "{expected:?} not in\n{text}");
        }
        assert_eq!(problems.len(), 5, "{text}");
    }

    #[test]
    fn ranges_patterns_counts_and_order() {
        let err = |args| run(false, args).unwrap_err().join("\n");
        assert!(
            err(vec![Arg::positional("web"), Arg::positional(101)])
                .contains("out of range [0,100]")
        );
        assert!(
            err(vec![Arg::positional("Web!"), Arg::positional(1)])
                .contains("does not match ^[a-z*-]+$")
        );
        assert!(err(vec![Arg::positional("w"), Arg::positional(true)]).contains("of type int"));
        assert!(
            err(vec![Arg::positional("w"), Arg::positional(1.5)]).contains("1.5 is not an integer")
        );
        let five = (0..5).map(|_| Arg::positional("w")).collect();
        assert!(err(five).contains("too many arguments: got 5, expected at most 4"));
        assert!(
            err(vec![Arg::named("container-name", "w"), Arg::positional(1)])
                .contains("positional argument 2 follows named arguments")
        );
        assert!(
            err(vec![
                Arg::positional("w"),
                Arg::positional(1),
                Arg::named("replicas", 2)
            ])
            .contains("parameter replicas given more than once")
        );
    }

    #[test]
    fn varargs_repeat_the_last_parameter() {
        let args = run(
            true,
            vec![
                Arg::positional("w"),
                Arg::positional(1),
                Arg::positional("all"),
                Arg::positional("true"),
                Arg::positional("false"),
                Arg::named("flag", "1"),
            ],
        )
        .unwrap();
        let flags: Vec<_> = args.all("flag").into_iter().cloned().collect();
        assert_eq!(
            flags,
            [
                ArgValue::Bool(true),
                ArgValue::Bool(false),
                ArgValue::Bool(true)
            ]
        );
    }
}
