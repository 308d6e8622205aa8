//! Modules pulled from a registry as OCI artifacts, for the images under a configured prefix.
//!
//! Two layouts are accepted:
//! - kpt's (`kpt alpha wasm push`): a Docker manifest list whose entry for the platform
//!   `wasm` names a Docker image manifest with one gzipped tar layer holding the module file;
//! - a plain artifact (`oras push ... fn.wasm:application/wasm`): an image manifest (OCI or
//!   Docker) with one layer of media type `application/wasm`, the module itself.
//!
//! A tag is resolved to its manifest digest before anything is pulled, and the module is
//! pulled by that digest, so a call runs exactly what its digest names. Tag lists and tags'
//! digests are kept for `refresh_seconds`; a repository's tags are listed only for a call
//! carrying a tag constraint. Credentials come from the docker config file the pod evaluator
//! reads, read at every pull; plain HTTP only for the prefixes configured so.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use krm_plugin_api::{ErrorKind, EvalError, Resolution, quoted};
use krm_runner_function_config::docker_config::{DockerConfig, DockerConfigError};
use krm_runner_function_config::registry_answer::{
    BoundedReadError, RegistryClient, TagListError, is_missing, list_all_tags,
};
use krm_runner_function_config::version::{Constraint, InvalidConstraint, sorted_versions};
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::config::Pulls;

/// The layer media type of a module stored as itself.
pub(crate) const WASM_LAYER: &str = "application/wasm";
/// The layer media types of a module in a tar file (kpt's layout), gzipped or not.
const TAR_LAYERS: &[&str] = &[
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar",
];
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The platform architecture kpt pushes modules under (with `os: js`); any `os` is taken.
const WASM_ARCHITECTURE: &str = "wasm";
/// Most bytes of one manifest read: a module's has one layer and is well under this.
const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// Most pages of a tag list read (of [`TAGS_PAGE_SIZE`] each).
const MAX_TAG_PAGES: usize = 100;
const TAGS_PAGE_SIZE: usize = 1000;

/// Why a module could not be had from its registry; each names the image.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PullError {
    /// The registry could not be asked, refused (network, login, a missing manifest) or
    /// answered past a bound.
    #[error("{what} of {image}")]
    Registry {
        what: &'static str,
        image: String,
        #[source]
        source: BoundedReadError,
    },
    /// The docker config file of `auth_file` cannot be used now.
    #[error("the registry credentials (auth_file)")]
    Credentials(#[source] DockerConfigError),
    #[error("{image} is not an image reference")]
    Reference {
        image: String,
        #[source]
        source: oci_client::ParseError,
    },
    /// The artifact is not laid out as a module: another media type, no wasm platform.
    #[error(
        "{image} is not a WebAssembly module artifact: {reason} (expected kpt's wasm image, or \
         an image manifest with one {WASM_LAYER} layer)"
    )]
    NotAModule { image: String, reason: String },
    #[error("{image}: {what} is {size} bytes, over the limit of {limit} bytes (max_module_mib)")]
    TooLarge {
        image: String,
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// A blob could not be read whole, or its tar holds no module file.
    #[error("{image}: cannot read its module layer")]
    Layer {
        image: String,
        #[source]
        source: std::io::Error,
    },
    /// The call's tag constraint does not parse.
    #[error(transparent)]
    Constraint(#[from] InvalidConstraint),
    #[error("{repository} has more than {} tags; refusing to read them all", MAX_TAG_PAGES * TAGS_PAGE_SIZE)]
    TooManyTags { repository: String },
    #[error("no version of {repository:?} satisfies tag constraint {tag:?}: the registry has [{}]", listed.join(", "))]
    NoVersion {
        repository: String,
        tag: String,
        listed: Vec<String>,
    },
}

impl PullError {
    /// The call's error: the message with its causes, of the kind the caller can act on.
    pub(crate) fn to_eval_error(&self) -> EvalError {
        let kind = match self {
            // The image is not there: the caller named it wrong.
            PullError::Registry { source, .. } => match source {
                BoundedReadError::Registry(error) if is_missing(error) => ErrorKind::InvalidInput,
                BoundedReadError::Registry(_) => ErrorKind::Unavailable,
                BoundedReadError::TooLarge { .. } => ErrorKind::ResourceExhausted,
                BoundedReadError::DigestMismatch { .. } => ErrorKind::Failed,
            },
            PullError::Credentials(_) | PullError::Layer { .. } => ErrorKind::Failed,
            PullError::Reference { .. }
            | PullError::NotAModule { .. }
            | PullError::Constraint(_) => ErrorKind::InvalidInput,
            PullError::TooLarge { .. } | PullError::TooManyTags { .. } => {
                ErrorKind::ResourceExhausted
            }
            PullError::NoVersion { .. } => ErrorKind::NotFound,
        };
        let mut message = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            message.push_str(": ");
            message.push_str(&error.to_string());
            cause = error.source();
        }
        EvalError::new(kind, message)
    }
}

