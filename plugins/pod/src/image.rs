//! Image references and their registry metadata (manifest digest, entrypoint), cached per image.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// `name` without a registry gets the default prefix (kpt's rule: only when it has no `/`).
pub fn resolve(image: &str, default_prefix: &str) -> String {
    if image.contains('/') || default_prefix.is_empty() {
        image.to_owned()
    } else {
        format!("{}/{image}", default_prefix.trim_end_matches('/'))
    }
}

/// A readable stem for pod names: `<name>-<tag without dots>-<digest[:8]>` (Porch's pod ID,
/// without its index: names here end in a random suffix instead, so they never collide).
pub fn pod_stem(image: &str, digest: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let (name, tag) = match last.split_once(':') {
        Some((name, tag)) => (name, tag.replace('.', "")),
        None => (
            last,
            if image.contains('@') {
                "digest".to_owned()
            } else {
                "latest".to_owned()
            },
        ),
    };
    let hex = digest.trim_start_matches("sha256:");
    let stem = format!(
        "{}-{}-{}",
        name.replace('_', "-"),
        tag,
        &hex[..hex.len().min(8)]
    );
    let stem: String = stem
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(50)
        .collect();
    stem.trim_matches('-').to_owned()
}

#[derive(Debug, Clone)]
pub struct Metadata {
    pub digest: String,
    pub entrypoint: Vec<String>,
}

/// Fetches and caches image metadata. A tag's first digest is kept until restart, as in Porch.
pub struct Registry {
    client: Client,
    credentials: HashMap<String, RegistryAuth>,
    cache: Mutex<HashMap<String, Metadata>>,
}

/// What the registry client is told.
pub struct RegistryOptions<'a> {
    pub plain_http: &'a [String],
    pub docker_config: Option<&'a Path>,
    pub ca_dir: Option<&'a Path>,
}

impl Registry {
    pub fn new(options: RegistryOptions<'_>) -> Result<Self, String> {
        let mut config = ClientConfig {
            protocol: if options.plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(options.plain_http.to_vec())
            },
            platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
            ..ClientConfig::default()
        };
        if let Some(dir) = options.ca_dir {
            let file = ["ca.crt", "ca.pem"]
                .iter()
                .map(|name| dir.join(name))
                .find(|path| path.is_file())
                .ok_or_else(|| {
                    format!("tls_secret_path: no ca.crt or ca.pem in {}", dir.display())
                })?;
            let data = std::fs::read(&file)
                .map_err(|e| format!("tls_secret_path: {}: {e}", file.display()))?;
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let credentials = match options.docker_config {
            Some(path) => read_docker_config(path)?,
            None => HashMap::new(),
        };
        Ok(Self {
            client: Client::new(config),
            credentials,
            cache: Mutex::default(),
        })
    }

    pub async fn metadata(&self, image: &str) -> Result<Metadata, String> {
        if let Some(cached) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
        {
            return Ok(cached.clone());
        }
        let reference: Reference = image
            .parse()
            .map_err(|e| format!("{image:?} is not an image reference: {e}"))?;
        let auth = self
            .credentials
            .get(reference.resolve_registry())
            .cloned()
            .unwrap_or(RegistryAuth::Anonymous);
        let (_, digest, config) = self
            .client
            .pull_manifest_and_config(&reference, &auth)
            .await
            .map_err(|e| format!("unable to get the entrypoint for {image}: {e}"))?;
        let config: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| format!("unable to read the image config of {image}: {e}"))?;
        let strings = |key: &str| -> Vec<String> {
            config["config"][key]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut entrypoint = strings("Entrypoint");
        if entrypoint.is_empty() {
            entrypoint = strings("Cmd");
        }
        if entrypoint.is_empty() {
            return Err(format!("image {image} has neither an Entrypoint nor a Cmd"));
        }
        let metadata = Metadata { digest, entrypoint };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.to_owned(), metadata.clone());
        Ok(metadata)
    }
}

/// `{"auths": {"registry": {"auth": base64("user:pass")} | {"username", "password"}}}`.
fn read_docker_config(path: &Path) -> Result<HashMap<String, RegistryAuth>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a docker config: {e}", path.display()))?;
    let mut credentials = HashMap::new();
    for (registry, entry) in config["auths"].as_object().into_iter().flatten() {
        let pair = match (
            entry["username"].as_str(),
            entry["password"].as_str(),
            entry["auth"].as_str(),
        ) {
            (Some(user), Some(password), _) => Some((user.to_owned(), password.to_owned())),
            (_, _, Some(encoded)) => decode_basic(encoded),
            _ => None,
        };
        if let Some((user, password)) = pair {
            let host = registry
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            let host = host.split('/').next().unwrap_or(host).to_owned();
            credentials.insert(host, RegistryAuth::Basic(user, password));
        }
    }
    Ok(credentials)
}

fn decode_basic(encoded: &str) -> Option<(String, String)> {
    use base64::Engine as _;
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

    #[test]
    fn default_prefix_only_without_a_slash() {
        let prefix = "ghcr.io/kptdev/krm-functions-catalog/";
        assert_eq!(
            resolve("set-labels:v0.2", prefix),
            "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2"
        );
        assert_eq!(resolve("example.com/fn:v1", prefix), "example.com/fn:v1");
    }

    #[test]
    fn pod_stems_follow_porchs_pod_ids() {
        assert_eq!(
            pod_stem(
                "gcr.io/kpt-fn/apply-replacements:latest",
                "sha256:5245a527aaaa"
            ),
            "apply-replacements-latest-5245a527"
        );
        assert_eq!(
            pod_stem("x/set-labels:v0.4.1", "12345678ff"),
            "set-labels-v041-12345678"
        );
        assert_eq!(
            pod_stem("x/my_function", "aabbccddee"),
            "my-function-latest-aabbccdd"
        );
        assert_eq!(
            pod_stem("x/fn@sha256:abcdef0123456789", "abcdef0123"),
            "fn-digest-abcdef01"
        );
    }

    #[test]
    fn basic_auth_decodes() {
        assert_eq!(
            decode_basic("dXNlcjpwYXNz"),
            Some(("user".into(), "pass".into()))
        );
    }
}
