//! gRPC contracts of krm-runner.
//!
//! [`evaluator`] is Porch's `evaluator.FunctionEvaluator` service, byte-compatible with
//! `nephio-project/porch/func/evaluator/evaluator.proto`; both the runner and Porch-style clients
//! use it.

/// Porch's function-evaluator service (package `evaluator`).
pub mod evaluator {
    tonic::include_proto!("evaluator");
}