/// The registry side of an instance: its prefixes, client and what it remembers.
pub(crate) struct Registries {
    settings: Pulls,
    client: RegistryClient,
    /// Tag lists by repository, with when they were listed.
    tags: Mutex<HashMap<String, ListedTags>>,
    /// Manifest digests by tagged image, with when they were resolved.
    digests: Mutex<HashMap<String, (Instant, String)>>,
}

/// A repository's tags, and when the registry listed them.
type ListedTags = (Instant, Arc<[String]>);

/// An image pinned to a digest: what a call runs.
#[derive(Debug, Clone)]
pub(crate) struct Pinned {
    /// `registry/repository@sha256:...`: the key of its compiled module.
    pub reference: String,
    /// The tag constraint's choice, when the call carried one.
    pub resolution: Option<Resolution>,
}

impl Registries {
    pub(crate) fn new(settings: Pulls) -> Result<Self, String> {
        let config = ClientConfig {
            protocol: if settings.plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(settings.plain_http.clone())
            },
            ..ClientConfig::default()
        };
        // The one TLS crypto provider of this library's rustls; a second install is refused
        // harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // `Client::new` would fall back to a default client, dropping `plain_http`.
        let client = RegistryClient::new(config)
            .map_err(|error| format!("cannot make a registry client: {error}"))?;
        Ok(Self {
            settings,
            client,
            tags: Mutex::default(),
            digests: Mutex::default(),
        })
    }

    /// Whether `image` is under one of the configured prefixes.
    pub(crate) fn serves(&self, image: &str) -> bool {
        self.settings
            .prefixes
            .iter()
            .any(|prefix| image.starts_with(prefix.as_str()))
    }

    /// The bound on a pull of a call without a deadline.
    pub(crate) fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    fn auth(&self, reference: &Reference) -> Result<RegistryAuth, PullError> {
        let Some(file) = &self.settings.auth_file else {
            return Ok(RegistryAuth::Anonymous);
        };
        let config = DockerConfig::read(file).map_err(PullError::Credentials)?;
        Ok(config
            .credentials_for(reference.resolve_registry())
            .map_or(RegistryAuth::Anonymous, |(user, password)| {
                RegistryAuth::Basic(user.to_owned(), password.to_owned())
            }))
    }

    /// `image` pinned to its manifest digest: a digest it carries, else its tag's (the highest
    /// version satisfying `constraint` when there is one, `image` then being untagged).
    pub(crate) async fn pin(
        &self,
        image: &str,
        constraint: Option<&str>,
    ) -> Result<Pinned, PullError> {
        let reference = parse(image)?;
        let repository = format!("{}/{}", reference.registry(), reference.repository());
        if let Some(tag) = constraint {
            let resolution = self.resolve(image, tag).await?;
            return Ok(Pinned {
                reference: format!(
                    "{repository}@{}",
                    resolution.digest.as_deref().unwrap_or_default()
                ),
                resolution: Some(resolution),
            });
        }
        let digest = match reference.digest() {
            Some(digest) => digest.to_owned(),
            None => self.digest(image, &reference).await?,
        };
        Ok(Pinned {
            reference: format!("{repository}@{digest}"),
            resolution: None,
        })
    }

    /// The digest the tag of `image` was resolved to within `refresh_seconds`, if it was: the
    /// module a call of `image` runs now.
    pub(crate) fn fresh_digest(&self, image: &str) -> Option<String> {
        self.digests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(image)
            .filter(|(at, _)| at.elapsed() < self.settings.refresh)
            .map(|(_, digest)| digest.clone())
    }

    /// For the untagged `image`, the tag of the highest version satisfying `tag` among the
    /// registry's, with its digest.
    pub(crate) async fn resolve(&self, image: &str, tag: &str) -> Result<Resolution, PullError> {
        let constraint = Constraint::parse(tag)?;
        let tags = self.tags(image).await?;
        let candidates: Vec<String> = sorted_versions(tags.iter().map(String::as_str))
            .into_iter()
            .map(str::to_owned)
            .collect();
        let Some(chosen) = constraint.best(tags.iter().map(String::as_str)) else {
            return Err(PullError::NoVersion {
                repository: image.to_owned(),
                tag: tag.to_owned(),
                listed: candidates,
            });
        };
        let tagged = format!("{image}:{chosen}");
        let digest = self.digest(&tagged, &parse(&tagged)?).await?;
        Ok(Resolution {
            image: tagged,
            tag: chosen.to_owned(),
            digest: Some(digest),
            candidates,
        })
    }

    /// The tags of `repository`, listed again once older than `refresh_seconds`.
    async fn tags(&self, repository: &str) -> Result<Arc<[String]>, PullError> {
        if let Some((at, tags)) = self
            .tags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(repository)
            && at.elapsed() < self.settings.refresh
        {
            return Ok(tags.clone());
        }
        let reference = parse(repository)?;
        let auth = self.auth(&reference)?;
        let tags: Arc<[String]> = list_all_tags(
            &self.client,
            &reference,
            &auth,
            TAGS_PAGE_SIZE,
            MAX_TAG_PAGES,
        )
        .await
        .map_err(|error| match error {
            TagListError::Read(source) => PullError::Registry {
                what: "cannot list the tags",
                image: repository.to_owned(),
                source,
            },
            TagListError::TooMany { .. } => PullError::TooManyTags {
                repository: repository.to_owned(),
            },
        })?
        .into();
        self.tags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(repository.to_owned(), (Instant::now(), tags.clone()));
        Ok(tags)
    }

    /// The manifest digest the tag of `image` names, asked again once older than
    /// `refresh_seconds`.
    async fn digest(&self, image: &str, reference: &Reference) -> Result<String, PullError> {
        if let Some((at, digest)) = self
            .digests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(image)
            && at.elapsed() < self.settings.refresh
        {
            return Ok(digest.clone());
        }
        let digest = self
            .client
            .oci()
            .fetch_manifest_digest(reference, &self.auth(reference)?)
            .await
            .map_err(|source| PullError::Registry {
                what: "cannot resolve the digest",
                image: image.to_owned(),
                source: source.into(),
            })?;
        self.digests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(image.to_owned(), (Instant::now(), digest.clone()));
        Ok(digest)
    }

    /// The module `pinned` (`repository@digest`) holds, at most `limit` bytes.
    pub(crate) async fn pull(&self, pinned: &str, limit: u64) -> Result<Vec<u8>, PullError> {
        let reference = parse(pinned)?;
        let auth = self.auth(&reference)?;
        let mut manifest = self.manifest(pinned, &reference, &auth).await?;
        if matches!(manifest.media_type(), DOCKER_LIST | OCI_INDEX) {
            let entry = manifest
                .manifests
                .iter()
                .find(|entry| {
                    entry
                        .platform
                        .as_ref()
                        .is_some_and(|platform| platform.architecture == WASM_ARCHITECTURE)
                })
                .ok_or_else(|| PullError::NotAModule {
                    image: pinned.to_owned(),
                    reason: "its manifest list has no manifest for the platform `wasm`".to_owned(),
                })?;
            let platform = parse(&format!(
                "{}/{}@{}",
                reference.registry(),
                reference.repository(),
                entry.digest
            ))?;
            manifest = self.manifest(pinned, &platform, &auth).await?;
            if matches!(manifest.media_type(), DOCKER_LIST | OCI_INDEX) {
                return Err(PullError::NotAModule {
                    image: pinned.to_owned(),
                    reason: "its wasm platform names another manifest list".to_owned(),
                });
            }
        }
        let [layer] = manifest.layers.as_slice() else {
            return Err(PullError::NotAModule {
                image: pinned.to_owned(),
                reason: format!("its manifest has {} layers, not one", manifest.layers.len()),
            });
        };
        let media_type = layer.media_type.as_str();
        if media_type != WASM_LAYER && !TAR_LAYERS.contains(&media_type) {
            return Err(PullError::NotAModule {
                image: pinned.to_owned(),
                reason: format!("its layer is of media type {}", quoted(media_type)),
            });
        }
        let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if size > limit {
            return Err(PullError::TooLarge {
                image: pinned.to_owned(),
                what: "its layer",
                size,
                limit,
            });
        }
        let blob = self.blob(pinned, &reference, layer, limit).await?;
        if media_type == WASM_LAYER {
            return Ok(blob);
        }
        let gzipped = media_type.ends_with("gzip");
        module_from_tar(&blob, gzipped, limit).map_err(|error| match error {
            TarError::TooLarge(size) => PullError::TooLarge {
                image: pinned.to_owned(),
                what: "its module file",
                size,
                limit,
            },
            TarError::Read(source) => PullError::Layer {
                image: pinned.to_owned(),
                source,
            },
        })
    }

    async fn manifest(
        &self,
        image: &str,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Manifest, PullError> {
        let bytes = self
            .client
            .manifest(
                reference,
                auth,
                &[DOCKER_LIST, OCI_INDEX, DOCKER_MANIFEST, OCI_MANIFEST],
                MAX_MANIFEST_BYTES,
            )
            .await
            .map_err(|source| PullError::Registry {
                what: "cannot pull the manifest",
                image: image.to_owned(),
                source,
            })?;
        serde_json::from_slice(&bytes).map_err(|error| PullError::NotAModule {
            image: image.to_owned(),
            reason: format!("its manifest does not read as one: {error}"),
        })
    }

    /// The blob `layer`, refused past `limit` bytes; the client checks it against its digest.
    async fn blob(
        &self,
        image: &str,
        reference: &Reference,
        layer: &Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>, PullError> {
        let descriptor = OciDescriptor {
            media_type: layer.media_type.clone(),
            digest: layer.digest.clone(),
            size: layer.size,
            ..OciDescriptor::default()
        };
        let mut stream = self
            .client
            .oci()
            .pull_blob_stream(reference, &descriptor)
            .await
            .map_err(|source| PullError::Registry {
                what: "cannot pull the module layer",
                image: image.to_owned(),
                source: source.into(),
            })?;
        let mut blob = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|source| PullError::Layer {
                image: image.to_owned(),
                source,
            })?;
            if (blob.len() + chunk.len()) as u64 > limit {
                return Err(PullError::TooLarge {
                    image: image.to_owned(),
                    what: "its layer",
                    size: (blob.len() + chunk.len()) as u64,
                    limit,
                });
            }
            blob.extend_from_slice(&chunk);
        }
        Ok(blob)
    }
}

