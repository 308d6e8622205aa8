//! Why an evaluator declines an image, said in the NOT_FOUND answer of a call and, ahead of any
//! call, by [`Probe`] (`krm-runner functions --resolve`).
//!
//! A decline keeps Porch's wording, `function "<image>" not found`, and appends the reason:
//! `function "gcr.io/kpt-fn/set-labels:v0.1" not found: builtin: set-labels is reproduced for
//! tags v0.2.0, ..., not v0.1; exec: no executable is mapped to this image`. The reasons travel
//! in the message, so the ABI carries them unchanged.

use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

use crate::{ErrorKind, EvalError, EvalResponse};

/// The longest reason one evaluator gives.
const MAX_REASON_BYTES: usize = 300;
/// The longest NOT_FOUND message listing every evaluator's reason.
const MAX_DECLINED_MESSAGE_BYTES: usize = 1024;

/// Porch's wording, the image quoted and bounded as [`EvalError::not_found`] says it.
fn not_found_prefix(image: &str) -> String {
    EvalError::not_found(image).message
}

/// `text` cut to at most `max` bytes, at a character boundary, marked with `…` when cut.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let marker = "…";
    let mut end = max - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

impl EvalError {
    /// A decline that says why: `function "<image>" not found: <reason>` (the reason cut to a
    /// bounded length). Prefer it to [`EvalError::not_found`]: the runner lists every
    /// evaluator's reason in its NOT_FOUND answer.
    pub fn declined_because(image: &str, reason: impl AsRef<str>) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!(
                "{}: {}",
                not_found_prefix(image),
                bounded(reason.as_ref(), MAX_REASON_BYTES)
            ),
        )
    }

    /// This decline's reason as `evaluator: reason`, for the evaluator (instance name) that
    /// answered it. A delegating evaluator's message already lists its evaluators' reasons, so
    /// it is taken as it is.
    pub fn decline_reason(&self, image: &str, evaluator: &str) -> String {
        let reason = match self.message.strip_prefix(&not_found_prefix(image)) {
            Some(rest) => rest.trim_start_matches(':').trim(),
            None => self.message.trim(),
        };
        match reason {
            "" => format!("{evaluator}: declined without a reason"),
            reason if self.declined.is_empty() => format!("{evaluator}: {reason}"),
            reason => reason.to_owned(),
        }
    }

    /// The answer when every evaluator asked declined: Porch's NOT_FOUND message followed by
    /// each one's reason (see [`EvalError::decline_reason`]), bounded in length. `declined`
    /// names the evaluators, in the order they were asked.
    pub fn all_declined(image: &str, reasons: &[String], declined: Vec<String>) -> Self {
        let mut error = Self::new(ErrorKind::NotFound, declined_message(image, reasons));
        error.declined = declined;
        error
    }
}

/// The chain rule, for everything that asks evaluators in turn (the `multi` plugin, the
/// runner's FunctionConfig routes): only a decline (NOT_FOUND) passes the call on; any other
/// answer, success or failure, is the answer, never retried further down, and carries the
/// names of the evaluators that declined before it; when every one declines, the answer is
/// NOT_FOUND giving each one's reason.
///
/// ```
/// # use std::ops::ControlFlow;
/// # use krm_plugin_api::{Chain, EvalError, EvalResponse};
/// let mut chain = Chain::default();
/// let first = Err(EvalError::declined_because("fn", "not mine"));
/// assert!(chain.answer("a", "fn", first).is_continue());
/// let ControlFlow::Break(Ok(response)) = chain.answer("b", "fn", Ok(EvalResponse::new(vec![], vec![]))) else {
///     panic!("b served");
/// };
/// assert_eq!(response.declined, ["a"]);
/// ```
#[derive(Debug, Default)]
pub struct Chain {
    declined: Vec<String>,
    reasons: Vec<String>,
}

impl Chain {
    /// Adds a reason the call could not be served that no evaluator's decline gives (a route
    /// that could not be followed, say); it heads the NOT_FOUND answer's list.
    pub fn add_reason(&mut self, reason: String) {
        self.reasons.push(reason);
    }

    /// The reasons gathered so far.
    pub fn reasons(&self) -> &[String] {
        &self.reasons
    }

