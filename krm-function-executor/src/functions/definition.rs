//! How a typed function is defined: one described static value per function, listed once in
//! [`crate::functions::BUILT_IN`], as the builtin plugin lists its catalog functions. A plugin
//! contributing typed functions defines them the same way.

use std::sync::Arc;

use crate::api::{FunctionOutput, FunctionType, OutputType};
use crate::args::Arguments;
use crate::functions::{Call, FunctionError, Outcome, TypedFunction};
use crate::signature::{ParameterBuilder, TypedFacet, TypedSignature};
use crate::toolchain::Toolchain;

/// A typed function: what it is called, what it takes, what it does, for which toolchains, and
/// the code that does it.
pub struct Definition {
    pub name: &'static str,
    pub description: &'static str,
    /// Its parameters as `toolchain` takes them (an argument in the toolchain's own format
    /// has the toolchain's data type).
    pub parameters: fn(Toolchain) -> Vec<ParameterBuilder>,
    pub kind: FunctionKind,
    /// The toolchains it is built in for.
    pub toolchains: &'static [Toolchain],
    pub run: fn(&Call) -> Result<Outcome, FunctionError>,
    pub options: Options,
}

/// What a function does with the unit, and what it answers.
#[derive(Debug, Clone, Copy)]
pub enum FunctionKind {
    /// Reads the unit and answers `output`, called `result` and described by `description`.
    Readonly {
        result: &'static str,
        description: &'static str,
        output: OutputType,
    },
    /// Judges the unit: answers a `ValidationResult` called `result`, described by
    /// `description` (a function that filters is one too).
    Validating {
        result: &'static str,
        description: &'static str,
    },
    /// Changes the unit and answers nothing else.
    Mutating,
    /// Neither reads nor changes the unit (it waits, or fails): answers nothing.
    Quiet,
}

/// What most functions share and a few do otherwise.
#[derive(Clone, Copy)]
pub struct Options {
    /// Running it twice leaves what running it once does.
    pub idempotent: bool,
    /// Its last parameter may repeat.
    pub var_args: bool,
    /// Problems with checked arguments that only the function can see (an expression that
    /// does not compile), each naming its parameter; asked before the function runs.
    pub check: Option<fn(&Arguments) -> Vec<String>>,
    /// ConfigHub's implementation pattern for it: a few functions written by hand are
    /// registered as path visitors.
    pub function_type: FunctionType,
    /// The registered attribute it reads or writes, as ConfigHub names it; empty if none.
    pub attribute_name: &'static str,
}

impl Options {
    /// Idempotent, no repeated parameter, no check of its own, custom, no attribute.
    pub const DEFAULT: Options = Options {
        idempotent: true,
        var_args: false,
        check: None,
        function_type: FunctionType::Custom,
        attribute_name: "",
    };
}

/// Every toolchain.
pub const ALL_TOOLCHAINS: &[Toolchain] = &Toolchain::ALL;
/// Kubernetes/YAML alone.
pub const KUBERNETES: &[Toolchain] = &[Toolchain::KubernetesYaml];
/// AppConfig/Properties alone.
pub const PROPERTIES: &[Toolchain] = &[Toolchain::AppConfigProperties];

impl Definition {
    /// Its signature for `toolchain`.
    pub fn signature(&self, toolchain: Toolchain) -> TypedSignature {
        let (output, mutating) = match self.kind {
            FunctionKind::Readonly {
                result,
                description,
                output,
            } => (Some((result, description, output)), false),
            FunctionKind::Validating {
                result,
                description,
            } => (
                Some((result, description, OutputType::ValidationResult)),
                false,
            ),
            FunctionKind::Mutating => (None, true),
            FunctionKind::Quiet => (None, false),
        };
        let mut signature = signature(
            self.name,
            self.description,
            (self.parameters)(toolchain),
            output,
            mutating,
        );
        signature.typed.idempotent = self.options.idempotent;
        signature.typed.var_args = self.options.var_args;
        signature.typed.function_type = self.options.function_type;
        signature.typed.attribute_name = self.options.attribute_name.to_owned();
        signature
    }

    /// The function, as `toolchain`'s executor registers it.
    pub fn function(&'static self, toolchain: Toolchain) -> Arc<dyn TypedFunction> {
        Arc::new(Defined {
            signature: self.signature(toolchain),
            definition: self,
        })
    }
}

/// The signature of a function that is not a path visitor: `output` is its result's name,
/// description and type.
pub fn signature(
    name: &str,
    description: &str,
    parameters: Vec<ParameterBuilder>,
    output: Option<(&str, &str, OutputType)>,
    mutating: bool,
) -> TypedSignature {
    let mut parameter_data_types = std::collections::BTreeMap::new();
    let parameters = parameters
        .into_iter()
        .map(|builder| {
            let (parameter, data_type) = builder.build();
            if let Some(data_type) = data_type {
                parameter_data_types.insert(parameter.name.clone(), data_type);
            }
            parameter
        })
        .collect();
    let output = output.map(|(name, description, output_type)| FunctionOutput {
        result_name: name.to_owned(),
        description: description.to_owned(),
        output_type,
    });
    let validates = output
        .as_ref()
        .is_some_and(|o| o.output_type == OutputType::ValidationResult);
    TypedSignature {
        base: krm_plugin_api::FunctionSignature {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
            validates,
            ..Default::default()
        },
        typed: TypedFacet {
            output,
            mutating,
            hermetic: true,
            idempotent: true,
            affected_resource_types: vec!["*".to_owned()],
            parameter_data_types,
            ..TypedFacet::default()
        },
    }
}

/// A [`Definition`] with its signature for one toolchain.
struct Defined {
    signature: TypedSignature,
    definition: &'static Definition,
}

impl TypedFunction for Defined {
    fn signature(&self) -> &TypedSignature {
        &self.signature
    }

    fn check(&self, arguments: &Arguments) -> Vec<String> {
        self.definition
            .options
            .check
            .map_or_else(Vec::new, |check| check(arguments))
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError> {
        (self.definition.run)(call)
    }
}

/// The parameters of a function that takes none.
pub fn no_parameters(_: Toolchain) -> Vec<ParameterBuilder> {
    Vec::new()
}
