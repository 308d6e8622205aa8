use super::*;

const PREFIX: &str = "ghcr.io/kptdev/krm-functions-catalog";

fn policy(yaml: &str) -> Result<Policy, Vec<String>> {
    let config: PolicyConfig =
        krm_runner_function_config::config_file::from_yaml(yaml).expect("a policy");
    Policy::build(&config, PREFIX)
}

/// `rule: outcome` of the decision without the registry; `check` when it must be asked.
fn decide(policy: &Policy, image: &str, constraint: Option<&str>) -> String {
    let constraint = constraint.map(|text| Constraint::parse(text).unwrap());
    match policy.decide(image, constraint.as_ref()) {
        Verdict::Allow(decision) => format!("{}: allowed", decision.rule),
        Verdict::Deny(denied) => format!("{}: {}", denied.rule, denied.refusal.short()),
        Verdict::Check(_, rule) => format!("{}: check", rule.name),
    }
}

#[test]
fn no_policy_allows_everything() {
    let open = policy("{}").unwrap();
    assert!(open.is_open());
    assert_eq!(decide(&open, "anything/at:all", None), "none: allowed");
}

#[test]
fn the_first_matching_rule_decides() {
    let policy = policy(
        "default: deny
rules:
- {name: no-apply, images: ['**/apply-*'], action: deny}
- {name: catalog, images: ['ghcr.io/kptdev/krm-functions-catalog/*'], tags: '>= 0.2, < 1', action: allow}
- {name: ours, images: ['registry.example.com/team/**'], action: allow, require_digest: true}
",
    )
    .unwrap();
    for (image, constraint, expected) in [
        ("set-namespace:v0.4.1", None, "catalog: allowed"),
        (
            "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.0",
            None,
            "catalog: allowed",
        ),
        ("apply-setters:v0.2.0", None, "no-apply: denied glob"),
        // Tags outside the rule's, and tags that are no version, fall to the default.
        ("set-namespace:v1.0.0", None, "default: default deny"),
        ("set-namespace", None, "default: default deny"),
        ("set-namespace:latest", None, "default: default deny"),
        // `*` stays within one path segment.
        (
            "ghcr.io/kptdev/krm-functions-catalog/x/y:v0.3.0",
            None,
            "default: default deny",
        ),
        ("registry.example.com/team/a/b:v1", None, "ours: check"),
        (
            "registry.example.com/team/a@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            None,
            "ours: check",
        ),
        // A constraint is judged only when it names one version.
        ("set-namespace", Some("v0.4.1"), "catalog: allowed"),
        ("set-namespace", Some(">= 0.4"), "default: default deny"),
        (
            "registry.example.com/team/a",
            Some("1.2.3"),
            "ours: tag not pinned",
        ),
    ] {
        assert_eq!(
            decide(&policy, image, constraint),
            expected,
            "{image} {constraint:?}"
        );
    }
}

#[test]
fn a_deny_rule_matches_what_it_cannot_judge() {
    let policy =
        policy("rules:\n- {name: old, images: ['**'], tags: '< 1', action: deny}\n").unwrap();
    assert_eq!(decide(&policy, "a/b:v0.9.0", None), "old: denied glob");
    assert_eq!(decide(&policy, "a/b:v1.0.0", None), "default: allowed");
    assert_eq!(decide(&policy, "a/b", None), "old: denied glob");
    assert_eq!(decide(&policy, "a/b", Some(">= 0.5")), "old: denied glob");
    assert_eq!(decide(&policy, "a/b", Some(">= 1")), "default: allowed");
}

#[test]
fn every_malformed_rule_is_reported_naming_its_field() {
    let problems = policy(
        "keys: {bad: /nonexistent/key.pub}
verified_digests: 0
rules:
- {name: '', images: [], action: allow}
- {name: a, images: ['a/[b'], tags: '>> 1', action: allow, digests: [sha256:12], signed_by: [nobody]}
- {name: a, images: ['x/y:v1'], action: deny, require_digest: true}
",
    )
    .map(|_| ())
    .unwrap_err();
    let text = problems.join("\n");
    for expected in [
        "policy.keys.bad: ",
        "policy.verified_digests: 0",
        "policy.rules[0].name: empty",
        "policy.rules[0].images: empty",
        "policy.rules[1].images[0]: invalid glob \"a/[b\"",
        "policy.rules[1].tags: invalid version constraint",
        "policy.rules[1].digests[0]: \"sha256:12\" is not a digest",
        "policy.rules[1].signed_by[0]: no key named \"nobody\"",
        "policy.rules[2].name: \"a\" names policy.rules[1] too",
        "policy.rules[2].images[0]: \"x/y:v1\" names a tag or digest",
        "policy.rules[2].action: a deny rule requires nothing",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    assert_eq!(problems.len(), 11, "{text}");
}

#[test]
fn a_key_file_that_is_not_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key.pub");
    std::fs::write(
        &file,
        "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    let problems = policy(&format!("keys: {{k: {}}}\n", file.display()))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(problems.len(), 1);
    assert!(problems[0].starts_with("policy.keys.k: "), "{problems:?}");
    assert!(
        problems[0].contains("is not a PEM public key"),
        "{problems:?}"
    );
}

#[test]
fn verified_digests_are_bounded() {
    let mut verified = Verified {
        capacity: 2,
        set: HashSet::new(),
        order: VecDeque::new(),
    };
    for digest in ["a", "b", "c"] {
        verified.insert(digest, 0);
    }
    assert!(!verified.contains("a", 0));
    assert!(verified.contains("b", 0) && verified.contains("c", 0));
    assert!(!verified.contains("c", 1));
}
