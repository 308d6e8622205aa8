//! Docker config JSON files (`{"auths": {"<registry>": {"auth": "<base64 user:password>"}}}`,
//! what a `kubernetes.io/dockerconfigjson` Secret holds): the registry credentials the pod
//! evaluator's private registries (Porch's `--enable-private-registries`), the trust policy's
//! registry requests and the wasm evaluator's pulls all read, so that an operator mounts one
//! Secret for them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::config_file::{self, ReadError};

/// What is wrong with the docker config file; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    /// The file cannot be read (missing, unreadable, not a regular file, too large).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file is not JSON.
    #[error("{}: not a docker config JSON file: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The JSON has no `auths` object.
    #[error("{}: no \"auths\" object (expected {{\"auths\": {{\"<registry>\": {{\"auth\": \"<base64 user:password>\"}}}}}})", path.display())]
    NoAuths { path: PathBuf },
    /// A registry's entry has no usable credentials.
    #[error("{}: auths entry {registry:?}: {reason}", path.display())]
    BadEntry {
        path: PathBuf,
        registry: String,
        reason: &'static str,
    },
}

/// One reading of a docker config file: its bytes (the Secret's content) and the credentials
/// per registry host.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    pub content: Vec<u8>,
    credentials: HashMap<String, (String, String)>,
}

impl DockerConfig {
    /// Reads and checks `path` as it is now.
    pub fn read(path: &Path) -> Result<Self, DockerConfigError> {
        let content = config_file::read_bytes(path)?;
        let credentials = parse(path, &content)?;
        Ok(Self {
            content,
            credentials,
        })
    }

    /// The user and password for `registry` (a reference's host[:port]), if the file has them;
    /// callers pull anonymously otherwise, as Porch does.
    pub fn credentials_for(&self, registry: &str) -> Option<(&str, &str)> {
        self.credentials
            .get(&canonical_host(registry))
            .map(|(user, password)| (user.as_str(), password.as_str()))
    }
}

/// `{"auths": {"<registry>": {"auth": base64("user:password")} | {"username", "password"}}}`.
/// Entries with only tokens (`identitytoken`, `registrytoken`) are kept for the nodes but give
/// the metadata fetch no credentials.
fn parse(
    path: &Path,
    content: &[u8],
) -> Result<HashMap<String, (String, String)>, DockerConfigError> {
    let config: serde_json::Value =
        serde_json::from_slice(content).map_err(|source| DockerConfigError::NotJson {
            path: path.to_owned(),
            source,
        })?;
    let auths = config["auths"]
        .as_object()
        .ok_or_else(|| DockerConfigError::NoAuths {
            path: path.to_owned(),
        })?;
    let mut credentials = HashMap::new();
    for (registry, entry) in auths {
        let bad = |reason| DockerConfigError::BadEntry {
            path: path.to_owned(),
            registry: registry.clone(),
            reason,
        };
        if !entry.is_object() {
            return Err(bad("not an object"));
        }
        let pair = match (
            entry["username"].as_str(),
            entry["password"].as_str(),
            entry["auth"].as_str(),
        ) {
            (Some(user), Some(password), _) => Some((user.to_owned(), password.to_owned())),
            (_, _, Some(encoded)) if !encoded.is_empty() => Some(
                decode_basic(encoded)
                    .ok_or_else(|| bad("\"auth\" is not base64 of user:password"))?,
            ),
            _ => None,
        };
        if let Some(pair) = pair {
            credentials.insert(canonical_host(registry), pair);
        }
    }
    Ok(credentials)
}

/// A docker config key (`https://index.docker.io/v1/`, `registry.example:5000`, ...) or an image
/// reference's registry, as the one host name both are compared by.
fn canonical_host(registry: &str) -> String {
    let host = registry
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host);
    match host {
        "docker.io" | "registry-1.docker.io" => "index.docker.io".to_owned(),
        other => other.to_owned(),
    }
}

fn decode_basic(encoded: &str) -> Option<(String, String)> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".dockerconfigjson");
        std::fs::write(&file, content).unwrap();
        (dir, file)
    }

    #[test]
    fn credentials_by_registry_host() {
        let (_dir, file) = write(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"},
                "registry.example:5000": {"username": "robot", "password": "secret:with:colons"},
                "tokens.example": {"identitytoken": "abc"}
            }}"#,
        );
        let config = DockerConfig::read(&file).unwrap();
        assert_eq!(
            config.credentials_for("index.docker.io"),
            Some(("user", "pass"))
        );
        assert_eq!(config.credentials_for("docker.io"), Some(("user", "pass")));
        assert_eq!(
            config.credentials_for("registry.example:5000"),
            Some(("robot", "secret:with:colons"))
        );
        assert_eq!(config.credentials_for("tokens.example"), None);
        assert_eq!(config.credentials_for("elsewhere.example"), None);
        assert!(config.content.starts_with(b"{\"auths\""));
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = DockerConfig::read(&dir.path().join("absent.json"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("absent.json") && error.contains("no such file or directory"),
            "{error}"
        );

        for (content, expected) in [
            ("{not json", "not a docker config JSON file"),
            (r#"{"credHelpers": {}}"#, "no \"auths\" object"),
            (
                r#"{"auths": {"r.example": {"auth": "%%%"}}}"#,
                "auths entry \"r.example\"",
            ),
            (r#"{"auths": {"r.example": "user:pass"}}"#, "not an object"),
        ] {
            let (_dir, file) = write(content);
            let error = DockerConfig::read(&file).unwrap_err().to_string();
            assert!(
                error.contains(".dockerconfigjson") && error.contains(expected),
                "{content}: {error}"
            );
        }
    }
}
