//! ConfigHub's typed functions in workers: a sequence of invocations over a unit runs in a
//! worker holding the same executors as the runner (the builtin functions and the declared
//! attributes). A function a plugin contributes still runs in the runner, where its plugin is
//! loaded: the worker asks for it by callback.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use krm_function_executor::api::{FunctionInvocationRequest, FunctionInvocationResponse};
use krm_function_executor::declared::AttributeDeclaration;
use krm_function_executor::executor::cancelled_text;
use krm_function_executor::{Executor, ExecutorError, Toolchain};
use krm_plugin_api::{CallContext, CancelReason, ErrorKind, EvalError, TypedFunctionSet};
use krm_plugin_loader::{EvaluatorInstance, HostCallContext};
use krm_worker::{Channel, Message, MessageError, Pool, Role, WorkerError};
use serde::{Deserialize, Serialize};

use super::{RoleSpec, command, deadline_in, limits, remaining_ms};
use crate::config::Config;
use crate::contributed;

/// What a worker builds: the declared attributes, and the typed functions each instance
/// contributes (their signatures; calls come back to the runner).
#[derive(Serialize, Deserialize)]
pub struct TypedSpec {
    attributes: Vec<AttributeDeclaration>,
    max_message_bytes: usize,
    /// Instance name -> its typed functions' signatures, as the ABI gives them (JSON).
    contributed: BTreeMap<String, String>,
}

/// A sequence to run. The parts: the request as JSON without the unit's data and live state,
/// then those two, so that megabytes of data are not written as base64.
#[derive(Serialize, Deserialize)]
struct CallHeader {
    toolchain: String,
    remaining_ms: Option<u64>,
}

/// How the sequence ended. The parts, when answered: the response as JSON without the unit's
/// data and the output, then those two.
#[derive(Serialize, Deserialize)]
enum Outcome {
    Answered,
    Cancelled {
        reason: CancelReason,
        index: usize,
        function: String,
    },
    /// The executor refused the request (an [`ExecutorError`], in words).
    Refused(String),
}

/// A contributed function's call, from the worker; the request is the part.
#[derive(Serialize, Deserialize)]
struct CallbackHeader {
    instance: String,
    function: String,
}

/// The runner's answer to a callback; the response is the part.
#[derive(Serialize, Deserialize)]
struct CallbackAnswer {
    error: Option<(ErrorKind, String)>,
}

/// Why a sequence run in a worker has no response.
#[derive(Debug, thiserror::Error)]
pub enum TypedError {
    /// The executor refused it: the request cannot run (400 / INVALID_ARGUMENT).
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The executor refused it, in a worker: the same as [`TypedError::Executor`], in words.
    #[error("{0}")]
    Refused(String),
    /// The call was cancelled while its worker ran it, and the worker was killed.
    #[error("{}; its worker was stopped and no data changed", cancelled_text(*.0))]
    Cancelled(CancelReason),
    /// A limit of the worker, or the worker itself, failed the call.
    #[error("the typed functions' worker: {0}")]
    Worker(#[source] WorkerError),
}

impl TypedError {
    /// The kind of error this is, which decides the caller's status.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Executor(ExecutorError::Cancelled { reason, .. }) | Self::Cancelled(reason) => {
                reason.error_kind()
            }
            Self::Executor(_) | Self::Refused(_) => ErrorKind::InvalidInput,
            Self::Worker(error) => super::error_kind(error),
        }
    }
}

/// The runner's side: the pool, and the instances that answer callbacks.
pub struct TypedWorkers {
    pool: Pool,
    contributors: BTreeMap<String, Arc<EvaluatorInstance>>,
}

