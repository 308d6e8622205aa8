//! The routing table: which FunctionConfig a request image matches, and which executors it
//! names for that image, in the order the runner tries them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use krm_plugin_api::FunctionConfigExecutor;

use crate::source::{ObjectId, Source, Sourced};
use crate::types::{PodExecutor, ResultCaching, WasmExecutor};
use crate::version::{Constraint, TagEntry};

/// A request image taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Everything before the short name, e.g. `ghcr.io/kptdev/krm-functions-catalog`; the
    /// default prefix (without its trailing `/`) for a bare name.
    pub repo: String,
    /// The last path segment without tag or digest, e.g. `set-namespace`.
    pub name: String,
    /// The tag, `""` when there is none.
    pub tag: String,
    /// The digest after `@`, e.g. `sha256:…`.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Splits `image` as Porch does: the digest after `@`; the tag after the last `:` that
    /// follows the last `/` (so a registry port is not a tag); the repository before the last
    /// `/`. A name without `/` lives under `default_prefix`.
    pub fn parse(image: &str, default_prefix: &str) -> Self {
        let (named, digest) = match image.split_once('@') {
            Some((named, digest)) => (named, Some(digest.to_owned())),
            None => (image, None),
        };
        let (repo, last) = match named.rsplit_once('/') {
            Some((repo, last)) => (repo, last),
            None => (trim_prefix(default_prefix), named),
        };
        let (name, tag) = last.rsplit_once(':').unwrap_or((last, ""));
        Self {
            repo: repo.to_owned(),
            name: name.to_owned(),
            tag: tag.to_owned(),
            digest,
        }
    }
}

fn trim_prefix(prefix: &str) -> &str {
    prefix.trim_end_matches('/')
}

/// One executor the matched FunctionConfig names for the requested tag.
#[derive(Clone, Debug, PartialEq)]
pub enum PlannedExecutor {
    /// Run the built-in function with this id (`goExecutor.id`, else `metadata.name`), as the
    /// image's `tag`: the requested one, or the one a requested constraint resolved to; `None`
    /// when the constraint names no single version but overlaps a range the executor's tags
    /// give (the image is run untagged).
    Go {
        function_id: String,
        tag: Option<String>,
    },
    /// Run this WebAssembly module as the image's `tag` (as for `Go`); `cache` as the section
    /// marks it.
    Wasm {
        module: WasmModule,
        tag: Option<String>,
        cache: Option<ResultCaching>,
    },
    /// Run this executable (made absolute against the functions directory) as the image's `tag`
    /// (as for `Go`); `cache` as the section marks it.
    Binary {
        path: PathBuf,
        tag: Option<String>,
        cache: Option<ResultCaching>,
    },
    /// Run the image in a pod with these settings (a requested constraint is resolved against
    /// the registry's tags by the pod evaluator).
    Pod { settings: Arc<PodExecutor> },
}

impl PlannedExecutor {
    pub fn executor(&self) -> FunctionConfigExecutor {
        match self {
            PlannedExecutor::Go { .. } => FunctionConfigExecutor::GoExecutor,
            PlannedExecutor::Wasm { .. } => FunctionConfigExecutor::WasmExecutor,
            PlannedExecutor::Binary { .. } => FunctionConfigExecutor::BinaryExecutor,
            PlannedExecutor::Pod { .. } => FunctionConfigExecutor::PodExecutor,
        }
    }
}

impl fmt::Display for PlannedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlannedExecutor::Go { function_id, .. } => {
                write!(f, "goExecutor: built-in function {function_id}")
            }
            PlannedExecutor::Wasm { module, .. } => write!(f, "wasmExecutor: module {module}"),
            PlannedExecutor::Binary { path, .. } => write!(f, "binaryExecutor: {}", path.display()),
            PlannedExecutor::Pod { .. } => f.write_str("podExecutor"),
        }
    }
}

