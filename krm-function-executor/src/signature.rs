//! One function model: krm-runner's [`FunctionSignature`] (what `krm-runner functions` and the
//! FunctionCatalog serve) extended with the facets ConfigHub's executor needs. The extension
//! is a `typed` object next to the base fields in the same JSON, so a signature travels
//! through the plugin ABI's existing `functions()` JSON unchanged: readers that only know the
//! base type ignore it. Conversion to and from ConfigHub's form is lossless.

use std::collections::BTreeMap;

use krm_plugin_api::{FunctionSignature, Parameter, ParameterType};
use serde::{Deserialize, Serialize};

use crate::api::{self, DataType, FunctionOutput, FunctionType};

/// A typed function's signature: the base signature plus ConfigHub's facets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypedSignature {
    #[serde(flatten)]
    pub base: FunctionSignature,
    pub typed: TypedFacet,
}

/// What ConfigHub's signatures say beyond the base signature. Name, description, parameters
/// (with their rules) and `validates` stay in the base.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TypedFacet {
    /// The last parameter may repeat.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub var_args: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<FunctionOutput>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mutating: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hermetic: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    #[serde(default)]
    pub function_type: FunctionType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attribute_name: String,
    /// `*` for any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_resource_types: Vec<String>,
    /// Data types of the parameters whose base type does not determine it: structured inputs
    /// and formats (AttributeValueList, CEL, YAML, ...) travel as strings, and `enum` is a
    /// string with allowed values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameter_data_types: BTreeMap<String, DataType>,
}

impl TypedSignature {
    pub fn name(&self) -> &str {
        &self.base.name
    }

    pub fn validating(&self) -> bool {
        self.base.validates
    }

    pub fn mutating(&self) -> bool {
        self.typed.mutating
    }

    pub fn required_parameters(&self) -> usize {
        self.base.parameters.iter().filter(|p| p.required).count()
    }

    /// The ConfigHub data type of a parameter.
    pub fn data_type(&self, parameter: &Parameter) -> DataType {
        if let Some(&data_type) = self.typed.parameter_data_types.get(&parameter.name) {
            return data_type;
        }
        match parameter.parameter_type {
            ParameterType::Integer => DataType::Int,
            ParameterType::Boolean => DataType::Bool,
            ParameterType::String if !parameter.allowed.is_empty() => DataType::Enum,
            ParameterType::String => DataType::String,
            // Structured values travel as JSON text.
            ParameterType::Map | ParameterType::List | ParameterType::Object => DataType::Json,
        }
    }

    /// ConfigHub's form (`RequiredParameters` computed from the `required` flags).
    pub fn to_confighub(&self) -> api::FunctionSignature {
        api::FunctionSignature {
            function_name: self.base.name.clone(),
            parameters: self
                .base
                .parameters
                .iter()
                .map(|p| api::FunctionParameter {
                    parameter_name: p.name.clone(),
                    description: p.description.clone(),
                    required: p.required,
                    data_type: self.data_type(p),
                    example: p.example.clone().unwrap_or_default(),
                    regexp: p.pattern.clone().unwrap_or_default(),
                    min: p.minimum,
                    max: p.maximum,
                    enum_values: p.allowed.clone(),
                })
                .collect(),
            required_parameters: self.required_parameters(),
            var_args: self.typed.var_args,
            output_info: self.typed.output.clone(),
            mutating: self.typed.mutating,
            validating: self.base.validates,
            hermetic: self.typed.hermetic,
            idempotent: self.typed.idempotent,
            description: self.base.description.clone(),
            function_type: self.typed.function_type,
            attribute_name: self.typed.attribute_name.clone(),
            affected_resource_types: self.typed.affected_resource_types.clone(),
        }
    }

    /// From ConfigHub's form. A ValidationResult output makes the function validating, as
    /// ConfigHub's registration does.
    pub fn from_confighub(signature: &api::FunctionSignature) -> Self {
        let mut parameter_data_types = BTreeMap::new();
        let parameters = signature
            .parameters
            .iter()
            .map(|p| {
                let parameter_type = match p.data_type {
                    DataType::Int => ParameterType::Integer,
                    DataType::Bool => ParameterType::Boolean,
                    _ => ParameterType::String,
                };
                let parameter = Parameter {
                    name: p.parameter_name.clone(),
                    parameter_type,
                    required: p.required,
                    description: p.description.clone(),
                    example: (!p.example.is_empty()).then(|| p.example.clone()),
                    pattern: (!p.regexp.is_empty()).then(|| p.regexp.clone()),
                    allowed: p.enum_values.clone(),
                    minimum: p.min,
                    maximum: p.max,
                };
                let implied = match (parameter_type, p.data_type) {
                    (ParameterType::String, DataType::Enum) => !p.enum_values.is_empty(),
                    (ParameterType::String, DataType::String) => p.enum_values.is_empty(),
                    (ParameterType::String, _) => false,
                    _ => true,
                };
                if !implied {
                    parameter_data_types.insert(p.parameter_name.clone(), p.data_type);
                }
                parameter
            })
            .collect();
        let validating = signature.validating
            || signature
                .output_info
                .as_ref()
                .is_some_and(|o| o.output_type == api::OutputType::ValidationResult);
        TypedSignature {
            base: FunctionSignature {
                name: signature.function_name.clone(),
                description: signature.description.clone(),
                images: Vec::new(),
                parameters,
                changes: Vec::new(),
                validates: validating,
                examples: Vec::new(),
                pure: signature.hermetic && signature.idempotent,
            },
            typed: TypedFacet {
                var_args: signature.var_args,
                output: signature.output_info.clone(),
                mutating: signature.mutating,
                hermetic: signature.hermetic,
                idempotent: signature.idempotent,
                function_type: signature.function_type,
                attribute_name: signature.attribute_name.clone(),
                affected_resource_types: signature.affected_resource_types.clone(),
                parameter_data_types,
            },
        }
    }
}

