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

use krm_plugin_api::yaml::{Doc, Editor};
use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator, Example,
    FunctionConfigRoute, FunctionSignature, Parameter, Plugin, Probe, export_plugin,
};
use schemars::JsonSchema;
use serde::Deserialize;

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
    /// The ResourceList with the annotations set on every item, edited in place: comments,
    /// quoting and order of everything else stay as they were.
    fn stamp(&self, resource_list: &[u8]) -> Result<Vec<u8>, EvalError> {
        let not_a_list = |error: &dyn std::fmt::Display| {
            EvalError::invalid_input(format!("not a ResourceList: {error}"))
        };
        let text = std::str::from_utf8(resource_list).map_err(|error| not_a_list(&error))?;
        let doc = Doc::parse(text).map_err(|error| not_a_list(&error))?;
        let items = doc
            .roots
            .first()
            .and_then(|&root| doc.get(root, "items"))
            .filter(|&items| doc.is_seq(items))
            .ok_or_else(|| EvalError::invalid_input("the ResourceList has no `items` list"))?;
        let annotations: Vec<(String, String)> = self
            .annotations
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let mut editor = Editor::default();
        for (index, &item) in doc.items(items).iter().enumerate() {
            // A missing or empty map is created; anything else in the way is refused.
            let in_the_way = |path: &[&str]| {
                doc.get_path(item, path)
                    .is_some_and(|node| !doc.is_map(node) && !doc.is_null(node))
            };
            if !doc.is_map(item)
                || in_the_way(&["metadata"])
                || in_the_way(&["metadata", "annotations"])
            {
                return Err(EvalError::invalid_input(format!(
                    "items[{index}]: metadata.annotations is not a map"
                )));
            }
            editor.ensure_map(&doc, item, &["metadata", "annotations"], &annotations, true);
        }
        Ok(editor.finish(&doc).into_bytes())
    }
}

impl Evaluator for Stamp {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        // Images `serves` declines never get here: the SDK answers them.
        // Quick work needs no more than this; long work watches the context as it goes (or
        // registers `context.on_cancel`) and stops when the caller gives up.
        if let Some(reason) = context.cancel_reason() {
            return Err(reason.to_error(image));
        }
        let stamped = self.stamp(resource_list)?;
        let log = format!("stamped {} annotation(s)\n", self.annotations.len());
        Ok(EvalResponse::new(stamped, log.into_bytes()))
    }

    /// The one answer to "is this image mine?": calls for other images are declined with the
    /// reason before `evaluate` runs, and `krm-runner functions --resolve` shows the same.
    fn serves(&self, image: &str, _route: Option<&FunctionConfigRoute>) -> Probe {
        if self.images.iter().any(|served| served == image) {
            Probe::Serves
        } else {
            Probe::Declines(format!("stamp serves only {}", self.images.join(", ")))
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
            pure: true,
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
