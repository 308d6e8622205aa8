//! The functions evaluators implement themselves, with their signatures: `krm-runner functions`
//! and the `krmrunner.v1.FunctionCatalog` gRPC service.

use std::fmt::Write as _;
use std::sync::Arc;

use krm_plugin_api::{FunctionSignature, Parameter, pick_function};
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_catalog_server::FunctionCatalog;
use tonic::{Request, Response, Status};

use crate::runtime::Runtime;

/// Every function some instance implements, with that instance's name, in instance order.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
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

impl Catalog {
    pub fn new(entries: Vec<(String, FunctionSignature)>) -> Self {
        Self { entries }
    }

    /// The function `name` picks (see [`pick_function`]), the instances asked in
    /// [`asking_order`].
    pub fn find(&self, name: &str) -> Option<&(String, FunctionSignature)> {
        let entries = asking_order(&self.entries, name, |(instance, _)| instance);
        pick_function(entries, name, |(_, signature)| signature)
    }

    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(_, s)| s.name.as_str()).collect()
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

/// The `krmrunner.v1.FunctionCatalog` service. The catalog is listed on the first request: a
/// server nobody asks does not build the function lists that plugins build on first use
/// (ConfigHub's typed functions), nor hold them in memory.
pub struct CatalogService {
    runtime: Arc<Runtime>,
    catalog: tokio::sync::OnceCell<Catalog>,
}

impl CatalogService {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self {
            runtime,
            catalog: tokio::sync::OnceCell::new(),
        }
    }

    async fn catalog(&self) -> Result<&Catalog, Status> {
        self.catalog
            .get_or_try_init(|| {
                let runtime = self.runtime.clone();
                async move {
                    // Plugins build their lists in their own time: off the async workers.
                    tokio::task::spawn_blocking(move || Catalog::new(runtime.functions()))
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
        let catalog = self.catalog().await?;
        Ok(Response::new(pb::ListFunctionsResponse {
            functions: catalog
                .entries
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
        match self.catalog().await?.find(&name) {
            Some((instance, signature)) => Ok(Response::new(to_message(instance, signature))),
            None => Err(Status::not_found(format!(
                "no evaluator implements a function named {name:?}"
            ))),
        }
    }
}