/// Builds parameters tersely in function definitions.
pub struct ParameterBuilder(Parameter, Option<DataType>);

impl ParameterBuilder {
    pub fn new(name: &str, data_type: DataType, description: &str) -> Self {
        let parameter_type = match data_type {
            DataType::Int => ParameterType::Integer,
            DataType::Bool => ParameterType::Boolean,
            _ => ParameterType::String,
        };
        let extra = match data_type {
            DataType::Int | DataType::Bool | DataType::String | DataType::Enum => None,
            other => Some(other),
        };
        Self(
            Parameter {
                name: name.to_owned(),
                parameter_type,
                required: true,
                description: description.to_owned(),
                ..Parameter::default()
            },
            extra,
        )
    }

    pub fn optional(mut self) -> Self {
        self.0.required = false;
        self
    }

    pub fn example(mut self, example: &str) -> Self {
        self.0.example = Some(example.to_owned());
        self
    }

    pub fn pattern(mut self, regexp: &str) -> Self {
        self.0.pattern = Some(regexp.to_owned());
        self
    }

    pub fn range(mut self, minimum: Option<i64>, maximum: Option<i64>) -> Self {
        self.0.minimum = minimum;
        self.0.maximum = maximum;
        self
    }

    pub fn allowed(mut self, values: &[&str]) -> Self {
        self.0.allowed = values.iter().map(|v| (*v).to_owned()).collect();
        self
    }

    /// The parameter, and its data type when the base type cannot carry it.
    pub fn build(self) -> (Parameter, Option<DataType>) {
        (self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::OutputType;

    fn confighub_signature() -> api::FunctionSignature {
        serde_json::from_value(serde_json::json!({
            "FunctionName": "set-container-resources",
            "Parameters": [
                {"ParameterName": "container-name", "Description": "d", "Required": true,
                 "DataType": "string", "Example": "main", "Regexp": "^[a-z*]+$"},
                {"ParameterName": "operation", "Description": "", "Required": true,
                 "DataType": "enum", "EnumValues": ["all", "cap", "floor"]},
                {"ParameterName": "limit-factor", "Description": "", "Required": false,
                 "DataType": "int", "Min": 0, "Max": 10},
                {"ParameterName": "attributes", "Description": "", "Required": false,
                 "DataType": "AttributeValueList"},
                {"ParameterName": "expr", "Description": "", "Required": false,
                 "DataType": "CEL"},
                {"ParameterName": "flag", "Description": "", "Required": false,
                 "DataType": "bool"}
            ],
            "RequiredParameters": 2,
            "VarArgs": true,
            "OutputInfo": {"ResultName": "r", "Description": "x", "OutputType": "AttributeValueList"},
            "Mutating": true,
            "Validating": false,
            "Hermetic": true,
            "Idempotent": false,
            "Description": "Sets things",
            "FunctionType": "PathVisitor",
            "AttributeName": "container-resources",
            "AffectedResourceTypes": ["apps/v1/Deployment", "*"]
        }))
        .unwrap()
    }

    #[test]
    fn confighub_signatures_round_trip_through_the_extended_base() {
        let original = confighub_signature();
        let typed = TypedSignature::from_confighub(&original);
        assert_eq!(typed.to_confighub(), original);
        // Through the JSON a plugin hands the runner, and back.
        let json = serde_json::to_string(&typed).unwrap();
        let back: TypedSignature = serde_json::from_str(&json).unwrap();
        assert_eq!(back, typed);
        assert_eq!(back.to_confighub(), original);
    }

    #[test]
    fn readers_of_the_base_signature_ignore_the_extension() {
        let typed = TypedSignature::from_confighub(&confighub_signature());
        let json = serde_json::to_value(&typed).unwrap();
        assert!(json.get("typed").is_some());
        let base: FunctionSignature = serde_json::from_value(json).unwrap();
        assert_eq!(base, typed.base);
        assert_eq!(base.parameters[2].maximum, Some(10));
    }

    #[test]
    fn a_validation_result_output_makes_a_function_validating() {
        let mut signature = confighub_signature();
        signature.output_info = Some(FunctionOutput {
            result_name: "passed".into(),
            description: String::new(),
            output_type: OutputType::ValidationResult,
        });
        assert!(TypedSignature::from_confighub(&signature).validating());
    }
}
