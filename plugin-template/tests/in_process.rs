//! The plugin tested in-process, through the same ABI path the runner uses, without building a
//! `.so` or starting a runner (`krm_plugin_api::testing`).

use std::time::Duration;

use krm_plugin_api::testing::PluginTester;
use krm_plugin_api::{CancelReason, ErrorKind};
use krm_plugin_stamp::StampPlugin;
use serde_json::json;

const DEPLOYMENT: &[u8] = b"apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
";

fn stamp() -> krm_plugin_api::testing::TestEvaluator {
    PluginTester::new()
        .build::<StampPlugin>(
            "stamp",
            json!({"images": ["example.com/stamp:v1"], "annotations": {"team": "platform"}}),
        )
        .unwrap()
}

#[test]
fn the_declared_examples_hold() {
    stamp().check_examples();
}

#[test]
fn a_served_image_gets_every_resource_annotated() {
    let response = stamp()
        .evaluate("example.com/stamp:v1", DEPLOYMENT)
        .unwrap();
    let text = String::from_utf8(response.resource_list).unwrap();
    assert!(text.contains("team: platform"), "{text}");
    assert_eq!(response.log, b"stamped 1 annotation(s)\n");
}

#[test]
fn other_images_are_declined_with_the_reason() {
    let error = stamp()
        .evaluate("example.com/other:v1", DEPLOYMENT)
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(
        error
            .message
            .contains("stamp serves only example.com/stamp:v1"),
        "{}",
        error.message
    );
}

#[test]
fn a_call_cancelled_before_it_runs_is_answered_as_cancelled() {
    let error = stamp()
        .call("example.com/stamp:v1")
        .cancel_after(Duration::ZERO, CancelReason::CallerCancelled)
        .run(DEPLOYMENT)
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Cancelled, "{}", error.message);
}

#[test]
fn input_that_is_not_a_resource_list_is_refused_as_invalid() {
    let error = stamp()
        .evaluate("example.com/stamp:v1", b"items: 3\n")
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidInput, "{}", error.message);
}

#[test]
fn every_config_problem_is_reported_at_once() {
    let error = PluginTester::new()
        .build::<StampPlugin>(
            "stamp",
            json!({"images": ["", " "], "annotations": {"": "x"}}),
        )
        .err()
        .unwrap();
    let fields: Vec<_> = error
        .problems()
        .iter()
        .map(|problem| problem.field.clone().unwrap_or_default())
        .collect();
    assert_eq!(fields, ["images[0]", "images[1]", "annotations."]);
}

#[test]
fn a_typo_in_the_config_names_the_field() {
    let error = PluginTester::new()
        .build::<StampPlugin>("stamp", json!({"images": ["a"], "anotations": {}}))
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("unknown field `anotations`"),
        "{error}"
    );
}

#[test]
fn what_the_stamp_does_not_touch_stays_as_written() {
    let input = b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1 # core\n  kind: ConfigMap\n  metadata:\n    name: 'settings'\n  data: {mode: \"fast\"}\n";
    let response = stamp().evaluate("example.com/stamp:v1", input).unwrap();
    assert_eq!(
        String::from_utf8(response.resource_list).unwrap(),
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1 # core\n  kind: ConfigMap\n  metadata:\n    name: 'settings'\n    annotations:\n      team: platform\n  data: {mode: \"fast\"}\n"
    );
}