/// What of a manifest, a Docker or OCI one, a list or an image, a module's pull reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

impl Manifest {
    /// Its media type; an OCI index may leave it out, and is known by its `manifests`.
    fn media_type(&self) -> &str {
        match &self.media_type {
            Some(media_type) => media_type,
            None if !self.manifests.is_empty() => OCI_INDEX,
            None => OCI_MANIFEST,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
}

enum TarError {
    TooLarge(u64),
    Read(std::io::Error),
}

/// The one regular file of the tar `blob` (gzipped or not), as kpt packs a module; directories
/// are passed over, and anything else (a link, a second file) is refused.
fn module_from_tar(blob: &[u8], gzipped: bool, limit: u64) -> Result<Vec<u8>, TarError> {
    let reader: Box<dyn Read + '_> = if gzipped {
        Box::new(flate2::read::GzDecoder::new(blob))
    } else {
        Box::new(blob)
    };
    let mut archive = tar::Archive::new(reader);
    let mut module = None;
    for entry in archive.entries().map_err(TarError::Read)? {
        let entry = entry.map_err(TarError::Read)?;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() || module.is_some() {
            return Err(TarError::Read(std::io::Error::other(
                "the tar holds more than one regular file, or a link",
            )));
        }
        let size = entry.size();
        if size > limit {
            return Err(TarError::TooLarge(size));
        }
        let mut bytes = Vec::new();
        entry
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(TarError::Read)?;
        if bytes.len() as u64 > limit {
            return Err(TarError::TooLarge(bytes.len() as u64));
        }
        module = Some(bytes);
    }
    module.ok_or_else(|| TarError::Read(std::io::Error::other("the tar holds no file")))
}

fn parse(image: &str) -> Result<Reference, PullError> {
    image.parse().map_err(|source| PullError::Reference {
        image: quoted(image).to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A gzipped tar of `files` (name, content), and of a directory first, as `tar` packs them.
    fn gzipped_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut folder = tar::Header::new_ustar();
        folder.set_entry_type(tar::EntryType::Directory);
        folder.set_size(0);
        folder.set_mode(0o755);
        folder.set_cksum();
        tar.append_data(&mut folder, "fn/", std::io::empty())
            .unwrap();
        for (name, content) in files {
            let mut header = tar::Header::new_ustar();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, name, *content).unwrap();
        }
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&tar.into_inner().unwrap()).unwrap();
        gzip.finish().unwrap()
    }

