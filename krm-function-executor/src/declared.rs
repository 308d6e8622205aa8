//! Attributes declared in configuration rather than in code: each becomes an attribute of
//! the path registry and a `get-X`/`set-X` pair, exactly as the built-in ones are, so that
//! operators add functions without a rebuild.
//!
//! ```yaml
//! attributes:
//!   - name: team                       # get-team, set-team
//!     description: the owning team
//!     data_type: string                # string (default), int or bool
//!     upsert: true                     # set-team creates missing keys
//!     paths:                           # resource type (or *) -> paths
//!       apps/v1/Deployment: [metadata.labels.team, spec.template.metadata.labels.team]
//!       v1/Service: [metadata.labels.team]
//!   - name: container-port
//!     data_type: int
//!     parameters: [container-name]     # one per %s in every path, in order
//!     paths:
//!       apps/v1/Deployment: ["spec.template.spec.containers.?name:container-name=%s.ports.0.containerPort"]
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use krm_plugin_api::ConfigError;
use serde::{Deserialize, Serialize};

use crate::api::DataType;
use crate::executor::Executor;
use crate::functions::TypedFunction;
use crate::functions::path_visitor::AttributeFunctions;
use crate::path::UnresolvedPath;
use crate::registry::{PathRegistry, PathVisitorInfo};
use crate::signature::ParameterBuilder;

/// Declared attributes beyond this count are refused.
pub const MAX_DECLARED_ATTRIBUTES: usize = 1024;
/// Paths per declared attribute beyond this count are refused.
pub const MAX_DECLARED_PATHS: usize = 1024;

/// The value type of a declared attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeclaredType {
    #[default]
    String,
    Int,
    Bool,
}

impl DeclaredType {
    fn data_type(self) -> DataType {
        match self {
            DeclaredType::String => DataType::String,
            DeclaredType::Int => DataType::Int,
            DeclaredType::Bool => DataType::Bool,
        }
    }
}

/// One attribute, with the paths where each resource type holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributeDeclaration {
    /// The attribute; its functions are `get-NAME` and `set-NAME`.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub data_type: DeclaredType,
    /// Whether the setter creates missing keys.
    #[serde(default)]
    pub upsert: bool,
    /// Whether there is a setter at all.
    #[serde(default = "yes")]
    pub setter: bool,
    /// Path parameters (string-valued), filling each path's `%s` in order; they come before
    /// the value in the setter's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<String>,
    /// Resource type (`group/version/Kind`, `version/Kind`, or `*`) -> paths.
    pub paths: BTreeMap<String, Vec<String>>,
}

fn yes() -> bool {
    true
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_resource_type(resource_type: &str) -> bool {
    resource_type == "*"
        || (resource_type.split('/').count() >= 2
            && resource_type.split('/').count() <= 3
            && resource_type.split('/').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
            }))
}