/// Where a wasmExecutor's module comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WasmModule {
    /// A file (`path`), made absolute against the functions directory.
    File(PathBuf),
    /// An OCI artifact (`image`), as the FunctionConfig writes it.
    Image(String),
}

impl fmt::Display for WasmModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WasmModule::File(path) => write!(f, "{}", path.display()),
            WasmModule::Image(image) => f.write_str(image),
        }
    }
}

impl WasmExecutor {
    /// The module, a relative `path` made absolute against `functions_dir`; `None` for a
    /// section naming neither a path nor an image (validation refuses it).
    pub fn module(&self, functions_dir: &Path) -> Option<WasmModule> {
        match (&self.path, &self.image) {
            (Some(path), _) => Some(WasmModule::File(functions_dir.join(path))),
            (None, Some(image)) => Some(WasmModule::Image(image.clone())),
            (None, None) => None,
        }
    }
}

/// Why an executor of the matched FunctionConfig is not in the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeftOut {
    /// The FunctionConfig has no such section.
    Absent(FunctionConfigExecutor),
    /// The section does not list the requested tag.
    TagNotListed {
        executor: FunctionConfigExecutor,
        tag: String,
        tags: Vec<String>,
    },
    /// None of the tags the section names satisfies the requested constraint.
    NoneSatisfies {
        executor: FunctionConfigExecutor,
        constraint: String,
        tags: Vec<String>,
    },
}

impl LeftOut {
    pub fn executor(&self) -> FunctionConfigExecutor {
        match self {
            LeftOut::Absent(executor)
            | LeftOut::TagNotListed { executor, .. }
            | LeftOut::NoneSatisfies { executor, .. } => *executor,
        }
    }
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftOut::Absent(executor) => write!(f, "{executor}: not configured"),
            LeftOut::TagNotListed {
                executor,
                tag,
                tags,
            } => write!(f, "{executor}: tag {tag:?} not among {tags:?}"),
            LeftOut::NoneSatisfies {
                executor,
                constraint,
                tags,
            } => write!(
                f,
                "{executor}: no tag among {tags:?} satisfies constraint {constraint:?}"
            ),
        }
    }
}

/// Why no FunctionConfig applies to a request image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoMatch {
    /// Digest references name exact content; a FunctionConfig maps tags, so it never applies.
    Digest { digest: String },
    /// No FunctionConfig has this `spec.image`.
    NoObject { name: String },
    /// The FunctionConfig for this name does not list the image's repository.
    RepoNotListed {
        object: ObjectId,
        repo: String,
        prefixes: Vec<String>,
    },
}

impl fmt::Display for NoMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoMatch::Digest { digest } => write!(
                f,
                "digest reference (@{digest}): FunctionConfigs match tags, never digests"
            ),
            NoMatch::NoObject { name } => write!(f, "no FunctionConfig has spec.image {name:?}"),
            NoMatch::RepoNotListed {
                object,
                repo,
                prefixes,
            } => write!(
                f,
                "{object} does not list repository {repo:?} (prefixes {prefixes:?})"
            ),
        }
    }
}

/// The FunctionConfig a request image matched and what it says to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Matched {
    pub object: ObjectId,
    pub image: ImageRef,
    /// The executors to try, in order. The runner skips one that cannot run the function
    /// (built-in missing, binary missing, no pod evaluator) and says so itself.
    pub plan: Vec<PlannedExecutor>,
    /// The executors not in the plan, each with its reason, in flow order.
    pub left_out: Vec<LeftOut>,
}

/// The answer of [`RoutingTable::route`].
#[derive(Clone, Debug, PartialEq)]
pub enum RouteOutcome {
    NoMatch(NoMatch),
    Matched(Matched),
}

/// Two objects claiming the same `spec.image`; the first is used, the second ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub image: String,
    pub used: ObjectId,
    pub ignored: ObjectId,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} and {} both claim spec.image {:?}; using the first, ignoring the second",
            self.used, self.ignored, self.image
        )
    }
}