    /// Takes `evaluator`'s `outcome` for `image`: `Continue` when it declined (ask the next),
    /// otherwise the answer to give.
    pub fn answer(
        &mut self,
        evaluator: &str,
        image: &str,
        outcome: Result<EvalResponse, EvalError>,
    ) -> ControlFlow<Result<EvalResponse, EvalError>> {
        let mut declined = std::mem::take(&mut self.declined);
        ControlFlow::Break(match outcome {
            Err(mut error) if error.kind == ErrorKind::NotFound => {
                self.reasons.push(error.decline_reason(image, evaluator));
                declined.append(&mut error.declined);
                declined.push(evaluator.to_owned());
                self.declined = declined;
                return ControlFlow::Continue(());
            }
            Ok(mut response) => {
                declined.append(&mut response.declined);
                response.declined = declined;
                Ok(response)
            }
            Err(mut error) => {
                declined.append(&mut error.declined);
                error.declined = declined;
                Err(error)
            }
        })
    }

    /// The answer when every evaluator asked declined `image`.
    pub fn all_declined(self, image: &str) -> EvalError {
        EvalError::all_declined(image, &self.reasons, self.declined)
    }
}

/// The NOT_FOUND message for `image` when evaluators declined it for `reasons`.
pub fn declined_message(image: &str, reasons: &[String]) -> String {
    let prefix = not_found_prefix(image);
    if reasons.is_empty() {
        return prefix;
    }
    bounded(
        &format!("{prefix}: {}", reasons.join("; ")),
        MAX_DECLINED_MESSAGE_BYTES.max(prefix.len() + 64),
    )
}

/// What an evaluator would do with an image, told without running anything
/// ([`crate::Evaluator::probe`]). A call decides the same way: an evaluator that answers
/// [`Probe::Declines`] here declines the call with the same reason.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// It would run the call.
    Serves,
    /// It would decline, for this reason (the one its NOT_FOUND message gives).
    Declines(String),
    /// It cannot tell before a call.
    #[default]
    Unknown,
    /// It delegates: what the evaluators it asks would do.
    Delegated(ProbeOutcome),
}

impl Probe {
    /// What this answer from the instance `evaluator` means for a chain asking it.
    pub fn into_resolution(self, evaluator: &str) -> ProbeOutcome {
        match self {
            Self::Serves => ProbeOutcome {
                declined: Vec::new(),
                answer: Some(Answer::Serves(evaluator.to_owned())),
            },
            Self::Declines(reason) => ProbeOutcome {
                declined: vec![format!(
                    "{evaluator}: {}",
                    bounded(&reason, MAX_REASON_BYTES)
                )],
                answer: None,
            },
            Self::Unknown => ProbeOutcome {
                declined: Vec::new(),
                answer: Some(Answer::MayServe(evaluator.to_owned())),
            },
            Self::Delegated(resolution) => resolution,
        }
    }
}

/// What a chain of evaluators would do with an image.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// `evaluator: reason` for each evaluator that would decline, in the order they are asked.
    pub declined: Vec<String>,
    /// The evaluator that would answer; `None` when every one would decline.
    pub answer: Option<Answer>,
}

/// The evaluator that would answer a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// This instance would run it.
    Serves(String),
    /// This instance cannot tell before a call: it may run it or decline.
    MayServe(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_labelled_once_and_bounded() {
        let image = "gcr.io/kpt-fn/set-labels:v0.1";
        let leaf = EvalError::declined_because(image, "set-labels is reproduced for v0.2.x");
        assert_eq!(
            leaf.message,
            "function \"gcr.io/kpt-fn/set-labels:v0.1\" not found: set-labels is reproduced for v0.2.x"
        );
        let labelled = leaf.decline_reason(image, "builtin");
        assert_eq!(labelled, "builtin: set-labels is reproduced for v0.2.x");
        let plain = EvalError::not_found(image).decline_reason(image, "exec");
        assert_eq!(plain, "exec: declined without a reason");
        let chain = EvalError::all_declined(
            image,
            &[labelled.clone(), plain.clone()],
            vec!["builtin".into(), "exec".into()],
        );
        assert_eq!(
            chain.message,
            format!("function \"{image}\" not found: {labelled}; {plain}")
        );
        // A delegating evaluator's reasons already carry their evaluators' names.
        assert_eq!(
            chain.decline_reason(image, "default"),
            format!("{labelled}; {plain}")
        );
        let long = EvalError::declined_because(image, "é".repeat(1000));
        assert!(long.message.len() <= 400 && long.message.ends_with('…'));
        let many: Vec<String> = (0..100)
            .map(|i| format!("e{i}: {}", "x".repeat(50)))
            .collect();
        let message = declined_message(image, &many);
        assert!(
            message.len() <= MAX_DECLINED_MESSAGE_BYTES,
            "{}",
            message.len()
        );
    }
}
