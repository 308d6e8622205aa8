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
    EvaluatorHandle, Plugin, Probe, ProbeOutcome, Route, export_plugin,
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
        let mut reasons = Vec::new();
        for evaluator in &self.chain {
            match evaluator.evaluate(context, image, resource_list) {
                Ok(mut response) => {
                    declined.append(&mut response.declined);
                    response.declined = declined;
                    return Ok(response);
                }
                Err(mut error) if error.kind == ErrorKind::NotFound => {
                    reasons.push(error.decline_reason(image, evaluator.name()));
                    declined.append(&mut error.declined);
                    declined.push(evaluator.name().to_owned());
                }
                Err(mut error) => {
                    declined.append(&mut error.declined);
                    error.declined = declined;
                    return Err(error);
                }
            }
        }
        // Porch's wording, `function "<image>" not found`, then why each evaluator declined.
        Err(EvalError::all_declined(image, &reasons, declined))
    }

    fn probe(&self, image: &str, route: Option<&Route>) -> Probe {
        let mut declined = Vec::new();
        for evaluator in &self.chain {
            let mut resolution = evaluator.probe(image, route);
            declined.append(&mut resolution.declined);
            if resolution.answer.is_some() {
                return Probe::Delegated(ProbeOutcome {
                    declined,
                    answer: resolution.answer,
                });
            }
        }
        Probe::Delegated(ProbeOutcome {
            declined,
            answer: None,
        })
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