#[derive(Debug)]
struct Entry {
    sourced: Sourced,
    /// Repositories the object accepts, without trailing `/`; `None`: any.
    repos: Option<Vec<String>>,
    pod: Option<Arc<PodExecutor>>,
    /// Each executor's `tags`, read (validation refused objects whose tags do not parse).
    go_tags: Vec<TagEntry>,
    wasm_tags: Vec<TagEntry>,
    binary_tags: Vec<TagEntry>,
    pod_tags: Vec<TagEntry>,
}

fn tag_entries(tags: Option<&Vec<String>>) -> Vec<TagEntry> {
    tags.into_iter()
        .flatten()
        .map(|tag| TagEntry::parse(tag).unwrap_or_else(|_| TagEntry::Literal(tag.clone())))
        .collect()
}

/// The FunctionConfigs in force, keyed by `spec.image`.
#[derive(Debug)]
pub struct RoutingTable {
    entries: BTreeMap<String, Entry>,
    default_prefix: String,
    functions_dir: PathBuf,
}

impl RoutingTable {
    /// Builds the table from valid objects of every source.
    ///
    /// `default_prefix` is the runner's default image prefix (what `""` in `spec.prefixes`
    /// stands for, and where bare names live); `functions_dir` is where relative
    /// `binaryExecutor.path`s and `wasmExecutor.path`s point, made absolute against the working directory.
    ///
    /// When several objects claim one `spec.image`, one is used and each other is reported: a
    /// file-sourced object wins over a cluster one (the operator wrote the file on purpose for
    /// this runner), then the lowest namespace/name, then the earliest file and document, so the
    /// outcome never depends on the order objects arrived in.
    pub fn build(
        objects: impl IntoIterator<Item = Sourced>,
        default_prefix: &str,
        functions_dir: &Path,
    ) -> (Self, Vec<Conflict>) {
        let mut objects: Vec<Sourced> = objects.into_iter().collect();
        objects.sort_by(|a, b| precedence(a).cmp(&precedence(b)));
        let default_prefix = trim_prefix(default_prefix).to_owned();
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        let mut conflicts = Vec::new();
        for sourced in objects {
            let spec = &sourced.object().spec;
            if let Some(used) = entries.get(&spec.image) {
                conflicts.push(Conflict {
                    image: spec.image.clone(),
                    used: used.sourced.id(),
                    ignored: sourced.id(),
                });
                continue;
            }
            let repos = spec
                .prefixes
                .as_ref()
                .filter(|prefixes| !prefixes.is_empty())
                .map(|prefixes| {
                    prefixes
                        .iter()
                        .map(|prefix| match trim_prefix(prefix) {
                            "" => default_prefix.clone(),
                            prefix => prefix.to_owned(),
                        })
                        .collect()
                });
            let pod = spec.pod_executor.clone().map(Arc::new);
            let go_tags = tag_entries(spec.go_executor.as_ref().map(|go| &go.tags));
            let wasm_tags = tag_entries(spec.wasm_executor.as_ref().map(|wasm| &wasm.tags));
            let binary_tags = tag_entries(spec.binary_executor.as_ref().map(|b| &b.tags));
            let pod_tags = tag_entries(spec.pod_executor.as_ref().map(|pod| &pod.tags));
            entries.insert(
                spec.image.clone(),
                Entry {
                    sourced,
                    repos,
                    pod,
                    go_tags,
                    wasm_tags,
                    binary_tags,
                    pod_tags,
                },
            );
        }
        let functions_dir =
            std::path::absolute(functions_dir).unwrap_or_else(|_| functions_dir.to_owned());
        let table = Self {
            entries,
            default_prefix,
            functions_dir,
        };
        (table, conflicts)
    }

