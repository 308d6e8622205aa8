//! `multi`: asks a list of evaluator instances in order and answers with the first that serves.
//!
//! Only a decline (NotFound) falls through to the next instance; any other error is the answer,
//! so a function that fails is never retried elsewhere. The order is exactly the configured
//! `chain` (Porch built its chain from a Go map, so its order changed from start to start).
//!
//! ```yaml
//! default: {plugin: multi, config: {chain: [builtin, exec, pod]}}
//! ```

use std::ops::ControlFlow;

use krm_plugin_api::{
    BuildContext, CallContext, Chain, ConfigError, EvalError, EvalResponse, Evaluator,
    EvaluatorHandle, FunctionConfigRoute, Plugin, Probe, ProbeOutcome, export_plugin,
};
use serde::Deserialize;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiConfig {
    /// Instance names, asked in this order.
    #[schemars(example = ["builtin", "exec", "pod"])]
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
        let mut chain = Chain::default();
        for evaluator in &self.chain {
            let outcome = evaluator.evaluate(context, image, resource_list);
            if let ControlFlow::Break(answer) = chain.answer(evaluator.name(), image, outcome) {
                return answer;
            }
        }
        // Porch's wording, `function "<image>" not found`, then why each evaluator declined.
        Err(chain.all_declined(image))
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
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
                problems.push(ConfigError::field(
                    format!("chain[{index}]"),
                    format!("{name:?} is this instance itself"),
                ));
                continue;
            }
            if config.chain[..index].contains(name) {
                problems.push(ConfigError::field(
                    format!("chain[{index}]"),
                    format!("{name:?} is listed twice"),
                ));
                continue;
            }
            match context.evaluator(name) {
                Some(handle) => chain.push(handle),
                None => problems.push(ConfigError::field(
                    format!("chain[{index}]"),
                    format!("no evaluator instance named {name:?}"),
                )),
            }
        }
        match ConfigError::all(problems) {
            None => Ok(Multi { chain }),
            Some(problems) => Err(problems),
        }
    }
}

export_plugin!(MultiPlugin);

#[cfg(test)]
mod tests {
    use super::*;
    use krm_plugin_api::ErrorKind;
    use krm_plugin_api::testing::PluginTester;
    use serde_json::json;

    /// An instance that always answers the same way, to put in a chain.
    struct Scripted {
        answer: String,
        name: String,
    }

    #[derive(Deserialize, schemars::JsonSchema)]
    struct ScriptedConfig {
        answer: String,
    }

    impl Evaluator for Scripted {
        fn evaluate(
            &self,
            _: &CallContext<'_>,
            image: &str,
            resource_list: &[u8],
        ) -> Result<EvalResponse, EvalError> {
            match self.answer.as_str() {
                "serve" => Ok(EvalResponse::new(
                    resource_list.to_vec(),
                    self.name.clone().into_bytes(),
                )),
                "decline" => Err(EvalError::declined_because(
                    image,
                    format!("{} serves nothing", self.name),
                )),
                _ => Err(EvalError::failed(format!("{} failed", self.name))),
            }
        }
    }

    struct ScriptedPlugin;

    impl Plugin for ScriptedPlugin {
        const NAME: &'static str = "scripted";
        const VERSION: &'static str = "0.0.0";
        const DESCRIPTION: &'static str = "answers as configured";
        type Config = ScriptedConfig;
        type Evaluator = Scripted;

        fn build(config: ScriptedConfig, context: &BuildContext) -> Result<Scripted, ConfigError> {
            Ok(Scripted {
                answer: config.answer,
                name: context.instance_name().to_owned(),
            })
        }
    }

    /// A tester holding one scripted instance per `(name, answer)`.
    fn instances(answers: &[(&str, &str)]) -> PluginTester {
        let tester = PluginTester::new();
        for (name, answer) in answers {
            tester
                .build::<ScriptedPlugin>(name, json!({ "answer": answer }))
                .unwrap();
        }
        tester
    }

    #[test]
    fn the_first_instance_that_serves_answers_and_declines_are_listed() {
        let tester = instances(&[("a", "decline"), ("b", "serve"), ("c", "serve")]);
        let multi = tester
            .build::<MultiPlugin>("default", json!({"chain": ["a", "b", "c"]}))
            .unwrap();
        let response = multi.evaluate("fn", b"items: []\n").unwrap();
        assert_eq!(response.log, b"b");
        assert_eq!(response.served_by.as_deref(), Some("b"));
        assert_eq!(response.declined, ["a"]);
    }

    #[test]
    fn a_failure_is_the_answer_and_is_not_retried_further_down() {
        let tester = instances(&[("a", "fail"), ("b", "serve")]);
        let multi = tester
            .build::<MultiPlugin>("default", json!({"chain": ["a", "b"]}))
            .unwrap();
        let error = multi.evaluate("fn", b"items: []\n").unwrap_err();
        assert_eq!(error.kind, ErrorKind::Failed);
        assert_eq!(error.message, "a failed");
    }

    #[test]
    fn when_every_instance_declines_each_reason_is_given() {
        let tester = instances(&[("a", "decline"), ("b", "decline")]);
        let multi = tester
            .build::<MultiPlugin>("default", json!({"chain": ["a", "b"]}))
            .unwrap();
        let error = multi.evaluate("fn", b"items: []\n").unwrap_err();
        assert_eq!(error.kind, ErrorKind::NotFound);
        assert!(
            error.message.contains("a serves nothing"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("b serves nothing"),
            "{}",
            error.message
        );
        assert_eq!(error.declined, ["a", "b"]);
    }

    #[test]
    fn every_chain_problem_is_reported_at_once_with_its_field() {
        let tester = instances(&[("a", "serve")]);
        let error = tester
            .build::<MultiPlugin>(
                "default",
                json!({"chain": ["a", "default", "a", "nowhere"]}),
            )
            .err()
            .unwrap();
        let problems: Vec<_> = error
            .problems()
            .iter()
            .map(|problem| {
                (
                    problem.field.as_deref().unwrap_or(""),
                    problem.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            problems,
            [
                ("chain[1]", "\"default\" is this instance itself"),
                ("chain[2]", "\"a\" is listed twice"),
                ("chain[3]", "no evaluator instance named \"nowhere\""),
            ]
        );
    }

    #[test]
    fn a_typo_in_the_config_names_the_field() {
        let error = PluginTester::new()
            .build::<MultiPlugin>("default", json!({"chian": ["a"]}))
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("unknown field `chian`"),
            "{error}"
        );
    }
}
