//! Which digest a call for an image runs. Porch keeps a tag's first digest until it restarts,
//! so a tag pushed to another image is not seen; here the registry is asked again (one HEAD
//! request) once the digest is older than `digest_recheck_interval`, in the background: the
//! call that finds it stale, and those after it until the answer comes, go on with the known
//! digest, so a warm call makes no registry request. Pods run the image by digest. The runner's
//! result cache keys a call by the digest `cache_identity` names and keeps its answer only
//! when the same digest is named after the run, so an answer is never kept under another
//! digest's key. Once a tag moved, its calls get pods of the new digest; the old
//! digest's pods take no more calls and are deleted once idle past their TTL.

use std::sync::Arc;

use crate::image::digest_of;
use crate::pool::Pool;

/// The digest a call for `image` runs now: the one it names; else its tag's known digest
/// (checked again in the background when stale); else the registry's answer, asked now.
pub async fn current(pool: &Arc<Pool>, image: &str) -> Result<String, String> {
    if let Some(digest) = known(pool, image) {
        return Ok(digest);
    }
    let docker_config = pool
        .settings
        .docker_config()
        .map_err(|error| error.to_string())?;
    let metadata = pool
        .registry
        .metadata(image, docker_config.as_ref())
        .await?;
    Ok(metadata.digest)
}

/// The digest a call for `image` runs, when known without asking the registry now: the one it
/// names, else its tag's known digest, which is checked again in the background when stale
/// (so call it within the plugin's runtime).
pub fn known(pool: &Arc<Pool>, image: &str) -> Option<String> {
    if let Some(digest) = digest_of(image) {
        return Some(digest.to_owned());
    }
    let registry = &pool.registry;
    let interval = pool.settings.digest_recheck_interval;
    let (digest, stale) = registry.known_digest(image, interval)?;
    if stale && registry.begin_recheck(image) {
        let pool = pool.clone();
        let image = image.to_owned();
        tokio::spawn(async move {
            let docker_config = pool.settings.docker_config().ok().flatten();
            if let Err(problem) = pool.registry.recheck(&image, docker_config.as_ref()).await {
                tracing::warn!(image, "keeping the known digest: {problem}");
            }
        });
    }
    Some(digest)
}