    /// Which FunctionConfig serves `image`, and how.
    ///
    /// The repository must equal one of the object's prefixes, not merely start with one as in
    /// Porch (whose regex is anchored at the start only): with the catalog prefix,
    /// `…/krm-functions-catalog-evil/set-namespace` would otherwise be routed as the catalog's
    /// function — to a trusted local binary or built-in, or with the catalog's pod settings.
    pub fn route(&self, image: &str) -> RouteOutcome {
        self.route_with(image, None)
    }

    /// [`RoutingTable::route`] for a call that may carry a tag constraint (Porch's request
    /// field 3, sent with an untagged image). Executor tags are constraints themselves: a
    /// requested tag falls under an entry that names it or admits its version. With a requested
    /// constraint, the go, wasm and binary executors run the highest of the tags they name exactly
    /// that satisfies it; else, for a constraint naming one version (`1.4.2`), that version
    /// when one of their entries admits it; else, when the constraint overlaps one of their
    /// ranges (`~1.4.0` and `>= 1.0.0, < 2.0.0`), the untagged image. The pod executor is
    /// planned whenever it is configured, and resolves the constraint against the registry's
    /// tags (keeping to those its own `tags` admit).
    pub fn route_with(&self, image: &str, constraint: Option<&Constraint>) -> RouteOutcome {
        let image = ImageRef::parse(image, &self.default_prefix);
        if let Some(digest) = &image.digest {
            return RouteOutcome::NoMatch(NoMatch::Digest {
                digest: digest.clone(),
            });
        }
        let Some(entry) = self.entries.get(&image.name) else {
            return RouteOutcome::NoMatch(NoMatch::NoObject { name: image.name });
        };
        if let Some(repos) = &entry.repos
            && !repos.contains(&image.repo)
        {
            return RouteOutcome::NoMatch(NoMatch::RepoNotListed {
                object: entry.sourced.id(),
                repo: image.repo,
                prefixes: repos.clone(),
            });
        }

        let spec = &entry.sourced.object().spec;
        let mut plan = Vec::new();
        let mut left_out = Vec::new();
        // The tag an executor serves the call as, or why it does not.
        let pick = |executor, entries: &[TagEntry], tags: &[String]| match constraint {
            None if entries.iter().any(|entry| entry.admits(&image.tag)) => {
                Ok(Some(image.tag.clone()))
            }
            None => Err(LeftOut::TagNotListed {
                executor,
                tag: image.tag.clone(),
                tags: tags.to_vec(),
            }),
            Some(constraint) => {
                if let Some(tag) = constraint.best(entries.iter().filter_map(TagEntry::concrete)) {
                    Ok(Some(tag.to_owned()))
                } else if let Some(version) = constraint
                    .exact()
                    .filter(|version| entries.iter().any(|entry| entry.admits(version)))
                {
                    Ok(Some(version.to_owned()))
                } else if entries.iter().any(|entry| {
                    matches!(entry, TagEntry::Constraint(range) if range.overlaps(constraint))
                }) {
                    Ok(None)
                } else {
                    Err(LeftOut::NoneSatisfies {
                        executor,
                        constraint: constraint.to_string(),
                        tags: tags.to_vec(),
                    })
                }
            }
        };
        match &spec.go_executor {
            None => left_out.push(LeftOut::Absent(FunctionConfigExecutor::GoExecutor)),
            Some(go) => match pick(FunctionConfigExecutor::GoExecutor, &entry.go_tags, &go.tags) {
                Ok(tag) => plan.push(PlannedExecutor::Go {
                    function_id: go
                        .id
                        .clone()
                        .unwrap_or_else(|| entry.sourced.name().to_owned()),
                    tag,
                }),
                Err(reason) => left_out.push(reason),
            },
        }
        match &spec.wasm_executor {
            None => left_out.push(LeftOut::Absent(FunctionConfigExecutor::WasmExecutor)),
            Some(wasm) => match pick(
                FunctionConfigExecutor::WasmExecutor,
                &entry.wasm_tags,
                &wasm.tags,
            ) {
                Ok(tag) => {
                    if let Some(module) = wasm.module(&self.functions_dir) {
                        plan.push(PlannedExecutor::Wasm {
                            module,
                            tag,
                            cache: wasm.cache.clone(),
                        });
                    }
                }
                Err(reason) => left_out.push(reason),
            },
        }
        match &spec.binary_executor {
            None => left_out.push(LeftOut::Absent(FunctionConfigExecutor::BinaryExecutor)),
            Some(binary) => match pick(
                FunctionConfigExecutor::BinaryExecutor,
                &entry.binary_tags,
                &binary.tags,
            ) {
                Ok(tag) => plan.push(PlannedExecutor::Binary {
                    path: self.functions_dir.join(&binary.path),
                    tag,
                    cache: binary.cache.clone(),
                }),
                Err(reason) => left_out.push(reason),
            },
        }
        match &entry.pod {
            None => left_out.push(LeftOut::Absent(FunctionConfigExecutor::PodExecutor)),
            Some(pod) if pod.tags.is_empty() || constraint.is_some() => {
                plan.push(PlannedExecutor::Pod {
                    settings: Arc::clone(pod),
                })
            }
            Some(pod) => match pick(
                FunctionConfigExecutor::PodExecutor,
                &entry.pod_tags,
                &pod.tags,
            ) {
                Ok(_) => plan.push(PlannedExecutor::Pod {
                    settings: Arc::clone(pod),
                }),
                Err(reason) => left_out.push(reason),
            },
        }
        RouteOutcome::Matched(Matched {
            object: entry.sourced.id(),
            image,
            plan,
            left_out,
        })
    }

