//! Image references, their registry metadata (manifest digest, entrypoint), cached per image,
//! and repositories' tag lists, cached per repository.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use krm_runner_function_config::registry_answer::{RegistryClient, TagListError, list_all_tags};
use krm_runner_proto::serving::with_causes;
use oci_client::Reference;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;

use crate::docker_config::{DockerConfig, auth_for};

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
    /// The client and the docker config content it was given credentials from: it keeps the
    /// first credentials it sees per registry, so new credentials need a new client.
    client: Mutex<(Vec<u8>, Arc<RegistryClient>)>,
    plain_http: Vec<String>,
    extra_ca: Option<Vec<u8>>,
    cache: Mutex<HashMap<String, Metadata>>,
    /// Tag lists by repository (`registry/path`).
    tags: Mutex<HashMap<String, ListedTags>>,
    /// Repositories whose tags are being listed again in the background.
    refreshing: Mutex<HashSet<String>>,
}

/// A repository's tags, and when the registry listed them.
struct ListedTags {
    tags: Arc<[String]>,
    at: Instant,
}

/// Most pages of a tag list read: a repository with more tags than this many pages hold is
/// refused rather than read without end.
const MAX_TAG_PAGES: usize = 1000;

impl Registry {
    /// `plain_http`: registries spoken to without TLS; `ca_file`: a PEM CA trusted besides the
    /// system's.
    pub fn new(plain_http: &[String], ca_file: Option<&Path>) -> Result<Self, String> {
        let extra_ca = ca_file
            .map(|file| std::fs::read(file).map_err(|e| format!("{}: {e}", file.display())))
            .transpose()?;
        let client = new_client(plain_http, extra_ca.as_deref())?;
        Ok(Self {
            client: Mutex::new((Vec::new(), Arc::new(client))),
            plain_http: plain_http.to_vec(),
            extra_ca,
            cache: Mutex::default(),
            tags: Mutex::default(),
            refreshing: Mutex::default(),
        })
    }

    /// The cached tags of `repository`, and whether they are older than `max_age`.
    pub fn cached_tags(
        &self,
        repository: &str,
        max_age: Duration,
    ) -> Option<(Arc<[String]>, bool)> {
        let tags = self.tags.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = tags.get(repository)?;
        Some((listed.tags.clone(), listed.at.elapsed() >= max_age))
    }

    /// Marks `repository` as being refreshed; false when a refresh already runs.
    pub fn begin_refresh(&self, repository: &str) -> bool {
        self.refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(repository.to_owned())
    }

    /// Lists the tags of `repository` (OCI distribution `tags/list`, `page_size` per page,
    /// following `last`) with the credentials and CA the metadata fetch uses, and caches them.
    pub async fn list_tags(
        &self,
        repository: &str,
        docker_config: Option<&DockerConfig>,
        page_size: usize,
    ) -> Result<Arc<[String]>, String> {
        let outcome = self
            .list_all_tags(repository, docker_config, page_size)
            .await;
        self.refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(repository);
        let tags: Arc<[String]> = outcome?.into();
        tracing::debug!(
            repository,
            tags = tags.len(),
            "listed the repository's tags"
        );
        self.tags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                repository.to_owned(),
                ListedTags {
                    tags: tags.clone(),
                    at: Instant::now(),
                },
            );
        Ok(tags)
    }

    async fn list_all_tags(
        &self,
        repository: &str,
        docker_config: Option<&DockerConfig>,
        page_size: usize,
    ) -> Result<Vec<String>, String> {
        let reference: Reference = repository
            .parse()
            .map_err(|e| format!("{repository:?} is not an image repository: {e}"))?;
        let auth = docker_config.map_or(RegistryAuth::Anonymous, |config| {
            auth_for(config, reference.resolve_registry())
        });
        let client = self.client_for(docker_config.map_or(&[][..], |config| &config.content))?;
        let page_size = page_size.max(1);
        list_all_tags(&client, &reference, &auth, page_size, MAX_TAG_PAGES)
            .await
            .map_err(|error| match error {
                TagListError::Read(e) => format!(
                    "unable to list the tags of {repository}: {}",
                    with_causes(&e)
                ),
                TagListError::TooMany { limit } => {
                    format!("{repository} has more than {limit} tags; refusing to read them all")
                }
            })
    }

    /// The digest of `image` if its metadata was fetched already.
    pub fn cached_digest(&self, image: &str) -> Option<String> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(image)
            .map(|metadata| metadata.digest.clone())
    }

    /// A client that authenticates with `docker_config`'s credentials.
    fn client_for(&self, docker_config: &[u8]) -> Result<Arc<RegistryClient>, String> {
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if client.0 != docker_config {
            let fresh = new_client(&self.plain_http, self.extra_ca.as_deref())?;
            *client = (docker_config.to_vec(), Arc::new(fresh));
        }
        Ok(client.1.clone())
    }

    /// The digest and entrypoint of `image`, authenticated with the matching entry of
    /// `docker_config` when there is one.
    pub async fn metadata(
        &self,
        image: &str,
        docker_config: Option<&DockerConfig>,
    ) -> Result<Metadata, String> {
        if let Some(cached) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(image)
        {
            return Ok(cached.clone());
        }
        let reference: Reference = image
            .parse()
            .map_err(|e| format!("{image:?} is not an image reference: {e}"))?;
        let auth = docker_config.map_or(RegistryAuth::Anonymous, |config| {
            auth_for(config, reference.resolve_registry())
        });
        let client = self.client_for(docker_config.map_or(&[][..], |config| &config.content))?;
        let (_, digest, config) = client
            .oci()
            .pull_manifest_and_config(&reference, &auth)
            .await
            .map_err(|e| {
                format!(
                    "unable to get the entrypoint for {image}: {}",
                    with_causes(&e)
                )
            })?;
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
            .unwrap_or_else(PoisonError::into_inner)
            .insert(image.to_owned(), metadata.clone());
        Ok(metadata)
    }
}

fn new_client(plain_http: &[String], extra_ca: Option<&[u8]>) -> Result<RegistryClient, String> {
    let mut config = ClientConfig {
        protocol: if plain_http.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(plain_http.to_vec())
        },
        platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
        ..ClientConfig::default()
    };
    if let Some(data) = extra_ca {
        config.extra_root_certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: data.to_vec(),
        });
    }
    RegistryClient::new(config)
        .map_err(|error| format!("cannot make a registry client: {}", with_causes(&error)))
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
}