impl AttributeDeclaration {
    /// Every problem of this declaration, each naming its field below `at`.
    fn problems(&self, at: &str, taken: &BTreeSet<String>) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        if !is_name(&self.name) {
            problems.push(ConfigError::field(format!("{at}.name"), format!("{:?} is not a name of lower-case letters, digits and inner dashes (at most 63)", self.name)));
        } else {
            for function in [format!("get-{}", self.name), format!("set-{}", self.name)] {
                if taken.contains(&function) {
                    problems.push(ConfigError::field(
                        format!("{at}.name"),
                        format!("{function} already exists"),
                    ));
                }
            }
        }
        for (i, parameter) in self.parameters.iter().enumerate() {
            if !is_name(parameter) || *parameter == self.name {
                problems.push(ConfigError::field(format!("{at}.parameters[{i}]"), format!("{parameter:?} is not a parameter name (lower-case letters, digits, inner dashes; not the attribute's)")));
            }
        }
        if self.paths.is_empty() {
            problems.push(ConfigError::field(
                format!("{at}.paths"),
                "empty; give at least one resource type",
            ));
        }
        let count: usize = self.paths.values().map(Vec::len).sum();
        if count > MAX_DECLARED_PATHS {
            problems.push(ConfigError::field(
                format!("{at}.paths"),
                format!("{count} paths, more than the limit of {MAX_DECLARED_PATHS}"),
            ));
            return problems;
        }
        for (resource_type, paths) in &self.paths {
            let at = format!("{at}.paths[{resource_type:?}]");
            if !is_resource_type(resource_type) {
                problems.push(ConfigError::field(at.as_str(), format!("{resource_type:?} is not a resource type such as apps/v1/Deployment, v1/Service or *")));
            }
            if paths.is_empty() {
                problems.push(ConfigError::field(at.as_str(), "no paths"));
            }
            for (j, path) in paths.iter().enumerate() {
                let at = format!("{at}[{j}]");
                if let Err(e) = UnresolvedPath::parse(&path.replace("%s", "x")) {
                    problems.push(ConfigError::field(at.as_str(), e.to_string()));
                    continue;
                }
                if path.contains('#') {
                    problems.push(ConfigError::field(at.as_str(), format!("{path:?} selects part of a value (#); declared attributes take whole values")));
                }
                let placeholders = path.matches("%s").count();
                if placeholders != self.parameters.len() {
                    problems.push(ConfigError::field(
                        at.as_str(),
                        format!(
                            "{path:?} has {placeholders} %s, but {} parameters are declared",
                            self.parameters.len()
                        ),
                    ));
                }
            }
        }
        problems
    }

    fn register(&self, registry: &mut PathRegistry) -> Result<(), String> {
        let getter = format!("get-{}", self.name);
        let setter = format!("set-{}", self.name);
        let setters: &[&str] = if self.setter { &[&setter] } else { &[] };
        for (resource_type, paths) in &self.paths {
            for path in paths {
                let mut entry = PathVisitorInfo::new(&self.name, path, self.data_type.data_type())
                    .with_functions(Some(&getter), setters);
                if !self.description.is_empty() {
                    entry = entry.described(&self.description);
                }
                registry
                    .register(&[resource_type.as_str()], entry)
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    fn functions(&self, registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
        let mut parameters: Vec<ParameterBuilder> = self
            .parameters
            .iter()
            .map(|name| {
                ParameterBuilder::new(
                    name,
                    DataType::String,
                    &format!("The {name} of the value to "),
                )
            })
            .collect();
        let description = if self.description.is_empty() {
            format!("Value of the attribute {}", self.name)
        } else {
            self.description.clone()
        };
        parameters.push(ParameterBuilder::new(
            &self.name,
            self.data_type.data_type(),
            &description,
        ));
        let described = format!(" the {} attribute (declared in configuration)", self.name);
        AttributeFunctions {
            stem: &self.name,
            attribute: &self.name,
            parameters,
            description: &described,
            setter: self.setter,
            upsert: self.upsert,
        }
        .build(registry)
    }
}

impl Executor {
    /// The Kubernetes/YAML executor with `declared` attributes added to its path registry
    /// and their `get-X`/`set-X` pairs to its functions. Every problem is reported, each
    /// naming its field as `attributes[i]....`.
    pub fn kubernetes_with(declared: &[AttributeDeclaration]) -> Result<Self, ConfigError> {
        if declared.is_empty() {
            return Ok(Self::kubernetes());
        }
        if declared.len() > MAX_DECLARED_ATTRIBUTES {
            return Err(ConfigError::field(
                "attributes",
                format!(
                    "{} declared, more than the limit of {MAX_DECLARED_ATTRIBUTES}",
                    declared.len()
                ),
            ));
        }
        let built_in = Self::kubernetes();
        let mut taken: BTreeSet<String> = built_in
            .functions()
            .map(|f| f.signature().name().to_owned())
            .collect();
        let mut problems = Vec::new();
        let mut registry = built_in.registry().clone();
        for (i, declaration) in declared.iter().enumerate() {
            let at = format!("attributes[{i}]");
            let found = declaration.problems(&at, &taken);
            if registry.attribute(&declaration.name).is_some() && found.is_empty() {
                problems.push(ConfigError::field(
                    format!("{at}.name"),
                    format!("the attribute {} is already registered", declaration.name),
                ));
                continue;
            }
            if !found.is_empty() {
                problems.extend(found);
                continue;
            }
            if let Err(problem) = declaration.register(&mut registry) {
                problems.push(ConfigError::field(at, problem));
                continue;
            }
            taken.insert(format!("get-{}", declaration.name));
            taken.insert(format!("set-{}", declaration.name));
        }
        if let Some(problems) = ConfigError::all(problems) {
            return Err(problems);
        }
        let mut executor = Self::empty(registry);
        for function in built_in.functions() {
            executor
                .register(function.clone())
                .map_err(|e| ConfigError::new(e.to_string()))?;
        }
        for declaration in declared {
            for function in declaration.functions(executor.registry()) {
                executor
                    .register(function)
                    .map_err(|e| ConfigError::field("attributes", e.to_string()))?;
            }
        }
        Ok(executor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{FunctionArgument, FunctionInvocation, FunctionInvocationRequest};

    fn declarations(value: serde_json::Value) -> Vec<AttributeDeclaration> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_problem_is_reported_naming_its_field() {
        let declared = declarations(json!([
            {"name": "Team", "paths": {}},
            {"name": "replicas", "paths": {"apps/v1/Deployment": ["spec.replicas"]}},
            {"name": "port", "parameters": ["container-name"], "data_type": "int",
             "paths": {"apps v1": ["spec.x"], "v1/Service": ["spec..x", "spec.ports.0.port"]}},
            {"name": "tier", "paths": {"v1/Service": []}}
        ]));
        let problems: Vec<String> = Executor::kubernetes_with(&declared)
            .err()
            .unwrap()
            .problems()
            .iter()
            .map(ToString::to_string)
            .collect();
        let expected = [
            "attributes[0].name: \"Team\" is not a name",
            "attributes[0].paths: empty",
            "attributes[1].name: get-replicas already exists",
            "attributes[1].name: set-replicas already exists",
            "attributes[2].paths[\"apps v1\"]: \"apps v1\" is not a resource type",
            "attributes[2].paths[\"apps v1\"][0]: \"spec.x\" has 0 %s, but 1 parameters are declared",
            "attributes[2].paths[\"v1/Service\"][0]:",
            "attributes[2].paths[\"v1/Service\"][1]: \"spec.ports.0.port\" has 0 %s",
            "attributes[3].paths[\"v1/Service\"]: no paths",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        for (problem, expected) in problems.iter().zip(expected) {
            assert!(problem.starts_with(expected), "{problem} / {expected}");
        }
    }

    #[test]
    fn declared_attributes_get_a_registry_entry_and_working_functions() {
        let declared = declarations(json!([{
            "name": "team",
            "description": "the owning team",
            "upsert": true,
            "paths": {
                "apps/v1/Deployment": ["metadata.labels.team"],
                "v1/Service": ["metadata.labels.team"]
            }
        }, {
            "name": "container-port",
            "data_type": "int",
            "parameters": ["container-name"],
            "paths": {"apps/v1/Deployment":
                ["spec.template.spec.containers.?name:container-name=%s.ports.0.containerPort"]}
        }]));
        let executor = Executor::kubernetes_with(&declared).unwrap();
        let team = executor.registry().attribute("team").unwrap();
        assert_eq!(team.len(), 2);
        let listed = executor.list();
        assert!(listed["set-team"].mutating);
        assert_eq!(listed["set-container-port"].parameters.len(), 2);
        let data = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # front
spec:
  template:
    spec:
      containers:
      - name: main
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    team: a
";
        let request = FunctionInvocationRequest {
            config_data: data.as_bytes().to_vec(),
            function_invocations: vec![
                FunctionInvocation::new("set-team", vec![FunctionArgument::positional("b")]),
                FunctionInvocation::new(
                    "set-container-port",
                    vec![
                        FunctionArgument::positional("main"),
                        FunctionArgument::positional(8080),
                    ],
                ),
                FunctionInvocation::new("get-team", Vec::new()),
            ],
            ..FunctionInvocationRequest::default()
        };
        let response = executor.invoke(&request).unwrap();
        assert!(response.success, "{:?}", response.error_messages);
        let text = String::from_utf8(response.config_data).unwrap();
        assert!(
            text.contains("  name: web # front\n  labels:\n    team: b\n"),
            "{text}"
        );
        assert!(text.contains("containerPort: 8080"), "{text}");
        assert!(text.ends_with("  labels:\n    team: b\n"), "{text}");
        let output: serde_json::Value = serde_json::from_slice(&response.output).unwrap();
        assert_eq!(output.as_array().unwrap().len(), 2, "{output}");
    }
}