    /// The images to start pods for ahead of the first call (Porch's warm-up): for each object
    /// with a `podExecutor` listing a tag, `<prefix>/<spec.image>:<first tag>`, the prefix being
    /// the first of `spec.prefixes`, or the default prefix when there is none or it is `""`.
    /// Sorted by `spec.image`.
    pub fn warm_up_images(&self) -> Vec<(String, PodExecutor)> {
        self.entries
            .iter()
            .filter_map(|(name, entry)| {
                let pod = entry.pod.as_ref()?;
                let tag = pod.tags.first()?;
                let prefix = entry
                    .repos
                    .as_ref()
                    .and_then(|repos| repos.first())
                    .unwrap_or(&self.default_prefix);
                let repository = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}/{name}")
                };
                let image = if tag.is_empty() {
                    repository
                } else {
                    format!("{repository}:{tag}")
                };
                Some((image, PodExecutor::clone(pod)))
            })
            .collect()
    }

    /// The repository a FunctionConfig's image is resolved and warmed up in: under its first
    /// prefix, or the default prefix when it lists none or that one is `""`.
    pub fn repository_of(&self, name: &str) -> String {
        let prefix = self
            .entries
            .get(name)
            .and_then(|entry| entry.repos.as_ref())
            .and_then(|repos| repos.first())
            .unwrap_or(&self.default_prefix);
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        }
    }

    /// Where relative `binaryExecutor.path`s and `wasmExecutor.path`s point (absolute).
    pub fn functions_dir(&self) -> &Path {
        &self.functions_dir
    }

    /// The objects in force (conflict losers excluded), by `spec.image`.
    pub fn objects(&self) -> impl Iterator<Item = &Sourced> {
        self.entries.values().map(|entry| &entry.sourced)
    }
}

/// Sort key of the conflict rule: files first, then namespace/name, then file and document.
fn precedence(sourced: &Sourced) -> (bool, Option<&str>, &str, &Source) {
    let metadata = &sourced.object().metadata;
    (
        matches!(sourced.source(), Source::Cluster),
        metadata.namespace.as_deref(),
        sourced.name(),
        sourced.source(),
    )
}

#[cfg(test)]
mod tests;
