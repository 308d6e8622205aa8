//! An `isolated` instance: the runner builds the plugin in its own process, for everything but
//! calls (its functions, probes, resolutions), and its workers build it again, each, to run the
//! calls, so that what a call's program does reaches only a worker.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use krm_plugin_api::{
    CacheIdentity, CallContext, ErrorKind, EvalError, EvalResponse, Evaluator, FunctionConfigRoute,
    FunctionSignature, Probe, Resolution, TypedFunctionSet,
};
use krm_plugin_loader::{
    EvaluatorInstance, EvaluatorSlot, HostCallContext, HostServices, LayoutChecks, PluginLibrary,
};
use krm_worker::{Message, Pool, Role};
use serde::{Deserialize, Serialize};

use super::{RoleSpec, call_error, command, deadline_in, limits, remaining_ms};
use crate::config::Config;

/// What a worker builds: the instance's plugin library, configuration and runner settings.
#[derive(Serialize, Deserialize)]
pub struct PluginSpec {
    instance: String,
    library: PathBuf,
    config_json: String,
    settings: BTreeMap<String, String>,
}

/// One call, as the worker receives it; the ResourceList is the message's part.
#[derive(Serialize, Deserialize)]
struct CallHeader {
    image: String,
    route: Option<FunctionConfigRoute>,
    tag: String,
    remaining_ms: Option<u64>,
    trace: Option<(String, String)>,
}

/// The call's answer; the ResourceList and the log are the message's two parts.
#[derive(Serialize, Deserialize)]
struct AnswerHeader {
    /// `None` when served.
    error: Option<(ErrorKind, String)>,
    served_by: Option<String>,
    declined: Vec<String>,
    resolved: Option<String>,
}

/// Wraps `inner`, the instance `name` built from `library` with `config_json` and `settings`,
/// so that its calls run in a pool of workers that build the same.
pub fn isolate(
    inner: Arc<EvaluatorInstance>,
    library: PathBuf,
    config_json: String,
    settings: BTreeMap<String, String>,
    config: &Config,
) -> Result<Arc<EvaluatorInstance>, String> {
    let name = inner.name().to_owned();
    let library = std::fs::canonicalize(&library).unwrap_or(library);
    let spec = RoleSpec::Plugin(PluginSpec {
        instance: name.clone(),
        library,
        config_json,
        settings,
    });
    let command = command(&spec, Vec::new())
        .map_err(|error| format!("cannot find the runner's own executable: {error}"))?;
    let pool = Pool::start(&name, command, limits(config))
        .map_err(|error| format!("cannot start the workers' keeper: {error}"))?;
    Ok(Arc::new(EvaluatorInstance::from_evaluator(
        name.clone(),
        Isolated { inner, pool, name },
    )))
}

/// The evaluator standing for an isolated instance in the runner.
struct Isolated {
    inner: Arc<EvaluatorInstance>,
    pool: Pool,
    name: String,
}

