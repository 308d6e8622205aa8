//! The `policy:` section of the configuration, as written, and what is wrong with it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Which function images may run (docs/trust.md). Absent, every image may, as before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// What happens to an image no rule matches: `allow` (the default) or `deny`.
    pub default: Action,
    /// Rules in order: the first whose `images` and `tags` match the call's image decides.
    pub rules: Vec<RuleConfig>,
    /// Public keys (PEM files: ECDSA P-256 or Ed25519, as `cosign generate-key-pair` writes
    /// them) by the name rules' `signed_by` use.
    pub keys: BTreeMap<String, PathBuf>,
    /// How the registries holding images and their signatures are reached.
    pub registries: PolicyRegistries,
    /// How many verified digests are remembered, so that only an image's first call pays for
    /// the signature check.
    pub verified_digests: usize,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            default: Action::Allow,
            rules: Vec::new(),
            keys: BTreeMap::new(),
            registries: PolicyRegistries::default(),
            verified_digests: 4096,
        }
    }
}

impl PolicyConfig {
    /// Whether no rule is configured and the default allows: every image runs unchecked.
    pub fn is_open(&self) -> bool {
        self.rules.is_empty() && self.default == Action::Allow
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Allow,
    Deny,
}

/// One rule of the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in answers, logs and metrics.
    pub name: String,
    /// Globs on the image's registry and repository, without tag or digest
    /// (`ghcr.io/kptdev/krm-functions-catalog/*`); `*` stays within one path segment, `**`
    /// crosses them. A name without a registry is matched with the default image prefix.
    pub images: Vec<String>,
    /// A version constraint the image's tag must satisfy (`>= 0.4, < 1`), as FunctionConfig
    /// tags are written; absent, any tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    pub action: Action,
    /// The digests (`sha256:...`) an allowed image must be; implies `require_digest`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub digests: Vec<String>,
    /// An allowed image runs by digest: a tag is resolved in the registry, and evaluators are
    /// given `repository@sha256:...`, so a tag moved after the check cannot slip in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_digest: bool,
    /// An allowed image must carry a cosign signature, beside it in its registry, made by one
    /// of these keys (names in `keys`); implies `require_digest`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signed_by: Vec<String>,
}

/// How the policy reaches registries (the pod evaluator has settings of its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyRegistries {
    /// Registries (`host:port`) spoken to over plain HTTP.
    pub plain_http: Vec<String>,
    /// A PEM CA trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A docker config JSON file (`{"auths": {"<registry>": {"auth": "<base64 user:password>"}}}`)
    /// whose credentials the policy's requests use, per registry; anonymous for registries it
    /// does not name. The pod evaluator's `registry_auth_secret_path` reads the same format:
    /// name the same mounted Secret. Read at start-up.
    pub auth_file: Option<PathBuf>,
    /// The longest a registry check may take, within the call's own deadline.
    pub timeout_seconds: u64,
}

impl Default for PolicyRegistries {
    fn default() -> Self {
        Self {
            plain_http: Vec::new(),
            ca_file: None,
            auth_file: None,
            timeout_seconds: 10,
        }
    }
}
