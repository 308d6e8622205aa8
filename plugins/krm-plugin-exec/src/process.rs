//! One function call: the mapped executable as a child process (see
//! [`krm_plugin_api::process`]), killed when the call is cancelled.

use std::process::Command;

use krm_plugin_api::process::{self, Exited};
use krm_plugin_api::results::failure_detail;
use krm_plugin_api::{CallContext, ErrorKind, EvalError, EvalResponse, quoted};

use crate::Function;

pub(crate) fn run(
    context: &CallContext<'_>,
    image: &str,
    function: &Function,
    resource_list: &[u8],
    limits: &process::OutputLimits,
) -> Result<EvalResponse, EvalError> {
    let fail = |detail: String| {
        EvalError::failed(format!(
            "Failed to execute function {}: {detail}",
            quoted(image)
        ))
    };
    process::check_executable(&function.path).map_err(|problem| fail(problem.to_string()))?;

    let mut command = Command::new(&function.path);
    command
        .env_clear()
        .envs(function.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&function.working_dir);
    if let Some(trace) = context.trace_context() {
        command.envs(trace.environment());
    }
    // No PR_SET_PDEATHSIG (it needs a pre_exec hook, which forces fork() and costs 0.7 ms per
    // call). Should the runner die, a function loses its pipes and dies of SIGPIPE on its next
    // write; graceful shutdown cancels, and so kills, every call.
    let child = process::spawn(command, *limits)
        .map_err(|e| fail(format!("cannot start {}: {e}", function.path.display())))?;
    let killer = child.killer();
    context.on_cancel(move |_| killer.kill());
    let Exited {
        status,
        stdout,
        stderr: log,
        overflowed,
    } = child.wait(resource_list);

    if let Some(reason) = context.cancel_reason() {
        return Err(reason.to_error(image).with_output(Vec::new(), log));
    }
    if overflowed {
        // A limit reached, as the wasm evaluator answers the same: the caller may raise it.
        return Err(EvalError::new(
            ErrorKind::ResourceExhausted,
            format!(
                "Failed to execute function {}: its output exceeded {} bytes (max_output_bytes) \
                 and it was stopped",
                quoted(image),
                limits.max_stdout_bytes
            ),
        )
        .with_output(Vec::new(), log));
    }
    let Some(stdout) = stdout else {
        return Err(fail(
            "its output pipe was held open by a process that left its process group".to_owned(),
        ));
    };
    if status.success() {
        return Ok(EvalResponse::new(stdout, log));
    }
    let detail = failure_detail(&process::describe_status(status), &log, &stdout);
    Err(fail(detail).with_output(stdout, log))
}