impl TypedWorkers {
    /// Starts the pool: its workers build the executors `config` declares, with the typed
    /// functions `contributors` (built instances) contribute.
    pub fn start(
        config: &Config,
        contributors: BTreeMap<String, Arc<EvaluatorInstance>>,
    ) -> Result<Self, String> {
        let spec = RoleSpec::Typed(TypedSpec {
            attributes: config.executor.attributes.clone(),
            max_message_bytes: config.max_message_bytes,
            contributed: contributors
                .iter()
                .map(|(name, instance)| (name.clone(), instance.signatures_json()))
                .collect(),
        });
        let command = command(&spec, Vec::new())
            .map_err(|error| format!("cannot find the runner's own executable: {error}"))?;
        let pool = Pool::start("typed-functions", command, limits(config))
            .map_err(|error| format!("cannot start the workers' keeper: {error}"))?;
        Ok(Self { pool, contributors })
    }

    /// Runs `request` with the executor of `toolchain` in a worker, within `call`.
    pub fn invoke(
        &self,
        toolchain: Toolchain,
        mut request: FunctionInvocationRequest,
        call: &HostCallContext,
    ) -> Result<FunctionInvocationResponse, TypedError> {
        let context = call.as_call_context();
        let config_data = std::mem::take(&mut request.config_data);
        let live_state = std::mem::take(&mut request.live_state);
        // Serializing the request's plain data cannot fail.
        let parts = vec![
            serde_json::to_vec(&request).unwrap_or_default(),
            config_data,
            live_state,
        ];
        let header = CallHeader {
            toolchain: toolchain.name().to_owned(),
            remaining_ms: remaining_ms(call.deadline()),
        };
        let mut answer = self
            .pool
            .call(
                &Message::new(&header, parts),
                call.deadline(),
                &|| context.is_cancelled(),
                |killer| context.on_cancel(move |_| killer.kill()),
                &mut |question| self.answer_callback(question, &context),
            )
            .map_err(|error| match error {
                WorkerError::Cancelled => TypedError::Cancelled(
                    context
                        .cancel_reason()
                        .unwrap_or(CancelReason::CallerCancelled),
                ),
                error => TypedError::Worker(error),
            })?;
        let outcome: Outcome = answer
            .header()
            .map_err(|error| TypedError::Worker(WorkerError::Protocol(error)))?;
        match outcome {
            Outcome::Answered => {
                let mut response: FunctionInvocationResponse =
                    serde_json::from_slice(&answer.take_part(0)).map_err(|error| {
                        TypedError::Worker(WorkerError::Protocol(MessageError::Header(error)))
                    })?;
                response.config_data = answer.take_part(1);
                response.output = answer.take_part(2);
                Ok(response)
            }
            Outcome::Cancelled {
                reason,
                index,
                function,
            } => Err(TypedError::Executor(ExecutorError::Cancelled {
                reason,
                index,
                function,
            })),
            Outcome::Refused(message) => Err(TypedError::Refused(message)),
        }
    }

    /// Runs a contributed function the worker asks for, on its instance in the runner.
    fn answer_callback(&self, mut question: Message, context: &CallContext<'_>) -> Message {
        let outcome = question
            .header::<CallbackHeader>()
            .map_err(|error| EvalError::internal(format!("unreadable callback: {error}")))
            .and_then(|header| {
                let instance = self.contributors.get(&header.instance).ok_or_else(|| {
                    EvalError::internal(format!("no instance {:?} contributes", header.instance))
                })?;
                instance.invoke(context, &header.function, &question.take_part(0))
            });
        match outcome {
            Ok(response) => Message::new(&CallbackAnswer { error: None }, vec![response]),
            Err(error) => Message::new(
                &CallbackAnswer {
                    error: Some((error.kind, error.message)),
                },
                Vec::new(),
            ),
        }
    }
}

/// A worker's role: the executors, answering sequences.
pub struct TypedRole {
    kubernetes: Executor,
    properties: Executor,
}

