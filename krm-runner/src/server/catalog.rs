//! The `krmrunner.v1.FunctionCatalog` gRPC service: the [`FunctionIndex`] of the runtime.

use std::sync::Arc;

use krm_plugin_api::FunctionSignature;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_catalog_server::FunctionCatalog;
use tonic::{Request, Response, Status};

use crate::function_index::FunctionIndex;
use crate::runtime::Runtime;

fn to_message(instance: &str, signature: &FunctionSignature) -> pb::FunctionSignature {
    pb::FunctionSignature {
        name: signature.name.clone(),
        description: signature.description.clone(),
        images: signature.images.clone(),
        parameters: signature
            .parameters
            .iter()
            .map(|p| pb::Parameter {
                name: p.name.clone(),
                r#type: p.parameter_type.as_str().to_owned(),
                required: p.required,
                description: p.description.clone(),
                example: p.example.clone(),
                pattern: p.pattern.clone(),
                allowed: p.allowed.clone(),
                minimum: p.minimum,
                maximum: p.maximum,
            })
            .collect(),
        changes: signature.changes.clone(),
        validates: signature.validates,
        evaluator: instance.to_owned(),
    }
}

/// The `krmrunner.v1.FunctionCatalog` service. The index is built on the first request: a
/// server nobody asks does not build the function lists that plugins build on first use
/// (ConfigHub's typed functions), nor hold them in memory.
pub struct CatalogService {
    runtime: Arc<Runtime>,
    index: tokio::sync::OnceCell<FunctionIndex>,
}

impl CatalogService {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self {
            runtime,
            index: tokio::sync::OnceCell::new(),
        }
    }

    async fn index(&self) -> Result<&FunctionIndex, Status> {
        self.index
            .get_or_try_init(|| {
                let runtime = self.runtime.clone();
                async move {
                    // Plugins build their lists in their own time: off the async workers.
                    tokio::task::spawn_blocking(move || FunctionIndex::new(runtime.functions()))
                        .await
                        .map_err(|e| Status::internal(format!("listing the functions: {e}")))
                }
            })
            .await
    }
}

#[tonic::async_trait]
impl FunctionCatalog for CatalogService {
    async fn list_functions(
        &self,
        _: Request<pb::ListFunctionsRequest>,
    ) -> Result<Response<pb::ListFunctionsResponse>, Status> {
        let index = self.index().await?;
        Ok(Response::new(pb::ListFunctionsResponse {
            functions: index
                .entries()
                .iter()
                .map(|(i, s)| to_message(i, s))
                .collect(),
        }))
    }

    async fn get_function(
        &self,
        request: Request<pb::GetFunctionRequest>,
    ) -> Result<Response<pb::FunctionSignature>, Status> {
        let name = request.into_inner().name;
        match self.index().await?.find(&name) {
            Some((instance, signature)) => Ok(Response::new(to_message(instance, signature))),
            None => Err(Status::not_found(format!(
                "no evaluator implements a function named {name:?}"
            ))),
        }
    }
}
