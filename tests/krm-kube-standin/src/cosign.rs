//! Cosign's key-based signatures, made without cosign: the key types it generates (ECDSA
//! P-256, its default, and Ed25519), the simple-signing payload it signs, and the signature
//! manifest it pushes beside the image (tagged `sha256-<hex>.sig`, one layer per signature, the
//! base64 signature in the layer's `dev.cosignproject.cosign/signature` annotation). For the
//! trust policy's tests and benchmark.

use anyhow::Result;
use base64::Engine as _;
use p256::pkcs8::{EncodePublicKey as _, LineEnding};

use crate::registry::{Layer, LocalRegistry};

/// The media type of cosign's payload layers.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding a signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// A signing key of one of cosign's kinds, made from a seed so that tests are repeatable.
pub enum Key {
    P256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

impl Key {
    /// An ECDSA P-256 key (`cosign generate-key-pair`'s kind).
    pub fn p256(seed: u8) -> Self {
        Key::P256(
            p256::ecdsa::SigningKey::from_bytes(&[seed; 32].into())
                .expect("a non-zero scalar below the order is a key"),
        )
    }

    pub fn ed25519(seed: u8) -> Self {
        Key::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]))
    }

    /// The public key as `cosign generate-key-pair` writes `cosign.pub` (SPKI PEM).
    pub fn public_pem(&self) -> String {
        match self {
            Key::P256(key) => key.verifying_key().to_public_key_pem(LineEnding::LF),
            Key::Ed25519(key) => key.verifying_key().to_public_key_pem(LineEnding::LF),
        }
        .expect("a public key encodes as PEM")
    }

    /// The signature as cosign makes it: ASN.1 DER ECDSA over SHA-256, or Ed25519 over the
    /// payload.
    pub fn sign(&self, payload: &[u8]) -> Vec<u8> {
        use ed25519_dalek::Signer as _;
        match self {
            Key::P256(key) => {
                let signature: p256::ecdsa::Signature =
                    p256::ecdsa::signature::Signer::sign(key, payload);
                signature.to_der().as_bytes().to_vec()
            }
            Key::Ed25519(key) => key.sign(payload).to_bytes().to_vec(),
        }
    }
}

/// What cosign signs for `registry`'s image `repository@digest`.
pub fn payload(registry: &LocalRegistry, repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": format!("{}/{repository}", registry.host)},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .expect("JSON values serialize")
}

/// The tag cosign files the signature of `digest` under.
pub fn signature_tag(digest: &str) -> String {
    format!("sha256-{}.sig", digest.trim_start_matches("sha256:"))
}

/// Signs `payload` with `key` and pushes it as the signature of `repository`'s `digest`.
pub fn push_signature(
    registry: &LocalRegistry,
    repository: &str,
    digest: &str,
    payload: &[u8],
    key: &Key,
) -> Result<()> {
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(payload));
    registry.push_manifest(
        repository,
        &signature_tag(digest),
        &[Layer {
            media_type: SIMPLE_SIGNING,
            bytes: payload,
            annotations: serde_json::json!({ SIGNATURE_ANNOTATION: signature }),
        }],
    )?;
    Ok(())
}

/// Signs `repository`'s image `digest` with `key`, as `cosign sign --key` does.
pub fn sign(registry: &LocalRegistry, repository: &str, digest: &str, key: &Key) -> Result<()> {
    push_signature(
        registry,
        repository,
        digest,
        &payload(registry, repository, digest),
        key,
    )
}
