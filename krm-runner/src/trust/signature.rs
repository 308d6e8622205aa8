//! Cosign's signatures, verified offline against the operator's public keys: the manifest
//! tagged `sha256-<hex>.sig` beside the image, each layer a simple-signing payload naming the
//! signed digest, with the base64 signature in an annotation. ECDSA P-256 over SHA-256 (ASN.1
//! DER signatures, cosign's default keys) and Ed25519 (over the payload itself).

use std::path::Path;

use base64::Engine as _;
use ed25519_dalek::pkcs8::DecodePublicKey as _;
use p256::ecdsa::signature::Verifier as _;

use super::registry::{ManifestError, Registry};
use super::{Refusal, is_sha256_digest};

/// The media type of cosign's payload layers.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Most payload layers tried: a signature manifest with more is refused.
const MAX_SIGNATURES: usize = 16;
/// Most bytes of one base64 signature: an ECDSA P-256 DER signature is at most 72 bytes.
const MAX_SIGNATURE_CHARS: usize = 1024;

/// A trusted public key.
pub enum PublicKey {
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// Why a key file is not a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Read(#[from] krm_runner_function_config::config_file::ReadError),
    #[error("{path} is larger than {limit} bytes; a public key is a few hundred")]
    TooLarge { path: String, limit: u64 },
    #[error("{path} is not a PEM public key (ECDSA P-256 or Ed25519, as cosign writes them)")]
    NotAKey { path: String },
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo) file of at most `limit` bytes.
    pub fn read(path: &Path, limit: u64) -> Result<Self, KeyError> {
        let bytes = krm_runner_function_config::config_file::read_bytes(path)?;
        if bytes.len() as u64 > limit {
            return Err(KeyError::TooLarge {
                path: path.display().to_string(),
                limit,
            });
        }
        let not_a_key = || KeyError::NotAKey {
            path: path.display().to_string(),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| not_a_key())?;
        if let Ok(key) = p256::PublicKey::from_public_key_pem(text) {
            return Ok(Self::EcdsaP256(key.into()));
        }
        ed25519_dalek::VerifyingKey::from_public_key_pem(text)
            .map(Self::Ed25519)
            .map_err(|_| not_a_key())
    }

    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        match self {
            Self::EcdsaP256(key) => p256::ecdsa::Signature::from_der(signature)
                .is_ok_and(|signature| key.verify(payload, &signature).is_ok()),
            Self::Ed25519(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| key.verify_strict(payload, &signature).is_ok()),
        }
    }
}

/// Checks that `repository`'s image `digest` is signed by one of `keys`; the name of the key
/// that verified it.
pub async fn verify(
    registry: &Registry,
    repository: &str,
    digest: &str,
    keys: &[(&str, &PublicKey)],
) -> Result<String, Refusal> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let tag = format!("sha256-{hex}.sig");
    let malformed = |problem: String| Refusal::MalformedSignature {
        digest: digest.to_owned(),
        problem,
    };
    let manifest = match registry.manifest(&format!("{repository}:{tag}")).await {
        Ok(manifest) => manifest,
        Err(ManifestError::Missing) => {
            return Err(Refusal::Unsigned {
                digest: digest.to_owned(),
                tag,
            });
        }
        Err(ManifestError::Index) => {
            return Err(malformed(format!(
                "{tag} is an image index (a manifest list), not cosign's signature manifest"
            )));
        }
        Err(ManifestError::Failed(problem)) => return Err(Refusal::Registry(problem)),
    };
    let layers: Vec<_> = manifest
        .layers
        .iter()
        .filter(|layer| layer.media_type == SIMPLE_SIGNING)
        .collect();
    if layers.is_empty() {
        return Err(malformed(format!(
            "{tag} holds no layer of media type {SIMPLE_SIGNING}"
        )));
    }
    if layers.len() > MAX_SIGNATURES {
        return Err(malformed(format!(
            "{tag} holds {} signatures, more than {MAX_SIGNATURES}",
            layers.len()
        )));
    }
    let mut other_digest = None;
    let mut problems = Vec::new();
    for layer in layers {
        let Some(encoded) = layer
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION))
        else {
            problems.push(format!("a layer has no {SIGNATURE_ANNOTATION} annotation"));
            continue;
        };
        if encoded.len() > MAX_SIGNATURE_CHARS {
            problems.push(format!(
                "a signature is {} characters, over {MAX_SIGNATURE_CHARS}",
                encoded.len()
            ));
            continue;
        }
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            problems.push("a signature is not base64".to_owned());
            continue;
        };
        let payload = registry
            .payload(&format!("{repository}:{tag}"), layer)
            .await
            .map_err(malformed)?;
        let Some((name, _)) = keys
            .iter()
            .find(|(_, key)| key.verifies(&payload, &signature))
        else {
            continue;
        };
        match signed_digest(&payload) {
            Ok(signed) if signed == digest => return Ok((*name).to_owned()),
            Ok(signed) => other_digest = Some(signed),
            Err(problem) => problems.push(problem),
        }
    }
    if let Some(signed) = other_digest {
        return Err(Refusal::SignatureOfAnotherDigest {
            signed,
            digest: digest.to_owned(),
        });
    }
    if let Some(problem) = problems.into_iter().next() {
        return Err(malformed(problem));
    }
    Err(Refusal::UnknownKey {
        digest: digest.to_owned(),
        keys: keys
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The digest a simple-signing payload signs: `critical.image.docker-manifest-digest`.
fn signed_digest(payload: &[u8]) -> Result<String, String> {
    let payload: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|error| format!("a signed payload is not JSON: {error}"))?;
    let critical = &payload["critical"];
    if critical["type"] != "cosign container image signature" {
        return Err("a signed payload is not a cosign container image signature".to_owned());
    }
    match critical["image"]["docker-manifest-digest"].as_str() {
        Some(digest) if is_sha256_digest(digest) => Ok(digest.to_owned()),
        Some(other) => Err(format!(
            "a signed payload names {} rather than a digest",
            krm_plugin_api::quoted(other)
        )),
        None => Err("a signed payload names no critical.image.docker-manifest-digest".to_owned()),
    }
}
