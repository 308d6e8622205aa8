//! gRPC contracts of krm-runner.
//!
//! [`evaluator`] is Porch's `evaluator.FunctionEvaluator` service, byte-compatible with
//! `nephio-project/porch/func/evaluator/evaluator.proto`; both the runner and Porch-style clients
//! use it. [`krmrunner::v1`] holds krm-runner's own services, kept out of Porch's package.

/// krm-runner's extensions (package `krmrunner.v1`): the function catalog and ConfigHub's typed
/// function executor.
pub mod krmrunner {
    pub mod v1 {
        tonic::include_proto!("krmrunner.v1");
        include!(concat!(env!("OUT_DIR"), "/clients/krmrunner.v1.rs"));
    }
}

/// Porch's function-evaluator service (package `evaluator`).
pub mod evaluator {
    tonic::include_proto!("evaluator");
    include!(concat!(env!("OUT_DIR"), "/clients/evaluator.rs"));
}

pub mod serving;

impl krmrunner::v1::Invocation {
    /// `function` with positional string arguments, as `krm-runner do` (fctl's `do`) passes
    /// them.
    pub fn positional(function: &str, arguments: &[&str]) -> Self {
        Self {
            function_name: function.to_owned(),
            arguments: arguments
                .iter()
                .map(|value| krmrunner::v1::Argument {
                    parameter_name: String::new(),
                    value: Some(krmrunner::v1::argument::Value::StringValue(
                        (*value).to_owned(),
                    )),
                })
                .collect(),
        }
    }
}

impl krmrunner::v1::InvokeRequest {
    /// A sequence of `invocations` over a Kubernetes/YAML unit's `config_data`, with the
    /// other fields at their defaults.
    pub fn kubernetes(config_data: &str, invocations: Vec<krmrunner::v1::Invocation>) -> Self {
        Self {
            toolchain: "Kubernetes/YAML".to_owned(),
            config_data: config_data.as_bytes().to_vec(),
            invocations,
            ..Default::default()
        }
    }
}
