//! Image references, their registry metadata (manifest digest, entrypoint), cached per image
//! and checked again ([`Registry::recheck`]), and repositories' tag lists, cached per
//! repository.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use krm_runner_function_config::registry_answer::{
    ImageConfig, RegistryClient, TagListError, list_all_tags,
};
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

/// The digest `image` names (`name[:tag]@digest`), if it names one.
pub fn digest_of(image: &str) -> Option<&str> {
    image.split_once('@').map(|(_, digest)| digest)
}

/// `image` (with its tag, if any) pinned to `digest`: `name[:tag]@digest`.
pub fn pinned(image: &str, digest: &str) -> String {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    format!("{name}@{digest}")
}

/// The tag `image` was pinned from (`name:tag` of `name:tag@digest`), as the pod-cache config
/// file names it; `image` itself when it has no tag or no digest.
pub fn unpinned(image: &str) -> &str {
    match image.split_once('@') {
        Some((name, _)) if tag_start(name).is_some() => name,
        _ => image,
    }
}

/// Whether `image` names a tag (`name:tag`, perhaps pinned to a digest too).
pub fn has_tag(image: &str) -> bool {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    tag_start(name).is_some()
}

/// `image` as a node pulls it: by digest alone when it has one (`name@digest`), so that a
/// tag that moved since is not pulled, nor an image cached under the tag run.
pub fn by_digest(image: &str) -> String {
    match image.split_once('@') {
        Some((name, digest)) => {
            let name = tag_start(name).map_or(name, |start| &name[..start]);
            format!("{name}@{digest}")
        }
        None => image.to_owned(),
    }
}

