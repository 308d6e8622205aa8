//! The function trust policy (docs/trust.md): which function images may run, decided once per
//! call in the host before any evaluator sees it. Ordered rules match the image's repository
//! (globs) and tag (a version constraint); the first match allows or denies, and an allowing
//! rule may require the image to run by digest and to carry a cosign signature by a trusted key,
//! checked against its registry ([`registry`], [`signature`]).

mod registry;
pub mod settings;
mod signature;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use krm_plugin_api::quoted;
use krm_runner_function_config::ImageRef;
use krm_runner_function_config::docker_config::DockerConfig;
use krm_runner_function_config::version::{Constraint, parse_tag};

use self::registry::Registry;
pub use self::settings::{Action, PolicyConfig};
use self::signature::PublicKey;

/// The compiled policy.
pub struct Policy {
    default: Action,
    rules: Vec<Rule>,
    /// Every configured key, by name, in `keys`' order (rules refer to them by index).
    keys: Vec<(String, PublicKey)>,
    default_prefix: String,
    settings: settings::PolicyRegistries,
    extra_ca: Option<Vec<u8>>,
    auth: Option<DockerConfig>,
    registry: OnceLock<Result<Registry, String>>,
    verified: Mutex<Verified>,
}

struct Rule {
    name: String,
    images: GlobSet,
    tags: Option<Constraint>,
    action: Action,
    digests: Vec<String>,
    pinned: bool,
    /// Indices into [`Policy::keys`].
    signed_by: Vec<usize>,
}

/// Verified (digest, rule) pairs, the oldest forgotten first once `capacity` are held.
struct Verified {
    capacity: usize,
    set: HashSet<(String, usize)>,
    order: VecDeque<(String, usize)>,
}

impl Verified {
    fn contains(&self, digest: &str, rule: usize) -> bool {
        self.set.contains(&(digest.to_owned(), rule))
    }

    fn insert(&mut self, digest: &str, rule: usize) {
        let entry = (digest.to_owned(), rule);
        if self.set.insert(entry.clone()) {
            self.order.push_back(entry);
            while self.order.len() > self.capacity {
                if let Some(oldest) = self.order.pop_front() {
                    self.set.remove(&oldest);
                }
            }
        }
    }
}

/// Most bytes read from a key file: a PEM public key is a few hundred.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The decision about one call, as logs, spans, metrics and `functions --resolve` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The deciding rule's name; `default` for the policy's default, `none` without a policy.
    pub rule: String,
    pub allowed: bool,
    /// Why, in a few words, for an allowed call too (`signed by release`).
    pub reason: String,
}

impl Decision {
    pub fn outcome(&self) -> &'static str {
        if self.allowed { "allowed" } else { "denied" }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} by rule {}: {}",
            self.outcome(),
            quoted(&self.rule),
            self.reason
        )
    }
}

/// An allowed call: the image its evaluators get (`repository@sha256:...` when the rule pins
/// it), and the decision.
#[derive(Debug, Clone)]
pub struct Allowed {
    pub image: String,
    pub decision: Decision,
}

/// A refused call: PERMISSION_DENIED naming the rule and the reason, or UNAVAILABLE when the
/// registry could not be asked.
#[derive(Debug, Clone, thiserror::Error)]
#[error("function image {image} refused by policy rule {rule}: {refusal}", image = quoted(.image), rule = quoted(.rule))]
pub struct Denied {
    pub image: String,
    pub rule: String,
    pub refusal: Refusal,
}

impl Denied {
    pub fn decision(&self) -> Decision {
        Decision {
            rule: self.rule.clone(),
            allowed: false,
            reason: self.refusal.short().to_owned(),
        }
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    #[error("the rule denies it")]
    DeniedGlob,
    #[error("no rule allows it and the policy's default is deny")]
    DefaultDeny,
    /// A tag constraint is resolved by the evaluator, after the decision; a rule that pins
    /// digests cannot judge it.
    #[error(
        "the rule requires a digest, and tag constraint {} is resolved only after the \
         decision; name a tag or a digest", quoted(.0)
    )]
    TagNotPinned(String),
    #[error("{digest} is not a digest the rule pins ({})", .pins.join(", "))]
    OtherDigest { digest: String, pins: Vec<String> },
    #[error("unsigned: the registry has no signature for {digest} (tag {tag})")]
    Unsigned { digest: String, tag: String },
    #[error("signature of another digest: it signs {signed}, the image is {digest}")]
    SignatureOfAnotherDigest { signed: String, digest: String },
    #[error("unknown key: no signature of {digest} verifies with the rule's keys ({keys})")]
    UnknownKey { digest: String, keys: String },
    #[error("malformed signature of {digest}: {problem}")]
    MalformedSignature { digest: String, problem: String },
    #[error("the registry could not be asked: {0}")]
    Registry(String),
}

