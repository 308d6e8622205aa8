//! Registry answers read alike by every registry client of the runner and its plugins (the
//! trust policy's, the pod and wasm evaluators').

use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, ImageIndexEntry,
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::{Digest, Sha256};

/// Whether the registry answered that the image or repository is not there, as opposed to
/// failing: a missing image is the caller's mistake, a failing registry is unavailable.
pub fn is_missing(error: &OciDistributionError) -> bool {
    match error {
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// Why the whole tag list of a repository could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TagListError {
    #[error(transparent)]
    Read(#[from] BoundedReadError),
    /// More pages than allowed: the list is not read to its end.
    #[error("more than {limit} tags")]
    TooMany { limit: usize },
}

/// Most bytes of a tag list page per tag asked for: a tag is at most 128 characters.
const TAG_PAGE_BYTES_PER_TAG: usize = 256;

/// Every tag of `reference`'s repository, sorted and without repeats, read `page_size` at a
/// time for at most `max_pages` pages, each page bounded by the tags it may hold.
pub async fn list_all_tags(
    client: &RegistryClient,
    reference: &Reference,
    auth: &RegistryAuth,
    page_size: usize,
    max_pages: usize,
) -> Result<Vec<String>, TagListError> {
    let page_limit = page_size * TAG_PAGE_BYTES_PER_TAG + 64 * 1024;
    let mut tags: Vec<String> = Vec::new();
    for _ in 0..max_pages {
        let page = client
            .tags_page(
                reference,
                auth,
                page_size,
                tags.last().map(String::as_str),
                page_limit,
            )
            .await?;
        let last = tags.last().cloned();
        let full = page.len() >= page_size;
        tags.extend(page);
        // A registry that ignores `last` would repeat its first page forever.
        if !full || tags.last() == last.as_ref() {
            tags.sort();
            tags.dedup();
            return Ok(tags);
        }
    }
    Err(TagListError::TooMany {
        limit: max_pages * page_size,
    })
}

/// A registry client whose manifest and tag-list reads stop at a bound.
///
/// oci-client reads a manifest's or a tag list's whole body before it returns
/// (oras-project/rust-oci-client#206), so a registry answering without end would fill the
/// runner's memory. Those two reads go through an HTTP client of the same settings that stops
/// at the limit, authenticated by oci-client; blobs (streamed) and digests (headers only) go
/// through oci-client itself, [`RegistryClient::oci`].
pub struct RegistryClient {
    oci: Client,
    http: reqwest::Client,
    protocol: ClientProtocol,
}

/// Why a bounded read has no answer.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    /// The registry could not be asked, refused or answered with an error.
    #[error(transparent)]
    Registry(#[from] OciDistributionError),
    #[error("{what} is over {limit} bytes")]
    TooLarge { what: &'static str, limit: usize },
    /// A manifest asked for by digest is other bytes than that digest names.
    #[error("the manifest read for {expected} has the digest {actual}")]
    DigestMismatch { expected: String, actual: String },
}

impl BoundedReadError {
    /// The registry's own error, when it answered with one.
    pub fn registry(&self) -> Option<&OciDistributionError> {
        match self {
            Self::Registry(error) => Some(error),
            _ => None,
        }
    }
}

impl RegistryClient {
    /// A client of `config`'s protocol, certificates and timeouts.
    pub fn new(config: ClientConfig) -> Result<Self, OciDistributionError> {
        let mut http = reqwest::Client::builder()
            .user_agent(config.user_agent)
            .tls_certs_merge(
                config
                    .extra_root_certificates
                    .iter()
                    .map(reqwest::Certificate::try_from)
                    .collect::<Result<Vec<_>, _>>()?,
            );
        if let Some(timeout) = config.read_timeout {
            http = http.read_timeout(timeout);
        }
        if let Some(timeout) = config.connect_timeout {
            http = http.connect_timeout(timeout);
        }
        let protocol = config.protocol.clone();
        Ok(Self {
            http: http.build()?,
            oci: Client::try_from(config)?,
            protocol,
        })
    }

    /// The oci-client for the reads it bounds itself.
    pub fn oci(&self) -> &Client {
        &self.oci
    }

    /// The manifest `reference` names, of one of the `accepted` media types, refused past
    /// `limit` bytes, and checked against the digest `reference` carries, if any.
    pub async fn manifest(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        accepted: &[&str],
        limit: usize,
    ) -> Result<Vec<u8>, BoundedReadError> {
        let target = reference.digest().or(reference.tag()).unwrap_or("latest");
        let path = format!("manifests/{target}");
        let body = self
            .get(reference, auth, &path, &[], accepted, "the manifest", limit)
            .await?;
        if let Some(expected) = reference.digest() {
            let actual = sha256_digest(&body);
            if actual != expected {
                return Err(BoundedReadError::DigestMismatch {
                    expected: expected.to_owned(),
                    actual,
                });
            }
        }
        Ok(body)
    }

    /// The image manifest `reference` names (an index followed to the entry `platform`
    /// picks) with its digest, and its config blob; each read no further than `limit` bytes.
    pub async fn image_config(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        platform: fn(&[ImageIndexEntry]) -> Option<String>,
        limit: usize,
    ) -> Result<ImageConfig, BoundedReadError> {
        let mut reference = reference.clone();
        let mut followed = false;
        let mut listed = None;
        loop {
            let body = self
                .manifest(&reference, auth, MANIFEST_MEDIA_TYPES, limit)
                .await?;
            let listed = listed.get_or_insert_with(|| sha256_digest(&body)).clone();
            let manifest: OciManifest =
                serde_json::from_slice(&body).map_err(OciDistributionError::from)?;
            let image = match manifest {
                OciManifest::Image(image) => image,
                OciManifest::ImageIndex(index) if !followed => {
                    let digest = platform(&index.manifests).ok_or_else(|| {
                        OciDistributionError::GenericError(Some(format!(
                            "{reference} has no manifest for this platform"
                        )))
                    })?;
                    reference = reference.clone_with_digest(digest);
                    followed = true;
                    continue;
                }
                OciManifest::ImageIndex(_) => {
                    return Err(OciDistributionError::GenericError(Some(format!(
                        "{reference}: an index's entry names another index"
                    )))
                    .into());
                }
            };
            if usize::try_from(image.config.size).map_or(true, |size| size > limit) {
                return Err(BoundedReadError::TooLarge {
                    what: "the image config",
                    limit,
                });
            }
            let mut stream = self.oci.pull_blob_stream(&reference, &image.config).await?;
            let mut config = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(OciDistributionError::from)?;
                if config.len() + chunk.len() > limit {
                    return Err(BoundedReadError::TooLarge {
                        what: "the image config",
                        limit,
                    });
                }
                config.extend_from_slice(&chunk);
            }
            return Ok(ImageConfig {
                digest: sha256_digest(&body),
                listed,
                config,
            });
        }
    }

    /// One page of the tags of `reference`'s repository: at most `n`, after `last`, the
    /// answer refused past `limit` bytes.
    pub async fn tags_page(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        n: usize,
        last: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, BoundedReadError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let n = n.to_string();
        let mut query = vec![("n", n.as_str())];
        query.extend(last.map(|last| ("last", last)));
        let body = self
            .get(
                reference,
                auth,
                "tags/list",
                &query,
                &[],
                "the tag list",
                limit,
            )
            .await?;
        let page: Page = serde_json::from_slice(&body).map_err(OciDistributionError::from)?;
        Ok(page.tags.unwrap_or_default())
    }

    /// The body of `GET /v2/<repository>/<path>`, authenticated as oci-client would, read no
    /// further than `limit` bytes.
    #[allow(clippy::too_many_arguments)]
    async fn get(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        path: &str,
        query: &[(&str, &str)],
        accepted: &[&str],
        what: &'static str,
        limit: usize,
    ) -> Result<Vec<u8>, BoundedReadError> {
        let registry = reference.resolve_registry();
        let scheme = match &self.protocol {
            ClientProtocol::Http => "http",
            ClientProtocol::HttpsExcept(plain) if plain.iter().any(|r| r == registry) => "http",
            _ => "https",
        };
        let url = format!("{scheme}://{registry}/v2/{}/{path}", reference.repository());
        let mut request = self.http.get(&url).query(query);
        if !accepted.is_empty() {
            request = request.header(reqwest::header::ACCEPT, accepted.join(", "));
        }
        // The token oci-client negotiated (and keeps), or the basic credentials it would send.
        let token = self
            .oci
            .auth(reference, auth, RegistryOperation::Pull)
            .await?;
        request = match (token, auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let mut response = request.send().await.map_err(OciDistributionError::from)?;
        let status = response.status();
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(BoundedReadError::TooLarge { what, limit });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(OciDistributionError::from)? {
            if body.len() + chunk.len() > limit {
                return Err(BoundedReadError::TooLarge { what, limit });
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(body);
        }
        Err(BoundedReadError::Registry(
            match serde_json::from_slice(&body) {
                _ if status == reqwest::StatusCode::UNAUTHORIZED => {
                    OciDistributionError::UnauthorizedError { url }
                }
                Ok(envelope) if status.is_client_error() => {
                    OciDistributionError::RegistryError { envelope, url }
                }
                _ => OciDistributionError::ServerError {
                    code: status.as_u16(),
                    url,
                    message: String::from_utf8_lossy(&body).into_owned(),
                },
            },
        ))
    }
}

/// An image's manifest digest and config blob (its JSON).
pub struct ImageConfig {
    /// The digest of the image manifest (the platform's, when an index was followed).
    pub digest: String,
    /// The digest of the manifest the reference names (the index's, when it is one), which a
    /// `HEAD` request answers.
    pub listed: String,
    pub config: Vec<u8>,
}

/// The media types of the image manifests and indexes, OCI's and Docker's.
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// `sha256:<hex>` of `bytes`, as registries name content.
fn sha256_digest(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}