/// Where the `:tag` of the digest-less `name` starts: a `:` after the last `/` (one before it
/// is a registry's port).
fn tag_start(name: &str) -> Option<usize> {
    let last = name.rfind('/').map_or(0, |slash| slash + 1);
    name[last..].find(':').map(|colon| last + colon)
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

/// Fetches and caches image metadata. A tag's digest is kept until [`Registry::recheck`]
/// finds it moved (Porch keeps the first until it restarts).
pub struct Registry {
    /// The client and the docker config content it was given credentials from: it keeps the
    /// first credentials it sees per registry, so new credentials need a new client.
    client: Mutex<(Vec<u8>, Arc<RegistryClient>)>,
    plain_http: Vec<String>,
    extra_ca: Option<Vec<u8>>,
    cache: Mutex<HashMap<String, Fetched>>,
    /// Tags whose digest is being checked again in the background.
    rechecking: Mutex<HashSet<String>>,
    /// Tag lists by repository (`registry/path`).
    tags: Mutex<HashMap<String, ListedTags>>,
    /// Repositories whose tags are being listed again in the background.
    refreshing: Mutex<HashSet<String>>,
}

/// An image's metadata, and what the registry answered for its manifest and when.
struct Fetched {
    metadata: Metadata,
    /// The manifest digest a HEAD request answers: the image index's for a multi-platform
    /// image, whose platform manifest `metadata.digest` names.
    listed: String,
    at: Instant,
}

/// A repository's tags, and when the registry listed them.
struct ListedTags {
    tags: Arc<[String]>,
    at: Instant,
}

/// Most bytes of an image's manifest (or index) and of its config read: Docker's and OCI's
/// are a few KiB, a large index some hundred.
const MAX_IMAGE_METADATA_BYTES: usize = 1024 * 1024;

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
            rechecking: Mutex::default(),
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
        let (client, reference, auth) =
            self.client_and_auth(repository, "an image repository", docker_config)?;
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
        self.known_digest(image, Duration::MAX)
            .map(|(digest, _)| digest)
    }

    /// The digest of `image` if its metadata was fetched already, and whether the registry was
    /// last asked longer than `max_age` ago.
    pub fn known_digest(&self, image: &str, max_age: Duration) -> Option<(String, bool)> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(image)
            .map(|fetched| {
                (
                    fetched.metadata.digest.clone(),
                    fetched.at.elapsed() >= max_age,
                )
            })
    }

    /// Marks `image` as being checked again; false when a check already runs.
    pub fn begin_recheck(&self, image: &str) -> bool {
        self.rechecking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(image.to_owned())
    }

    /// Asks the registry again which manifest `image`'s tag names (one HEAD request, which
    /// registries do not count as a pull); when it moved, fetches the new metadata. Ends the
    /// check [`Registry::begin_recheck`] began.
    pub async fn recheck(
        &self,
        image: &str,
        docker_config: Option<&DockerConfig>,
    ) -> Result<(), String> {
        let outcome = self.compare(image, docker_config).await;
        self.rechecking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(image);
        outcome
    }

    async fn compare(
        &self,
        image: &str,
        docker_config: Option<&DockerConfig>,
    ) -> Result<(), String> {
        let (client, reference, auth) =
            self.client_and_auth(image, "an image reference", docker_config)?;
        let listed = client
            .oci()
            .fetch_manifest_digest(&reference, &auth)
            .await
            .map_err(|e| format!("unable to check the digest of {image}: {}", with_causes(&e)))?;
        {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(fetched) = cache.get_mut(image)
                && fetched.listed == listed
            {
                fetched.at = Instant::now();
                return Ok(());
            }
        }
        let before = self.cached_digest(image);
        let metadata = self.fetch(image, docker_config).await?;
        tracing::info!(image, before = ?before, now = %metadata.digest, "the image's tag moved to another digest");
        Ok(())
    }

    /// The client, the parsed reference and the credentials to ask about `image`, which is
    /// `what` (an image reference, an image repository) in the error when it does not parse.
    fn client_and_auth(
        &self,
        image: &str,
        what: &str,
        docker_config: Option<&DockerConfig>,
    ) -> Result<(Arc<RegistryClient>, Reference, RegistryAuth), String> {
        let reference: Reference = image
            .parse()
            .map_err(|e| format!("{image:?} is not {what}: {e}"))?;
        let auth = docker_config.map_or(RegistryAuth::Anonymous, |config| {
            auth_for(config, reference.resolve_registry())
        });
        let client = self.client_for(docker_config.map_or(&[][..], |config| &config.content))?;
        Ok((client, reference, auth))
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
            return Ok(cached.metadata.clone());
        }
        self.fetch(image, docker_config).await
    }

    /// Fetches the metadata of `image` from the registry and caches it, for a tag also under
    /// the tag pinned to the digest found, which the pods started for it run.
    async fn fetch(
        &self,
        image: &str,
        docker_config: Option<&DockerConfig>,
    ) -> Result<Metadata, String> {
        let (client, reference, auth) =
            self.client_and_auth(image, "an image reference", docker_config)?;
        let ImageConfig {
            digest,
            listed,
            config,
        } = client
            .image_config(
                &reference,
                &auth,
                oci_client::client::linux_amd64_resolver,
                MAX_IMAGE_METADATA_BYTES,
            )
            .await
            .map_err(|e| {
                format!(
                    "unable to get the entrypoint for {image}: {}",
                    with_causes(&e)
                )
            })?;
        let config: serde_json::Value = serde_json::from_slice(&config)
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
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let at = Instant::now();
        if digest_of(image).is_none() {
            cache.insert(
                pinned(image, &metadata.digest),
                Fetched {
                    metadata: metadata.clone(),
                    listed: metadata.digest.clone(),
                    at,
                },
            );
        }
        cache.insert(
            image.to_owned(),
            Fetched {
                metadata: metadata.clone(),
                listed,
                at,
            },
        );
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
    fn pinning_keeps_the_tag_and_nodes_pull_by_digest_alone() {
        let digest = "sha256:0123abcd";
        for (image, pinned_image, pulled) in [
            (
                "localhost:5000/krm/fn:v1",
                "localhost:5000/krm/fn:v1@sha256:0123abcd",
                "localhost:5000/krm/fn@sha256:0123abcd",
            ),
            (
                "localhost:5000/krm/fn",
                "localhost:5000/krm/fn@sha256:0123abcd",
                "localhost:5000/krm/fn@sha256:0123abcd",
            ),
            (
                "example.com/fn:v2@sha256:ffff",
                "example.com/fn:v2@sha256:0123abcd",
                "example.com/fn@sha256:0123abcd",
            ),
        ] {
            let pinned_image = pinned_image.to_owned();
            assert_eq!(pinned(image, digest), pinned_image);
            assert_eq!(digest_of(&pinned_image), Some(digest));
            assert_eq!(by_digest(&pinned_image), pulled);
        }
        assert_eq!(
            unpinned("localhost:5000/krm/fn:v1@sha256:0123abcd"),
            "localhost:5000/krm/fn:v1"
        );
        // Asked for by digest alone: that is the image's name.
        assert_eq!(
            unpinned("localhost:5000/krm/fn@sha256:0123abcd"),
            "localhost:5000/krm/fn@sha256:0123abcd"
        );
        assert_eq!(
            unpinned("localhost:5000/krm/fn:v1"),
            "localhost:5000/krm/fn:v1"
        );
        assert_eq!(
            by_digest("localhost:5000/krm/fn:v1"),
            "localhost:5000/krm/fn:v1"
        );
        assert_eq!(digest_of("localhost:5000/krm/fn:v1"), None);
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
