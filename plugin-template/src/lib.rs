//! `stamp`: an example krm-runner evaluator plugin. For the images it is configured to serve,
//! it adds the configured annotations to every resource; it declines every other image, so the
//! runner's chain asks the next evaluator.
//!
//! ```yaml
//! evaluators:
//!   stamp: {plugin: stamp, config: {images: [example.com/stamp:v1], annotations: {team: platform}}}
//!   default: {plugin: multi, config: {chain: [stamp, builtin, exec]}}
//! ```

use std::collections::BTreeMap;

use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator, Example,
    FunctionConfigRoute, FunctionSignature, Parameter, Plugin, Probe, export_plugin,
};
use schemars::JsonSchema;
use serde::Deserialize;
use yaml_serde::{Mapping, Value};

/// The instance's `config:` section. Unknown keys are errors, so typos are caught at start-up.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StampConfig {
    /// The images this instance answers.
    #[schemars(example = example_images())]
    images: Vec<String>,
    /// Annotations added to every resource.
    #[schemars(example = example_annotations())]
    annotations: BTreeMap<String, String>,
}

fn example_images() -> Vec<&'static str> {
    vec!["example.com/stamp:v1"]
}

fn example_annotations() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([("team", "platform")])
}

/// Annotation keys are at most this long (Kubernetes: a 253-character prefix, `/`, 63 characters).
const MAX_KEY_CHARS: usize = 253 + 1 + 63;

pub struct Stamp {
    images: Vec<String>,
    annotations: BTreeMap<String, String>,
}

impl Stamp {
    fn serves(&self, image: &str) -> bool {
        self.images.iter().any(|served| served == image)
    }

    fn decline_reason(&self) -> String {
        format!("stamp serves only {}", self.images.join(", "))
    }

    fn stamp(&self, resource_list: &[u8]) -> Result<Vec<u8>, EvalError> {
        let mut list: Value = yaml_serde::from_slice(resource_list)
            .map_err(|error| EvalError::invalid_input(format!("not a ResourceList: {error}")))?;
        let items = list
            .get_mut("items")
            .and_then(Value::as_sequence_mut)
            .ok_or_else(|| EvalError::invalid_input("the ResourceList has no `items` list"))?;
        for (index, item) in items.iter_mut().enumerate() {
            let annotations = item
                .as_mapping_mut()
                .map(|item| entry(item, "metadata"))
                .and_then(Value::as_mapping_mut)
                .map(|metadata| entry(metadata, "annotations"))
                .and_then(Value::as_mapping_mut)
                .ok_or_else(|| {
                    EvalError::invalid_input(format!(
                        "items[{index}]: metadata.annotations is not a map"
                    ))
                })?;
            for (key, value) in &self.annotations {
                annotations.insert(Value::from(key.as_str()), Value::from(value.as_str()));
            }
        }
        yaml_serde::to_string(&list)
            .map(String::into_bytes)
            .map_err(|error| EvalError::internal(format!("cannot write the ResourceList: {error}")))
    }
}

/// The value at `key` of `map`, an empty map put there first if there is none.
fn entry<'a>(map: &'a mut Mapping, key: &str) -> &'a mut Value {
    map.entry(Value::from(key))
        .or_insert_with(|| Value::Mapping(Mapping::new()))
}

impl Evaluator for Stamp {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        if !self.serves(image) {
            return Err(EvalError::declined_because(image, self.decline_reason()));
        }
        // Quick work needs no more than this; long work watches the context as it goes (or
        // registers `context.on_cancel`) and stops when the caller gives up.
        if let Some(reason) = context.cancel_reason() {
            return Err(reason.to_error(image));
        }
        let stamped = self.stamp(resource_list)?;
        let log = format!("stamped {} annotation(s)\n", self.annotations.len());
        Ok(EvalResponse::new(stamped, log.into_bytes()))
    }

    fn probe(&self, image: &str, _route: Option<&FunctionConfigRoute>) -> Probe {
        if self.serves(image) {
            Probe::Serves
        } else {
            Probe::Declines(self.decline_reason())
        }
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        let annotations: Vec<String> = self
            .annotations
            .iter()
            .map(|(key, value)| format!("{key}: {value}"))
            .collect();
        vec![FunctionSignature {
            name: "stamp".to_owned(),
            description: format!("adds {}", annotations.join(", ")),
            images: self.images.clone(),
            parameters: Vec::<Parameter>::new(),
            changes: vec!["metadata.annotations".to_owned()],
            validates: false,
            examples: vec![self.example()],
        }]
    }
}

impl Stamp {
    /// One Deployment in, the same Deployment stamped out: shown by `krm-runner functions` and
    /// run by the tests (`check_examples`).
    fn example(&self) -> Example {
        let input = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n";
        let annotations: String = self
            .annotations
            .iter()
            .map(|(key, value)| format!("      {key:?}: {value:?}\n"))
            .collect();
        Example {
            description: "annotates a Deployment".to_owned(),
            input: input.to_owned(),
            output: format!("{input}    annotations:\n{annotations}"),
        }
    }
}

pub struct StampPlugin;

impl Plugin for StampPlugin {
    const NAME: &'static str = "stamp";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "adds configured annotations to every resource";
    type Config = StampConfig;
    type Evaluator = Stamp;

    fn build(config: StampConfig, _context: &BuildContext) -> Result<Stamp, ConfigError> {
        let mut problems = Vec::new();
        if config.images.is_empty() {
            problems.push(ConfigError::field("images", "must name at least one image"));
        }
        for (index, image) in config.images.iter().enumerate() {
            if image.trim().is_empty() {
                problems.push(ConfigError::field(format!("images[{index}]"), "is empty"));
            }
        }
        for key in config.annotations.keys() {
            if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
                problems.push(ConfigError::field(
                    format!("annotations.{key}"),
                    format!("an annotation key has 1 to {MAX_KEY_CHARS} characters"),
                ));
            }
        }
        // Every problem at once, one per line in the runner's report.
        if let Some(problems) = ConfigError::all(problems) {
            return Err(problems);
        }
        Ok(Stamp {
            images: config.images,
            annotations: config.annotations,
        })
    }
}

export_plugin!(StampPlugin);
