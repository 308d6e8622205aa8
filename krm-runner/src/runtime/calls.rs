//! Running one call: the routed evaluators, then the served instance, on a blocking thread
//! bounded by the call's deadline.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use krm_plugin_api::{CancelReason, Chain, ErrorKind, EvalError, EvalResponse};
use krm_plugin_loader::{EvaluatorInstance, HostCallContext};
use krm_runner_function_config::ImageRef;
use krm_runner_function_config::version::Constraint;

use super::running::RunningCall;
use crate::allocator::{LARGE_CALL_BYTES, release_free_memory};
use crate::routing::Plan;
use crate::telemetry::traces::CallTrace;

/// The call's tag constraint, read: `None` without one; INVALID_ARGUMENT when it does not parse
/// or the image already names a tag or digest.
pub fn requested_constraint(image: &str, tag: &str) -> Result<Option<Constraint>, EvalError> {
    if tag.is_empty() {
        return Ok(None);
    }
    let constraint = Constraint::parse(tag)
        .map_err(|error| EvalError::invalid_input(format!("tag of {image:?}: {error}")))?;
    let reference = ImageRef::parse(image, "");
    if !reference.tag.is_empty() || reference.digest.is_some() {
        return Err(EvalError::invalid_input(format!(
            "image {image:?} already names a version; the tag constraint {tag:?} applies to \
             untagged images only"
        )));
    }
    Ok(Some(constraint))
}

/// Runs one call on a blocking thread, so that slow evaluators never stall the async workers.
/// When the deadline passes, the context is cancelled (evaluators kill their work from the
/// cancellation callback, before this returns) and the answer is DEADLINE_EXCEEDED at once:
/// waiting for the evaluator's own return could let the caller's deadline pass first.
pub(super) async fn evaluate_on(
    call: Call,
    image: String,
    resource_list: Vec<u8>,
) -> Result<EvalResponse, EvalError> {
    let context = call.context.clone();
    let label = image.clone();
    let running = RunningCall::register(&context);
    // The call's log span (naming its trace, when traced) goes with it to the blocking thread.
    let span = tracing::Span::current();
    let call = tokio::task::spawn_blocking(move || {
        let _running = running;
        let _entered = span.enter();
        let outcome = run_plan(&call, &image, &resource_list);
        if resource_list.len() >= LARGE_CALL_BYTES {
            release_free_memory();
        }
        outcome
    });
    await_call(call, &context, &label).await
}

/// Runs a call without a deadline on this thread, for a process that makes that one call
/// (`krm-runner fn`): it needs no async runtime, and no thread besides its own.
pub fn evaluate_here(
    call: &Call,
    image: &str,
    resource_list: &[u8],
) -> Result<EvalResponse, EvalError> {
    debug_assert!(call.context.deadline().is_none(), "nothing would keep it");
    run_plan(call, image, resource_list)
}

/// One call's evaluators: the routed ones, then the served instance.
pub struct Call {
    pub plan: Plan,
    pub served: Arc<EvaluatorInstance>,
    pub context: Arc<HostCallContext>,
    pub trace: CallTrace,
}

/// Runs `instance` under a span of its own, which the evaluator receives as the call's trace
/// context.
fn evaluate_traced(
    instance: &EvaluatorInstance,
    call: &Call,
    route: Option<&krm_plugin_api::FunctionConfigRoute>,
    image: &str,
    resource_list: &[u8],
) -> Result<EvalResponse, EvalError> {
    let span = call.trace.child("evaluate");
    span.lend_to(&call.context);
    let outcome = instance.evaluate(&call.context, route, image, resource_list);
    if span.is_recording() {
        span.set("krm.evaluator", instance.name().to_owned());
        span.set(
            "krm.function.image",
            krm_plugin_api::quoted(image).bounded().into_owned(),
        );
        let (answer, error) = match &outcome {
            Ok(_) => ("served", None),
            Err(error) if error.kind == ErrorKind::NotFound => ("declined", None),
            Err(_) => ("failed", Some("failed")),
        };
        span.set("krm.outcome", answer);
        span.end(error);
    }
    outcome
}

/// Tries the routed evaluators in order (one that declines passes the call on), then the
/// served instance; the answer lists every instance that declined, and a NOT_FOUND answer why
/// each did.
fn run_plan(call: &Call, image: &str, resource_list: &[u8]) -> Result<EvalResponse, EvalError> {
    let Call {
        plan,
        served,
        context,
        ..
    } = call;
    let mut chain = Chain::default();
    for reason in &plan.unsatisfied {
        chain.add_reason(reason.clone());
    }
    for step in &plan.steps {
        let outcome = evaluate_traced(
            &step.instance,
            call,
            Some(&step.route),
            &step.image,
            resource_list,
        );
        let served_here = outcome.is_ok();
        if let ControlFlow::Break(answer) = chain.answer(step.instance.name(), &step.image, outcome)
        {
            if step.resolved && served_here {
                context.set_resolved(&step.image);
            }
            return answer;
        }
    }
    let outcome = evaluate_traced(served, call, None, image, resource_list);
    if let ControlFlow::Break(answer) = chain.answer(served.name(), image, outcome) {
        return answer;
    }
    // A constraint nobody named in a reason (no evaluator knows the image) is still said.
    let tag = context.tag();
    if !tag.is_empty() && !chain.reasons().iter().any(|reason| reason.contains(tag)) {
        chain.add_reason(format!(
            "no evaluator has a version satisfying tag constraint {}",
            krm_plugin_api::quoted(tag)
        ));
    }
    Err(chain.all_declined(image))
}

async fn await_call(
    call: tokio::task::JoinHandle<Result<EvalResponse, EvalError>>,
    context: &HostCallContext,
    image: &str,
) -> Result<EvalResponse, EvalError> {
    let deadline = context.deadline().map(tokio::time::Instant::from_std);
    let joined = tokio::select! {
        joined = call => joined,
        () = sleep_until(deadline) => {
            context.cancel(CancelReason::DeadlineExceeded);
            return Err(CancelReason::DeadlineExceeded.to_error(image));
        }
    };
    joined.unwrap_or_else(|error| {
        Err(EvalError::internal(format!(
            "evaluator task failed: {error}"
        )))
    })
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Cancels a call's context if the future awaiting it is dropped (the client went away).
pub struct CancelOnDrop {
    context: Arc<HostCallContext>,
}

impl CancelOnDrop {
    pub fn new(context: Arc<HostCallContext>) -> Self {
        Self { context }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let expired = self.context.deadline().is_some_and(|d| d <= Instant::now());
        self.context.cancel(if expired {
            CancelReason::DeadlineExceeded
        } else {
            CancelReason::CallerCancelled
        });
    }
}
