//! Tag constraints (Porch's request field 3): the highest version of the repository that
//! satisfies the constraint, among the registry's tags (and, for a call a FunctionConfig routes
//! here, among those its `podExecutor.tags` admit). Tag lists are cached per repository and
//! listed again in the background once older than `tags_refresh_interval`, so a warm call
//! makes no registry request.

use std::sync::Arc;

use krm_plugin_api::{
    ErrorKind, EvalError, FunctionConfigExecutor, FunctionConfigRoute, Resolution,
};
use krm_runner_function_config::PodExecutor;
use krm_runner_function_config::version::{Constraint, TagEntry, sorted_versions};

use crate::pool::Pool;

/// What `repository` (an untagged, prefixed image) runs under the constraint `tag`.
pub async fn resolve_tag(
    pool: &Arc<Pool>,
    repository: &str,
    tag: &str,
    route: Option<&FunctionConfigRoute>,
) -> Result<Resolution, EvalError> {
    let constraint =
        Constraint::parse(tag).map_err(|error| EvalError::invalid_input(error.to_string()))?;
    let admitted = match route.filter(|route| route.executor == FunctionConfigExecutor::PodExecutor)
    {
        Some(route) => {
            let pod: PodExecutor = route.settings()?;
            let entries = pod
                .tags
                .iter()
                .filter_map(|tag| TagEntry::parse(tag).ok())
                .collect::<Vec<_>>();
            Some((route.function_config.clone(), pod.tags, entries))
        }
        None => None,
    };
    let tags = repository_tags(pool, repository).await?;
    let usable: Vec<&str> = tags
        .iter()
        .map(String::as_str)
        .filter(|tag| match &admitted {
            Some((_, _, entries)) if !entries.is_empty() => {
                entries.iter().any(|entry| entry.admits(tag))
            }
            _ => true,
        })
        .collect();
    let candidates: Vec<String> = sorted_versions(usable.iter().copied())
        .into_iter()
        .map(str::to_owned)
        .collect();
    let Some(chosen) = constraint.best(usable.iter().copied()) else {
        let mut message = format!(
            "no version of {repository:?} satisfies tag constraint {tag:?}: the registry has [{}]",
            sorted_versions(tags.iter().map(String::as_str)).join(", ")
        );
        if let Some((function_config, listed, entries)) = &admitted
            && !entries.is_empty()
        {
            message.push_str(&format!(
                ", of which FunctionConfig {function_config} (podExecutor.tags {listed:?}) admits [{}]",
                candidates.join(", ")
            ));
        }
        return Err(EvalError::new(ErrorKind::NotFound, message));
    };
    let image = format!("{repository}:{chosen}");
    let digest = match pool.registry.cached_digest(&image) {
        Some(digest) => Some(digest),
        // The pod about to start needs the same metadata: fetched once, then cached.
        None => {
            let docker_config = pool.settings.docker_config().ok().flatten();
            pool.registry
                .metadata(&image, docker_config.as_ref())
                .await
                .ok()
                .map(|metadata| metadata.digest)
        }
    };
    Ok(Resolution {
        image,
        tag: chosen.to_owned(),
        digest,
        candidates,
    })
}

/// The cached tags of `repository`, refreshed in the background when stale; listed now when
/// there are none.
async fn repository_tags(pool: &Arc<Pool>, repository: &str) -> Result<Arc<[String]>, EvalError> {
    let settings = &pool.settings;
    if let Some((tags, stale)) = pool
        .registry
        .cached_tags(repository, settings.tags_refresh_interval)
    {
        if stale && pool.registry.begin_refresh(repository) {
            let pool = pool.clone();
            let repository = repository.to_owned();
            tokio::spawn(async move {
                if let Err(problem) = list(&pool, &repository).await {
                    tracing::warn!(repository, "keeping the cached tag list: {problem}");
                }
            });
        }
        return Ok(tags);
    }
    list(pool, repository).await.map_err(EvalError::failed)
}

async fn list(pool: &Pool, repository: &str) -> Result<Arc<[String]>, String> {
    let docker_config = pool
        .settings
        .docker_config()
        .map_err(|error| error.to_string())?;
    pool.registry
        .list_tags(
            repository,
            docker_config.as_ref(),
            pool.settings.tags_page_size,
        )
        .await
}
