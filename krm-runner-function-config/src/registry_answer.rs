//! Registry answers read alike by every registry client of the runner and its plugins (the
//! trust policy's, the wasm evaluator's).

use oci_client::errors::{OciDistributionError, OciErrorCode};

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