    #[test]
    fn the_one_file_of_a_tar_is_the_module() {
        let blob = gzipped_tar(&[("fn/set-namespace.wasm", b"\0asm module")]);
        assert!(matches!(
            module_from_tar(&blob, true, 64),
            Ok(module) if module == b"\0asm module"
        ));
    }

    #[test]
    fn a_tar_of_two_files_none_or_too_large_a_file_is_refused() {
        let two = gzipped_tar(&[("a.wasm", b"a"), ("b.wasm", b"b")]);
        assert!(
            matches!(module_from_tar(&two, true, 64), Err(TarError::Read(error)) if error.to_string().contains("more than one regular file"))
        );
        let none = gzipped_tar(&[]);
        assert!(
            matches!(module_from_tar(&none, true, 64), Err(TarError::Read(error)) if error.to_string().contains("holds no file"))
        );
        let large = gzipped_tar(&[("big.wasm", &[0; 65])]);
        assert!(matches!(
            module_from_tar(&large, true, 64),
            Err(TarError::TooLarge(65))
        ));
        assert!(matches!(
            module_from_tar(b"not a tar at all", true, 64),
            Err(TarError::Read(_))
        ));
    }

    #[test]
    fn an_index_without_a_media_type_is_known_by_its_manifests() {
        let index: Manifest = serde_json::from_str(
            r#"{"schemaVersion": 2, "manifests": [{"digest": "sha256:00", "size": 1,
                "platform": {"architecture": "wasm", "os": "wasip1"}}]}"#,
        )
        .unwrap();
        assert_eq!(index.media_type(), OCI_INDEX);
        let image: Manifest = serde_json::from_str(
            r#"{"schemaVersion": 2, "layers": [{"mediaType": "application/wasm",
                "digest": "sha256:00", "size": 1}]}"#,
        )
        .unwrap();
        assert_eq!(image.media_type(), OCI_MANIFEST);
    }
}
