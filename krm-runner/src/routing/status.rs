//! An ahead-of-time round's findings as the runner's part of a cluster FunctionConfig's status:
//! the conditions `Ready`, `Resolved` and `Failed` (and `Allowed`, under a trust policy), and
//! `executors`, one entry per executor tag.
//! An object the runner does not apply (invalid, or losing a conflict) gets conditions saying
//! why, next to `status.error`.

use krm_runner_function_config::{ConditionStatus, ExecutorStatus, FunctionConfigStatus};

use super::{Report, State};
use crate::trust::Decision;

pub const READY: &str = "Ready";
pub const RESOLVED: &str = "Resolved";
pub const FAILED: &str = "Failed";
pub const ALLOWED: &str = "Allowed";

/// The reasons a report gives when a tag could not be resolved (see `ahead::failure`).
const RESOLUTION_FAILURES: [&str; 2] = ["NoVersion", "ResolveFailed"];

/// `previous` with the conditions and executors that one object's `reports` call for.
pub fn worked_out(
    previous: &FunctionConfigStatus,
    reports: &[&Report],
    generation: Option<i64>,
) -> FunctionConfigStatus {
    let mut status = previous.clone();
    status.executors = Some(
        reports
            .iter()
            .map(|report| ExecutorStatus {
                executor: report.executor.field().to_owned(),
                evaluator: Some(report.evaluator.clone()).filter(|name| !name.is_empty()),
                tag: report.tag.clone(),
                resolved_tag: report.resolved.clone(),
                digest: report.digest.clone(),
                state: report.state.label().to_owned(),
                last_error: Some(report.state.message().to_owned()).filter(|m| !m.is_empty()),
            })
            .collect(),
    );
    let failures: Vec<(&Report, &str)> = reports
        .iter()
        .filter_map(|report| match &report.state {
            State::Failed { reason, .. } => Some((*report, *reason)),
            _ => None,
        })
        .collect();
    let explain = |reports: &mut dyn Iterator<Item = &Report>| {
        reports
            .map(|report| format!("{}: {}", subject(report), report.state.message()))
            .collect::<Vec<_>>()
            .join("; ")
    };

    let unresolved: Vec<_> = failures
        .iter()
        .filter(|(_, reason)| RESOLUTION_FAILURES.contains(reason))
        .collect();
    match unresolved.first() {
        Some((_, reason)) => status.set_condition(
            RESOLVED,
            ConditionStatus::False,
            reason,
            &explain(&mut unresolved.iter().map(|(report, _)| *report)),
            generation,
        ),
        None => {
            let ranges: Vec<_> = reports
                .iter()
                .filter_map(|report| {
                    let resolved = report.resolved.as_ref()?;
                    (report.tag.as_ref() != Some(resolved))
                        .then(|| format!("{} resolved to {resolved}", subject(report)))
                })
                .collect();
            let message = match ranges.is_empty() {
                true => "every tag names a version".to_owned(),
                false => ranges.join("; "),
            };
            status.set_condition(
                RESOLVED,
                ConditionStatus::True,
                "Resolved",
                &message,
                generation,
            );
        }
    }

    let judged: Vec<(&Report, &Decision)> = reports
        .iter()
        .filter_map(|report| Some((*report, report.policy.as_ref()?)))
        .collect();
    if !judged.is_empty() {
        let denied: Vec<String> = judged
            .iter()
            .filter(|(_, decision)| !decision.allowed)
            .map(|(report, decision)| format!("{}: {decision}", subject(report)))
            .collect();
        let (state, reason, message) = match denied.is_empty() {
            true => (
                ConditionStatus::True,
                "Allowed",
                judged
                    .iter()
                    .map(|(report, decision)| format!("{}: {decision}", subject(report)))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            false => (ConditionStatus::False, "Denied", denied.join("; ")),
        };
        status.set_condition(ALLOWED, state, reason, &message, generation);
    }

    let failed = explain(&mut failures.iter().map(|(report, _)| *report));
    match failures.first() {
        Some((_, reason)) => {
            status.set_condition(FAILED, ConditionStatus::True, reason, &failed, generation);
            status.set_condition(READY, ConditionStatus::False, reason, &failed, generation);
        }
        None => {
            status.set_condition(FAILED, ConditionStatus::False, "NoFailure", "", generation);
            if reports.iter().any(|report| report.state == State::Ready) {
                status.set_condition(READY, ConditionStatus::True, "Ready", "", generation);
            } else {
                let skipped = explain(&mut reports.iter().copied());
                status.set_condition(
                    READY,
                    ConditionStatus::False,
                    "NoExecutor",
                    &skipped,
                    generation,
                );
            }
        }
    }
    status
}

/// `previous` with conditions saying why the object is not applied (`reason`: `Invalid` or
/// `Conflict`), and no executors.
pub fn refused(
    previous: &FunctionConfigStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> FunctionConfigStatus {
    let mut status = previous.clone();
    status.executors = None;
    status.set_condition(READY, ConditionStatus::False, reason, message, generation);
    status.set_condition(FAILED, ConditionStatus::True, reason, message, generation);
    status.set_condition(
        RESOLVED,
        ConditionStatus::Unknown,
        reason,
        "not worked out: the FunctionConfig is not applied",
        generation,
    );
    status
}

/// `podExecutor "~1.2"`, or the executor alone when it lists no tags.
fn subject(report: &Report) -> String {
    match &report.tag {
        Some(tag) => format!("{} {tag:?}", report.executor.field()),
        None => report.executor.field().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use krm_plugin_api::FunctionConfigExecutor;
    use krm_runner_function_config::{ObjectId, Source};

    use super::*;

    fn report(
        executor: FunctionConfigExecutor,
        tag: &str,
        resolved: Option<&str>,
        state: State,
    ) -> Report {
        Report {
            object: ObjectId {
                namespace: Some("fns".into()),
                name: "versioned".into(),
                source: Source::Cluster,
            },
            generation: Some(3),
            image: "example.com/fns/versioned".into(),
            executor,
            evaluator: executor.field().replace("Executor", ""),
            tag: Some(tag.into()),
            resolved: resolved.map(str::to_owned),
            digest: resolved.map(|_| "sha256:0123".to_owned()),
            state,
            policy: None,
        }
    }

    fn condition<'a>(status: &'a FunctionConfigStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
        let c = status.condition(type_).unwrap();
        assert_eq!(c.observed_generation, Some(3));
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn resolved_tags_make_the_object_ready() {
        let range = report(
            FunctionConfigExecutor::PodExecutor,
            "~1.1",
            Some("v1.1.5"),
            State::Ready,
        );
        let exact = report(
            FunctionConfigExecutor::BinaryExecutor,
            "v1",
            Some("v1"),
            State::Ready,
        );
        let status = worked_out(&FunctionConfigStatus::default(), &[&exact, &range], Some(3));
        assert_eq!(condition(&status, READY), ("True", "Ready", ""));
        assert_eq!(
            condition(&status, RESOLVED),
            (
                "True",
                "Resolved",
                "podExecutor \"~1.1\" resolved to v1.1.5"
            )
        );
        assert_eq!(condition(&status, FAILED), ("False", "NoFailure", ""));
        let executors = status.executors.as_ref().unwrap();
        assert_eq!(
            executors[1],
            ExecutorStatus {
                executor: "podExecutor".into(),
                evaluator: Some("pod".into()),
                tag: Some("~1.1".into()),
                resolved_tag: Some("v1.1.5".into()),
                digest: Some("sha256:0123".into()),
                state: "Ready".into(),
                last_error: None,
            }
        );
        // The same findings again: the same status, so nothing to write.
        let again = worked_out(&status, &[&exact, &range], Some(3));
        assert_eq!(again, status);
    }

    #[test]
    fn failures_name_their_reason_and_only_resolution_failures_unresolve() {
        let failed = |reason, message: &str| State::Failed {
            reason,
            message: message.into(),
        };
        let missing = Report {
            evaluator: String::new(),
            ..report(
                FunctionConfigExecutor::BinaryExecutor,
                "v1",
                None,
                failed(
                    "BinaryMissing",
                    "binary /fns/x is missing or not executable",
                ),
            )
        };
        let status = worked_out(&FunctionConfigStatus::default(), &[&missing], Some(3));
        let message = "binaryExecutor \"v1\": binary /fns/x is missing or not executable";
        assert_eq!(
            condition(&status, READY),
            ("False", "BinaryMissing", message)
        );
        assert_eq!(
            condition(&status, FAILED),
            ("True", "BinaryMissing", message)
        );
        assert_eq!(condition(&status, RESOLVED).0, "True");
        assert_eq!(status.executors.as_ref().unwrap()[0].evaluator, None);

        let none = report(
            FunctionConfigExecutor::PodExecutor,
            "^3",
            None,
            failed("NoVersion", "no version satisfies"),
        );
        let status = worked_out(&status, &[&missing, &none], Some(3));
        assert_eq!(
            condition(&status, RESOLVED),
            (
                "False",
                "NoVersion",
                "podExecutor \"^3\": no version satisfies"
            )
        );
        assert_eq!(condition(&status, FAILED).1, "BinaryMissing");
        assert_eq!(
            status.executors.as_ref().unwrap()[1].last_error.as_deref(),
            Some("no version satisfies")
        );
    }

    #[test]
    fn only_skipped_executors_are_not_ready() {
        let skipped = report(
            FunctionConfigExecutor::PodExecutor,
            "v1",
            None,
            State::Skipped("no instance stands for podExecutor".into()),
        );
        let status = worked_out(&FunctionConfigStatus::default(), &[&skipped], Some(3));
        assert_eq!(condition(&status, READY).0, "False");
        assert_eq!(condition(&status, READY).1, "NoExecutor");
        assert_eq!(condition(&status, FAILED).0, "False");
    }

    #[test]
    fn a_refused_object_says_why_and_lists_no_executors() {
        let ready = report(
            FunctionConfigExecutor::PodExecutor,
            "v1",
            Some("v1"),
            State::Ready,
        );
        let applied = worked_out(&FunctionConfigStatus::default(), &[&ready], Some(3));
        let status = refused(
            &applied,
            "Invalid",
            "spec.podExecutor.tags[0]: bad",
            Some(3),
        );
        assert_eq!(status.executors, None);
        assert_eq!(
            condition(&status, READY),
            ("False", "Invalid", "spec.podExecutor.tags[0]: bad")
        );
        assert_eq!(condition(&status, FAILED).0, "True");
        assert_eq!(condition(&status, RESOLVED).0, "Unknown");
    }

    #[test]
    fn the_policy_decision_of_each_tag_is_the_allowed_condition() {
        let decided = |tag: &str, allowed: bool, reason: &str| Report {
            policy: Some(Decision {
                rule: "catalog".into(),
                allowed,
                reason: reason.into(),
            }),
            ..report(
                FunctionConfigExecutor::PodExecutor,
                tag,
                Some(tag),
                State::Ready,
            )
        };
        let (old, new) = (
            decided("v0.1.0", false, "the rule denies it"),
            decided("v1.0.0", true, "allowed"),
        );
        let status = worked_out(&FunctionConfigStatus::default(), &[&new], Some(3));
        assert_eq!(
            condition(&status, ALLOWED),
            (
                "True",
                "Allowed",
                "podExecutor \"v1.0.0\": allowed by rule \"catalog\": allowed"
            )
        );
        let status = worked_out(&status, &[&old, &new], Some(3));
        assert_eq!(
            condition(&status, ALLOWED),
            (
                "False",
                "Denied",
                "podExecutor \"v0.1.0\": denied by rule \"catalog\": the rule denies it"
            )
        );
        // Without a policy, no condition.
        let plain = report(
            FunctionConfigExecutor::PodExecutor,
            "v1",
            None,
            State::Ready,
        );
        let status = worked_out(&FunctionConfigStatus::default(), &[&plain], Some(3));
        assert!(status.condition(ALLOWED).is_none());
    }
}