impl TypedRole {
    pub fn start(spec: TypedSpec, _parts: Vec<Vec<u8>>, channel: Channel) -> Result<Self, String> {
        let mut kubernetes = Executor::kubernetes_with(&spec.attributes)
            .map_err(|problems| problems.to_string())?
            .with_max_message_bytes(spec.max_message_bytes);
        let sets = spec.contributed.into_iter().map(|(instance, signatures)| {
            let set: Arc<dyn TypedFunctionSet> = Arc::new(AskTheRunner {
                instance: instance.clone(),
                signatures,
                channel: channel.clone(),
            });
            (instance, set)
        });
        // The runner has reported the clashes and problems when it registered the same.
        let _ = contributed::add_sets(&mut kubernetes, sets);
        Ok(Self {
            kubernetes,
            properties: Executor::properties().with_max_message_bytes(spec.max_message_bytes),
        })
    }
}

impl Role for TypedRole {
    fn call(&mut self, mut message: Message) -> Message {
        let request = message.header::<CallHeader>().and_then(|header| {
            let request = serde_json::from_slice::<FunctionInvocationRequest>(
                message.parts.first().map(Vec::as_slice).unwrap_or_default(),
            )
            .map_err(MessageError::Header)?;
            Ok((header, request))
        });
        let outcome = match request {
            Ok((
                CallHeader {
                    toolchain,
                    remaining_ms,
                },
                mut request,
            )) => {
                request.config_data = message.take_part(1);
                request.live_state = message.take_part(2);
                let context = HostCallContext::new(deadline_in(remaining_ms));
                match Toolchain::from_name(&toolchain) {
                    Ok(toolchain) => {
                        let executor = match toolchain {
                            Toolchain::KubernetesYaml => &self.kubernetes,
                            Toolchain::AppConfigProperties => &self.properties,
                        };
                        match std::panic::catch_unwind(AssertUnwindSafe(|| {
                            executor.invoke_within(&request, &context.as_call_context())
                        })) {
                            Ok(outcome) => outcome,
                            Err(_) => {
                                return refused("the executor panicked on this request".to_owned());
                            }
                        }
                    }
                    Err(unknown) => Err(ExecutorError::Toolchain(unknown)),
                }
            }
            Err(error) => return refused(format!("unreadable call: {error}")),
        };
        match outcome {
            Ok(mut response) => {
                let config_data = std::mem::take(&mut response.config_data);
                let output = std::mem::take(&mut response.output);
                // Serializing the response's plain data cannot fail.
                let parts = vec![
                    serde_json::to_vec(&response).unwrap_or_default(),
                    config_data,
                    output,
                ];
                Message::new(&Outcome::Answered, parts)
            }
            Err(ExecutorError::Cancelled {
                reason,
                index,
                function,
            }) => Message::new(
                &Outcome::Cancelled {
                    reason,
                    index,
                    function,
                },
                Vec::new(),
            ),
            Err(error) => refused(error.to_string()),
        }
    }
}

/// The worker's answer to a call it cannot run, in words.
fn refused(message: String) -> Message {
    Message::new(&Outcome::Refused(message), Vec::new())
}

/// A plugin's typed functions as seen from a worker: their signatures, and calls sent back to
/// the runner, which has the plugin loaded.
struct AskTheRunner {
    instance: String,
    signatures: String,
    channel: Channel,
}

impl TypedFunctionSet for AskTheRunner {
    fn signatures_json(&self) -> String {
        self.signatures.clone()
    }

    fn invoke(
        &self,
        _context: &CallContext<'_>,
        function: &str,
        request: &[u8],
    ) -> Result<Vec<u8>, EvalError> {
        let question = Message::new(
            &CallbackHeader {
                instance: self.instance.clone(),
                function: function.to_owned(),
            },
            vec![request.to_vec()],
        );
        let mut answer = self
            .channel
            .callback(&question)
            .map_err(|error| EvalError::internal(format!("asking the runner: {error}")))?;
        let header: CallbackAnswer = answer
            .header()
            .map_err(|error| EvalError::internal(format!("the runner answered: {error}")))?;
        match header.error {
            None => Ok(answer.take_part(0)),
            Some((kind, message)) => Err(EvalError::new(kind, message)),
        }
    }
}