impl Evaluator for Isolated {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let route = context.route();
        // A call the plugin would decline is declined here, as it would word it: a chain
        // passing the call on waits for no worker.
        let probe = self.inner.probe(image, route.as_ref());
        if probe.answer.is_none() {
            let prefix = format!("{}: ", self.name);
            let reason = probe.declined.join("; ");
            let reason = reason.strip_prefix(&prefix).unwrap_or(&reason);
            return Err(EvalError::declined_because(image, reason));
        }
        let header = CallHeader {
            image: image.to_owned(),
            route,
            tag: context.requested_tag().unwrap_or_default(),
            remaining_ms: remaining_ms(context.deadline()),
            trace: context
                .trace_context()
                .map(|trace| (trace.traceparent, trace.tracestate)),
        };
        let request = Message::new(&header, vec![resource_list.to_vec()]);
        let mut answer = self
            .pool
            .call(
                &request,
                context.deadline(),
                &|| context.is_cancelled(),
                |killer| context.on_cancel(move |_| killer.kill()),
                &mut |_| Message::default(),
            )
            .map_err(|error| {
                call_error(error, context, image, &format!("evaluator {}", self.name))
            })?;
        let header: AnswerHeader = answer.header().map_err(|error| {
            EvalError::internal(format!(
                "evaluator {}'s worker answered: {error}",
                self.name
            ))
        })?;
        if let Some(resolved) = &header.resolved {
            context.report_resolved(resolved);
        }
        let resource_list = answer.take_part(0);
        let log = answer.take_part(1);
        match header.error {
            None => Ok(EvalResponse {
                resource_list,
                log,
                served_by: header.served_by,
                declined: header.declined,
            }),
            Some((kind, message)) => Err(EvalError {
                kind,
                message,
                declined: header.declined,
                resource_list,
                log,
            }),
        }
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        self.inner.functions()
    }

    fn function(&self, name: &str) -> Option<FunctionSignature> {
        self.inner.function(name)
    }

    fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        self.inner.warm_up(image, route);
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        self.inner.resolve(image, tag, route)
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        Probe::Delegated(self.inner.probe(image, route))
    }

    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        self.inner.cache_identity(image, route)
    }

    fn typed_functions(&self) -> Option<&dyn TypedFunctionSet> {
        Some(&*self.inner)
    }
}

/// A worker's role: the instance built again, answering calls.
pub struct PluginRole {
    instance: EvaluatorInstance,
    // Kept loaded for as long as the instance lives.
    _library: PluginLibrary,
}

impl PluginRole {
    pub fn start(spec: PluginSpec) -> Result<Self, String> {
        let library = PluginLibrary::load(&spec.library, &LayoutChecks::in_user_cache())
            .map_err(|error| error.to_string())?;
        let services = Arc::new(WorkerServices {
            settings: spec.settings,
        });
        let instance = library
            .build(&spec.instance, &spec.config_json, services)
            .map_err(|error| format!("evaluators.{}.config: {error}", spec.instance))?;
        Ok(Self {
            instance,
            _library: library,
        })
    }
}

impl Role for PluginRole {
    fn call(&mut self, mut request: Message) -> Message {
        let header: CallHeader = match request.header() {
            Ok(header) => header,
            Err(error) => {
                return answer(
                    Err(EvalError::internal(format!("unreadable call: {error}"))),
                    None,
                );
            }
        };
        let resource_list = request.take_part(0);
        let context = HostCallContext::with_tag(deadline_in(header.remaining_ms), header.tag);
        if let Some((traceparent, tracestate)) = &header.trace {
            context.set_trace_context(traceparent, tracestate);
        }
        let outcome = self.instance.evaluate(
            &context,
            header.route.as_ref(),
            &header.image,
            &resource_list,
        );
        answer(outcome, context.resolved())
    }
}

fn answer(outcome: Result<EvalResponse, EvalError>, resolved: Option<String>) -> Message {
    match outcome {
        Ok(response) => Message::new(
            &AnswerHeader {
                error: None,
                served_by: response.served_by,
                declined: response.declined,
                resolved,
            },
            vec![response.resource_list, response.log],
        ),
        Err(error) => Message::new(
            &AnswerHeader {
                error: Some((error.kind, error.message)),
                served_by: None,
                declined: error.declined,
                resolved,
            },
            vec![error.resource_list, error.log],
        ),
    }
}

/// What a worker offers the plugin it builds: the runner's settings, and no other instance
/// (an isolated instance does not delegate).
struct WorkerServices {
    settings: BTreeMap<String, String>,
}

impl HostServices for WorkerServices {
    fn setting(&self, key: &str) -> Option<String> {
        self.settings.get(key).cloned()
    }

    fn evaluator(&self, _asking: &str, _name: &str) -> Option<Arc<EvaluatorSlot>> {
        None
    }
}
