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
