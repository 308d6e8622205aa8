//! The registry requests the policy makes: a tag's digest, and the signature manifest and blob
//! beside an image, with the docker config file's credentials for the registry (anonymous
//! without), within the bounds below; each caller bounds the time.

use futures_util::StreamExt;
use krm_runner_function_config::docker_config::DockerConfig;
use krm_runner_function_config::registry_answer::{
    MANIFEST_MEDIA_TYPES, RegistryClient, is_missing,
};
use krm_runner_proto::serving::with_causes;
use oci_client::Reference;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;

/// Most bytes of one signature payload read: cosign's is a few hundred.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Most bytes of one signature manifest read: a few hundred per signature it lists.
const MAX_MANIFEST_BYTES: usize = 256 * 1024;

pub struct Registry {
    client: RegistryClient,
    auth: Option<DockerConfig>,
}

/// Why an image manifest could not be had: it is not there, it is an image index (a manifest
/// list), or the registry failed.
pub enum ManifestError {
    Missing,
    Index,
    Failed(String),
}

impl Registry {
    pub fn new(
        plain_http: &[String],
        extra_ca: Option<&[u8]>,
        auth: Option<DockerConfig>,
    ) -> Result<Self, String> {
        let mut config = ClientConfig {
            protocol: if plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(plain_http.to_vec())
            },
            ..ClientConfig::default()
        };
        if let Some(data) = extra_ca {
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data: data.to_vec(),
            });
        }
        // The one TLS crypto provider of the process, as for the cluster client; a second
        // install is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // `Client::new` would fall back to a default client, dropping `plain_http` and the CA.
        let client = RegistryClient::new(config)
            .map_err(|error| format!("cannot make a registry client: {}", with_causes(&error)))?;
        Ok(Self { client, auth })
    }

    /// The credentials for `reference`'s registry: the blob requests that follow a manifest's
    /// reuse what the client stored for it.
    fn auth(&self, reference: &Reference) -> RegistryAuth {
        self.auth
            .as_ref()
            .and_then(|config| config.credentials_for(reference.resolve_registry()))
            .map_or(RegistryAuth::Anonymous, |(user, password)| {
                RegistryAuth::Basic(user.to_owned(), password.to_owned())
            })
    }

    /// The manifest digest `image` (`registry/repository:tag`) names now.
    pub async fn digest(&self, image: &str) -> Result<String, String> {
        let reference = parse(image)?;
        self.client
            .oci()
            .fetch_manifest_digest(&reference, &self.auth(&reference))
            .await
            .map_err(|error| format!("the digest of {image}: {}", with_causes(&error)))
    }

    /// The image manifest at `image`.
    pub async fn manifest(&self, image: &str) -> Result<OciImageManifest, ManifestError> {
        let reference = parse(image).map_err(ManifestError::Failed)?;
        // Any manifest, not only an image's: an index is told apart, never followed.
        let body = self
            .client
            .manifest(
                &reference,
                &self.auth(&reference),
                MANIFEST_MEDIA_TYPES,
                MAX_MANIFEST_BYTES,
            )
            .await;
        let body = match body {
            Ok(body) => body,
            Err(error) if error.registry().is_some_and(is_missing) => {
                return Err(ManifestError::Missing);
            }
            Err(error) => {
                return Err(ManifestError::Failed(format!(
                    "the manifest {image}: {}",
                    with_causes(&error)
                )));
            }
        };
        match serde_json::from_slice(&body) {
            Ok(OciManifest::Image(manifest)) => Ok(manifest),
            Ok(OciManifest::ImageIndex(_)) => Err(ManifestError::Index),
            Err(error) => Err(ManifestError::Failed(format!(
                "the manifest {image} does not read as one: {error}"
            ))),
        }
    }

    /// The blob `layer` of `image`'s repository, refused past [`MAX_PAYLOAD_BYTES`]; the
    /// client checks it against the layer's digest.
    pub async fn payload(&self, image: &str, layer: &OciDescriptor) -> Result<Vec<u8>, String> {
        if usize::try_from(layer.size).map_or(true, |size| size > MAX_PAYLOAD_BYTES) {
            return Err(format!(
                "its payload is {} bytes, over {MAX_PAYLOAD_BYTES}",
                layer.size
            ));
        }
        let reference = parse(image)?;
        let mut stream = self
            .client
            .oci()
            .pull_blob_stream(&reference, layer)
            .await
            .map_err(|error| format!("the payload {}: {}", layer.digest, with_causes(&error)))?;
        let mut payload = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| {
                format!("the payload {}: {}", layer.digest, with_causes(&error))
            })?;
            if payload.len() + chunk.len() > MAX_PAYLOAD_BYTES {
                return Err(format!("its payload is over {MAX_PAYLOAD_BYTES} bytes"));
            }
            payload.extend_from_slice(&chunk);
        }
        Ok(payload)
    }
}

fn parse(image: &str) -> Result<Reference, String> {
    image
        .parse()
        .map_err(|error| format!("{image:?} is not an image reference: {error}"))
}