impl Refusal {
    /// The reason's name, for logs and metrics.
    pub fn short(&self) -> &'static str {
        match self {
            Refusal::DeniedGlob => "denied glob",
            Refusal::DefaultDeny => "default deny",
            Refusal::TagNotPinned(_) => "tag not pinned",
            Refusal::OtherDigest { .. } => "digest not pinned",
            Refusal::Unsigned { .. } => "unsigned",
            Refusal::SignatureOfAnotherDigest { .. } => "signature of another digest",
            Refusal::UnknownKey { .. } => "unknown key",
            Refusal::MalformedSignature { .. } => "malformed signature",
            Refusal::Registry(_) => "registry unavailable",
        }
    }

    /// Whether the registry, not the image, is at fault: the caller may try again.
    pub fn is_registry(&self) -> bool {
        matches!(self, Refusal::Registry(_))
    }
}

/// What [`Policy::decide`] found without the registry.
enum Verdict<'a> {
    Allow(Decision),
    Deny(Denied),
    /// An allowing rule that needs the registry: by index.
    Check(usize, &'a Rule),
}

impl Policy {
    /// Compiles `config`, reading its key files; every problem is returned, each naming its
    /// field below `policy`.
    pub fn build(config: &PolicyConfig, default_prefix: &str) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut keys = Vec::new();
        for (name, path) in &config.keys {
            match PublicKey::read(path, MAX_KEY_FILE_BYTES) {
                Ok(key) => keys.push((name.clone(), key)),
                Err(error) => problems.push(format!("policy.keys.{name}: {error}")),
            }
        }
        let key_index: BTreeMap<&str, usize> = config
            .keys
            .keys()
            .enumerate()
            .map(|(index, name)| (name.as_str(), index))
            .collect();
        let mut rules = Vec::new();
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, rule) in config.rules.iter().enumerate() {
            let at = format!("policy.rules[{index}]");
            if rule.name.trim().is_empty() {
                problems.push(format!("{at}.name: empty"));
            } else if let Some(first) = names.insert(&rule.name, index) {
                problems.push(format!(
                    "{at}.name: {} names policy.rules[{first}] too",
                    quoted(&rule.name)
                ));
            }
            let mut globs = GlobSetBuilder::new();
            if rule.images.is_empty() {
                problems.push(format!(
                    "{at}.images: empty; a rule needs at least one glob"
                ));
            }
            for (position, glob) in rule.images.iter().enumerate() {
                let field = format!("{at}.images[{position}]");
                if glob.contains('@') || glob.rsplit('/').next().is_some_and(|l| l.contains(':')) {
                    problems.push(format!(
                        "{field}: {} names a tag or digest; globs match the repository, \
                         `tags` and `digests` the rest",
                        quoted(glob)
                    ));
                    continue;
                }
                match GlobBuilder::new(glob).literal_separator(true).build() {
                    Ok(glob) => {
                        globs.add(glob);
                    }
                    Err(error) => problems.push(format!(
                        "{field}: invalid glob {}: {}",
                        quoted(glob),
                        error.kind()
                    )),
                }
            }
            let tags = rule.tags.as_deref().and_then(|tags| {
                Constraint::parse(tags)
                    .map_err(|error| problems.push(format!("{at}.tags: {error}")))
                    .ok()
            });
            for (position, digest) in rule.digests.iter().enumerate() {
                if !is_sha256_digest(digest) {
                    problems.push(format!(
                        "{at}.digests[{position}]: {} is not a digest such as sha256:<64 hex digits>",
                        quoted(digest)
                    ));
                }
            }
            let mut signed_by = Vec::new();
            for (position, key) in rule.signed_by.iter().enumerate() {
                match key_index.get(key.as_str()) {
                    Some(&index) => signed_by.push(index),
                    None => problems.push(format!(
                        "{at}.signed_by[{position}]: no key named {} in policy.keys",
                        quoted(key)
                    )),
                }
            }
            let pinned = rule.require_digest || !rule.digests.is_empty() || !signed_by.is_empty();
            if rule.action == Action::Deny && (pinned || !rule.signed_by.is_empty()) {
                problems.push(format!(
                    "{at}.action: a deny rule requires nothing; require_digest, digests and \
                     signed_by belong to allow rules"
                ));
            }
            let images = globs.build().unwrap_or_else(|_| GlobSet::empty());
            rules.push(Rule {
                name: rule.name.clone(),
                images,
                tags,
                action: rule.action,
                digests: rule.digests.clone(),
                pinned,
                signed_by,
            });
        }
        if config.verified_digests == 0 {
            problems.push("policy.verified_digests: 0 is too small (at least 1)".to_owned());
        }
        if config.registries.timeout_seconds == 0 {
            problems
                .push("policy.registries.timeout_seconds: 0 is too small (at least 1)".to_owned());
        }
        let extra_ca = config.registries.ca_file.as_ref().and_then(|file| {
            krm_runner_function_config::config_file::read_bytes(file)
                .map_err(|error| problems.push(format!("policy.registries.ca_file: {error}")))
                .ok()
        });
        let auth = config.registries.auth_file.as_ref().and_then(|file| {
            DockerConfig::read(file)
                .map_err(|error| problems.push(format!("policy.registries.auth_file: {error}")))
                .ok()
        });
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Self {
            default: config.default,
            rules,
            keys,
            default_prefix: default_prefix.to_owned(),
            settings: config.registries.clone(),
            extra_ca,
            auth,
            registry: OnceLock::new(),
            verified: Mutex::new(Verified {
                capacity: config.verified_digests,
                set: HashSet::new(),
                order: VecDeque::new(),
            }),
        })
    }

    /// Whether every image runs unchecked, as without a policy.
    pub fn is_open(&self) -> bool {
        self.rules.is_empty() && self.default == Action::Allow
    }

    /// Decides about a call for `image` (under the tag `constraint`, if any) within
    /// `deadline`; the registry is asked only when the deciding rule pins digests.
    pub async fn admit(
        &self,
        image: &str,
        constraint: Option<&Constraint>,
        deadline: Option<Instant>,
    ) -> Result<Allowed, Denied> {
        match self.decide(image, constraint) {
            Verdict::Allow(decision) => Ok(Allowed {
                image: image.to_owned(),
                decision,
            }),
            Verdict::Deny(denied) => Err(denied),
            Verdict::Check(index, rule) => {
                let limit = Duration::from_secs(self.settings.timeout_seconds);
                let limit = match deadline {
                    Some(deadline) => limit.min(deadline.saturating_duration_since(Instant::now())),
                    None => limit,
                };
                let denied = |refusal| Denied {
                    image: image.to_owned(),
                    rule: rule.name.clone(),
                    refusal,
                };
                match tokio::time::timeout(limit, self.check(index, rule, image)).await {
                    Ok(outcome) => outcome.map_err(denied),
                    Err(_) => Err(denied(Refusal::Registry(format!(
                        "no answer within {} ms",
                        limit.as_millis()
                    )))),
                }
            }
        }
    }

    /// [`Policy::admit`] for a process without an async runtime (`krm-runner fn`): one is
    /// started only when the registry must be asked.
    pub fn admit_blocking(&self, image: &str) -> Result<Allowed, Denied> {
        if let Verdict::Allow(decision) = self.decide(image, None) {
            return Ok(Allowed {
                image: image.to_owned(),
                decision,
            });
        }
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(self.admit(image, None, None)),
            Err(error) => Err(Denied {
                image: image.to_owned(),
                rule: String::new(),
                refusal: Refusal::Registry(format!("cannot start the async runtime: {error}")),
            }),
        }
    }

    /// The decision rules and globs alone make: allow, deny, or ask the registry.
    fn decide(&self, image: &str, constraint: Option<&Constraint>) -> Verdict<'_> {
        if self.is_open() {
            return Verdict::Allow(Decision {
                rule: "none".to_owned(),
                allowed: true,
                reason: "no policy".to_owned(),
            });
        }
        let reference = ImageRef::parse(image, &self.default_prefix);
        let repository = format!("{}/{}", reference.repo, reference.name);
        let denied = |rule: &str, refusal| {
            Verdict::Deny(Denied {
                image: image.to_owned(),
                rule: rule.to_owned(),
                refusal,
            })
        };
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.images.is_match(&repository) || !rule.admits_tag(&reference.tag, constraint) {
                continue;
            }
            return match rule.action {
                Action::Deny => denied(&rule.name, Refusal::DeniedGlob),
                Action::Allow if !rule.pinned => Verdict::Allow(Decision {
                    rule: rule.name.clone(),
                    allowed: true,
                    reason: "allowed".to_owned(),
                }),
                Action::Allow => match constraint {
                    Some(constraint) => denied(
                        &rule.name,
                        Refusal::TagNotPinned(constraint.as_str().to_owned()),
                    ),
                    None => Verdict::Check(index, rule),
                },
            };
        }
        match self.default {
            Action::Allow => Verdict::Allow(Decision {
                rule: "default".to_owned(),
                allowed: true,
                reason: "no rule matches".to_owned(),
            }),
            Action::Deny => denied("default", Refusal::DefaultDeny),
        }
    }

    /// The registry's part: the digest (resolved when the image names only a tag), checked
    /// against the rule's pins, and its signature against the rule's keys.
    async fn check(&self, index: usize, rule: &Rule, image: &str) -> Result<Allowed, Refusal> {
        let reference = ImageRef::parse(image, &self.default_prefix);
        let repository = format!("{}/{}", reference.repo, reference.name);
        let digest = match &reference.digest {
            Some(digest) => digest.clone(),
            None => {
                let tag = if reference.tag.is_empty() {
                    "latest"
                } else {
                    &reference.tag
                };
                self.registry()?
                    .digest(&format!("{repository}:{tag}"))
                    .await
                    .map_err(Refusal::Registry)?
            }
        };
        if !rule.digests.is_empty() && !rule.digests.contains(&digest) {
            return Err(Refusal::OtherDigest {
                digest,
                pins: rule.digests.clone(),
            });
        }
        let mut reason = format!("pinned to {digest}");
        if !rule.signed_by.is_empty() {
            let cached = self
                .verified
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&digest, index);
            let signer = if cached {
                None
            } else {
                let keys: Vec<(&str, &PublicKey)> = rule
                    .signed_by
                    .iter()
                    .map(|&key| (self.keys[key].0.as_str(), &self.keys[key].1))
                    .collect();
                let signer =
                    signature::verify(self.registry()?, &repository, &digest, &keys).await?;
                self.verified
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(&digest, index);
                Some(signer)
            };
            reason = match signer {
                Some(key) => format!("{reason}, signed by {key}"),
                None => format!("{reason}, signature verified before"),
            };
        }
        Ok(Allowed {
            image: format!("{repository}@{digest}"),
            decision: Decision {
                rule: rule.name.clone(),
                allowed: true,
                reason,
            },
        })
    }

    fn registry(&self) -> Result<&Registry, Refusal> {
        self.registry
            .get_or_init(|| {
                Registry::new(
                    &self.settings.plain_http,
                    self.extra_ca.as_deref(),
                    self.auth.clone(),
                )
            })
            .as_ref()
            .map_err(|problem| Refusal::Registry(problem.clone()))
    }
}

impl Rule {
    /// Whether the call's tag satisfies `tags`. A tag that is not a version (`latest`, none, a
    /// digest alone) or a constraint that may resolve outside them cannot be judged: a deny rule
    /// then matches and an allow rule does not, so an unjudged call is never let through.
    fn admits_tag(&self, tag: &str, constraint: Option<&Constraint>) -> bool {
        let Some(tags) = &self.tags else {
            return true;
        };
        let judged = match constraint {
            Some(constraint) => match constraint.exact() {
                Some(exact) => parse_tag(exact).map(|version| tags.matches(&version)),
                None if self.action == Action::Deny => Some(constraint.overlaps(tags)),
                None => None,
            },
            None => parse_tag(tag).map(|version| tags.matches(&version)),
        };
        judged.unwrap_or(self.action == Action::Deny)
    }
}

pub(crate) fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests;
