//! `multi`: asks a list of evaluator instances in order and answers with the first that serves.
//!
//! Only a decline (NotFound) falls through to the next instance; any other error is the answer,
//! so a function that fails is never retried elsewhere. The order is exactly the configured
//! `chain` (Porch built its chain from a Go map, so its order changed from start to start).
//!
//! ```yaml
//! default: {plugin: multi, config: {chain: [builtin, exec, pod]}}
//! ```

use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, ErrorKind, EvalError, EvalResponse, Evaluator,
    EvaluatorHandle, Plugin, export_plugin,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiConfig {
    /// Instance names, asked in this order.
    chain: Vec<String>,
}

pub struct Multi {
    chain: Vec<EvaluatorHandle>,
}

impl Evaluator for Multi {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let mut declined = Vec::new();
        let mut last_decline = None;
        let mut reasons = Vec::new();
        for evaluator in &self.chain {
            match evaluator.evaluate(context, image, resource_list) {
                Ok(mut response) => {
                    declined.append(&mut response.declined);
                    response.declined = declined;
                    return Ok(response);
                }
                Err(mut error) if error.kind == ErrorKind::NotFound => {
                    declined.append(&mut error.declined);
                    declined.push(evaluator.name().to_owned());
                    reasons.push(error.message.clone());
                    last_decline = Some(error);
                }
                Err(mut error) => {
                    declined.append(&mut error.declined);
                    error.declined = declined;
                    return Err(error);
                }
            }
        }
        // Porch answers with the last decline's message: `function "<image>" not found`. For a
        // call with a tag constraint, evaluators that know the image say which versions they
        // have: all of them are kept.
        let plain = EvalError::not_found(image);
        reasons.retain(|reason| *reason != plain.message);
        let mut error = match last_decline {
            _ if context.requested_tag().is_some() && !reasons.is_empty() => {
                EvalError::new(ErrorKind::NotFound, reasons.join("; "))
            }
            Some(error) if error.message.contains(image) => error,
            _ => plain,
        };
        error.kind = ErrorKind::NotFound;
        error.declined = declined;
        Err(error)
    }
}

pub struct MultiPlugin;

impl Plugin for MultiPlugin {
    const NAME: &'static str = "multi";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "asks a chain of evaluator instances in order; only a decline falls through";
    type Config = MultiConfig;
    type Evaluator = Multi;

    fn build(config: MultiConfig, context: &BuildContext) -> Result<Multi, ConfigError> {
        if config.chain.is_empty() {
            return Err(ConfigError::field(
                "chain",
                "must name at least one evaluator",
            ));
        }
        let mut chain = Vec::with_capacity(config.chain.len());
        let mut problems = Vec::new();
        for (index, name) in config.chain.iter().enumerate() {
            if name == context.instance_name() {
                problems.push(format!("chain[{index}]: {name:?} is this instance itself"));
                continue;
            }
            if config.chain[..index].contains(name) {
                problems.push(format!("chain[{index}]: {name:?} is listed twice"));
                continue;
            }
            match context.evaluator(name) {
                Some(handle) => chain.push(handle),
                None => problems.push(format!(
                    "chain[{index}]: no evaluator instance named {name:?}"
                )),
            }
        }
        if problems.is_empty() {
            Ok(Multi { chain })
        } else {
            Err(ConfigError::new(problems.join("; ")))
        }
    }
}

export_plugin!(MultiPlugin);
