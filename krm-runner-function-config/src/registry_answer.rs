//! Registry answers read alike by every registry client of the runner and its plugins (the
//! trust policy's, the pod and wasm evaluators').

use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

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
    Registry(#[from] OciDistributionError),
    /// More pages than allowed: the list is not read to its end.
    #[error("more than {limit} tags")]
    TooMany { limit: usize },
}

/// Every tag of `reference`'s repository, sorted and without repeats, read `page_size` at a
/// time for at most `max_pages` pages.
pub async fn list_all_tags(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
    page_size: usize,
    max_pages: usize,
) -> Result<Vec<String>, TagListError> {
    let mut tags: Vec<String> = Vec::new();
    for _ in 0..max_pages {
        let page = client
            .list_tags(
                reference,
                auth,
                Some(page_size),
                tags.last().map(String::as_str),
            )
            .await?;
        let last = tags.last().cloned();
        let full = page.tags.len() >= page_size;
        tags.extend(page.tags);
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
