//! The result cache every EvaluateFunction call passes through: the answer of a pure call (and
//! of an image an operator marks, by image prefix or on its FunctionConfig executor) is kept
//! in memory, bounded in bytes, and given again to an identical call; concurrent identical
//! calls run the function once. ConfigHub's FunctionExecutor requests of pure functions go
//! through it too (`confighub::serving`), their encoded reply kept as an answer's ResourceList.
//!
//! The key is a SHA-256 over what ran and what was asked: the serving evaluator instance, its
//! plugin's name and version, the code identity the plugin gives (a function's name, an
//! executable's content hash), the FunctionConfig route, the image, the tag constraint and the
//! request bytes exactly. A change of any of them is a different key, so a cached answer is
//! never given for a request or code that did not produce it.
//!
//! With `cache.disk`, answers are also kept on disk ([`disk`]): a call the memory store cannot
//! answer looks there, and a hit there is kept in memory again.

pub mod disk;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use krm_plugin_api::{CancelReason, EvalError, EvalResponse};
use krm_plugin_loader::HostCallContext;
use moka::notification::RemovalCause;
use sha2::{Digest, Sha256};

use self::disk::{DiskStore, DiskUsage, Loaded};
use crate::config::CacheConfig;
use crate::telemetry::metrics;

/// The response header (gRPC metadata) saying what the cache did for a call.
pub const CACHE_HEADER: &str = "x-krm-cache";

/// An answer is not kept when it would take more than this share of the store: one call must
/// not push out everything else.
const MAX_ENTRY_SHARE: u64 = 8;

/// Bookkeeping per entry beyond its bytes (key, value header, the store's own).
const ENTRY_OVERHEAD: u64 = 256;

/// How many requests the cache remembers the last key of, to tell why a call missed.
const REMEMBERED_REQUESTS: u64 = 65_536;

/// A key: the SHA-256 described in the module's documentation.
pub type Key = [u8; 32];

/// What the cache did for one call, as the `x-krm-cache` header says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the store.
    Hit,
    /// This call ran the function (and its answer was stored when it succeeded).
    Miss,
    /// Answered by an identical call's run that this one waited for.
    Shared,
    /// Not cacheable (or the cache is off): the call ran as usual.
    Bypass,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Shared => "shared",
            Self::Bypass => "bypass",
        }
    }
}

/// Whether a call may be cached, decided before it runs.
pub enum Decision {
    Cache(Cacheable),
    /// Run it uncached.
    Bypass,
}

/// How a cacheable call is kept.
#[derive(Debug, Clone, Copy)]
pub struct Cacheable {
    key: Key,
    /// The request without the code, to tell why a call missed.
    request: Key,
    ttl: Duration,
    /// The SHA-256 of the code identity the key names: an answer is kept only when its
    /// evaluator still names that code after the run.
    code: Key,
    /// Whether the answer may be kept on disk: only when its evaluator named the code that
    /// runs. One that names none may run other code after a restart under the same key.
    durable: bool,
}

/// What identifies a call: hashed into its [`Key`].
pub struct Identity<'a> {
    /// The evaluator instance that would serve it (for a ConfigHub request, the service).
    pub instance: &'a str,
    /// Its plugin's name and version.
    pub plugin: &'a str,
    pub plugin_version: &'a str,
    /// What the plugin says identifies the code that runs.
    pub code: &'a str,
    /// The FunctionConfig route, as JSON; empty when none routed the call.
    pub route: &'a str,
    pub image: &'a str,
    pub tag: &'a str,
    pub request: &'a [u8],
}

impl Identity<'_> {
    /// The key of the whole identity, and that of the request alone (without the code).
    fn keys(&self) -> (Key, Key) {
        let mut request = Sha256::new();
        for part in [
            self.instance.as_bytes(),
            self.route.as_bytes(),
            self.image.as_bytes(),
            self.tag.as_bytes(),
            self.request,
        ] {
            // Each part's length first, so that no two identities hash the same bytes.
            request.update((part.len() as u64).to_le_bytes());
            request.update(part);
        }
        let request: Key = request.finalize().into();
        let mut key = Sha256::new();
        key.update(request);
        for part in [self.plugin, self.plugin_version, self.code] {
            key.update((part.len() as u64).to_le_bytes());
            key.update(part.as_bytes());
        }
        (key.finalize().into(), request)
    }
}

/// A stored answer.
#[derive(Debug)]
struct Answer {
    response: EvalResponse,
    /// The image a tag constraint resolved to, as the run reported it.
    resolved: Option<String>,
    /// The image called, for the metrics of its eviction.
    image: String,
    ttl: Duration,
}

impl Answer {
    fn weight(&self) -> u64 {
        let response = &self.response;
        (response.resource_list.len()
            + response.log.len()
            + response.served_by.as_ref().map_or(0, String::len)
            + response.declined.iter().map(String::len).sum::<usize>()
            + self.image.len()
            + self.resolved.as_ref().map_or(0, String::len)) as u64
            + ENTRY_OVERHEAD
    }
}

/// Why a run's answer was not stored; shared with the calls that waited for it.
#[derive(Debug)]
enum NotStored {
    /// The running call was cancelled or its deadline passed: a waiter runs it again.
    Cancelled(EvalError),
    /// The function failed: failures are never cached, but the waiters get the same answer.
    Failed(EvalError),
    /// Too large to keep, or its evaluator named other code after the run than the key names
    /// (a tag that moved to another digest meanwhile); the waiters still get it.
    Unkept(Arc<Answer>),
}

/// The in-memory store and the runs in flight.
pub struct ResultCache {
    entries: moka::future::Cache<Key, Arc<Answer>>,
    /// The last key and expiry time stored for each request, to tell why a call missed.
    requests: moka::sync::Cache<Key, (Key, Instant)>,
    config: CacheConfig,
    counts: Arc<Counts>,
    /// The store on disk, when configured and usable.
    disk: Option<Arc<DiskStore>>,
}

#[derive(Debug, Default)]
struct Counts {
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl Counts {
    fn add(&self, bytes: u64) {
        self.entries.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.publish();
    }

    fn remove(&self, bytes: u64) {
        self.entries.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        metrics::cache_stored(
            self.entries.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        );
    }
}

/// Expires each entry after its own TTL.
struct PerEntryTtl;

impl moka::Expiry<Key, Arc<Answer>> for PerEntryTtl {
    fn expire_after_create(
        &self,
        _key: &Key,
        value: &Arc<Answer>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// What the memory store holds, for `krm-runner cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
}

/// What a running server's stores hold: the answer of its `/cache` admin path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stores {
    pub memory: Usage,
    /// `None` without a usable disk store.
    pub disk: Option<DiskUsage>,
}

impl ResultCache {
    /// The cache `config` describes; `None` when it is off.
    pub fn new(config: &CacheConfig) -> Option<Arc<Self>> {
        if !config.enabled {
            return None;
        }
        let counts = Arc::new(Counts::default());
        let removed = counts.clone();
        let entries = moka::future::Cache::builder()
            .max_capacity(config.max_bytes)
            .weigher(|_key: &Key, answer: &Arc<Answer>| {
                u32::try_from(answer.weight()).unwrap_or(u32::MAX)
            })
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .expire_after(PerEntryTtl)
            .eviction_listener(move |_key, answer: Arc<Answer>, cause| {
                removed.remove(answer.weight());
                let reason = match cause {
                    RemovalCause::Size => "size",
                    RemovalCause::Expired => "expired",
                    RemovalCause::Explicit | RemovalCause::Replaced => return,
                };
                metrics::cache_eviction(&answer.image, reason);
            })
            .build();
        let disk = config.disk.as_ref().and_then(|disk| {
            let largest =
                (config.max_bytes / MAX_ENTRY_SHARE).min(disk.max_bytes / MAX_ENTRY_SHARE);
            DiskStore::open(disk, largest).map(Arc::new)
        });
        Some(Arc::new(Self {
            entries,
            requests: moka::sync::Cache::new(REMEMBERED_REQUESTS),
            config: config.clone(),
            counts,
            disk,
        }))
    }

    /// Whether a call for `image` whose evaluator gave this purity may be cached, and its key;
    /// `named` says whether the evaluator named the code (see [`Cacheable::durable`]);
    /// `marked`, the time-to-live its FunctionConfig executor section marks it cacheable with.
    /// A pure call keeps `ttl_seconds`; else the section's mark, else the first `images` prefix
    /// the image starts with.
    pub fn decide(
        &self,
        identity: &Identity<'_>,
        pure: bool,
        named: bool,
        marked: Option<Duration>,
    ) -> Decision {
        let ttl = if pure {
            Some(Duration::from_secs(self.config.ttl_seconds))
        } else {
            marked.or_else(|| {
                self.config
                    .images
                    .iter()
                    .find(|marked| identity.image.starts_with(&marked.prefix))
                    .map(|marked| Duration::from_secs(marked.ttl_seconds))
            })
        };
        match ttl {
            Some(ttl) => {
                let (key, request) = identity.keys();
                Decision::Cache(Cacheable {
                    key,
                    request,
                    ttl,
                    code: Sha256::digest(identity.code).into(),
                    durable: named,
                })
            }
            None => Decision::Bypass,
        }
    }

    /// Answers a cacheable call: from the store, from an identical call's run in flight, or
    /// by `run`, whose success is stored when `code_now`, asked after the run, still names the
    /// code the key names (`None`: it cannot tell). A waiting call's deadline and
    /// cancellation (its `context`) end only its own wait; when the call running the function
    /// is cancelled, a waiting one runs it instead. The call running it answers, once
    /// cancelled, what its run does (which stops at the cancellation, saying where).
    pub async fn answer<F, R, C>(
        &self,
        context: &Arc<HostCallContext>,
        image: &str,
        cacheable: Cacheable,
        run: F,
        code_now: C,
    ) -> (Result<EvalResponse, EvalError>, Outcome)
    where
        F: Fn() -> R,
        R: Future<Output = Result<EvalResponse, EvalError>>,
        C: Fn() -> Option<String>,
    {
        let Cacheable { key, request, .. } = cacheable;
        if let Some(answer) = self.entries.get(&key).await {
            metrics::cache_lookup(image, "hit", "");
            return (Ok(reply(context, &answer)), Outcome::Hit);
        }
        let cancelled = context.as_call_context().cancelled();
        let deadline = context.deadline().map(tokio::time::Instant::from_std);
        let running = AtomicBool::new(false);
        let wait = async {
            let on_disk = if cacheable.durable {
                self.load_from_disk(key).await
            } else {
                Loaded::Absent
            };
            let reason = match on_disk {
                Loaded::Found(answer) => {
                    let answer = Arc::new(answer);
                    self.keep_in_memory(key, request, answer.clone()).await;
                    metrics::cache_lookup(image, "hit", "");
                    return (Ok(reply(context, &answer)), Outcome::Hit);
                }
                Loaded::Expired => Some("expired"),
                Loaded::Corrupt => Some("corrupt"),
                Loaded::Absent => None,
            };
            self.run_once(context, image, cacheable, reason, &running, run, code_now)
                .await
        };
        tokio::pin!(wait);
        let stopped = tokio::select! {
            answered = &mut wait => return answered,
            reason = cancelled => reason,
            () = sleep_until(deadline) => {
                context.cancel(CancelReason::DeadlineExceeded);
                CancelReason::DeadlineExceeded
            }
        };
        if running.load(Ordering::Relaxed) {
            return wait.await;
        }
        (Err(stopped.to_error(image)), Outcome::Miss)
    }

    /// The entry of `key` on disk, read on a blocking thread; `Absent` without a disk store.
    async fn load_from_disk(&self, key: Key) -> Loaded {
        let Some(disk) = &self.disk else {
            return Loaded::Absent;
        };
        let disk = disk.clone();
        tokio::task::spawn_blocking(move || disk.load(&key))
            .await
            .unwrap_or(Loaded::Absent)
    }

    /// Keeps an answer read from disk in memory too, unless it is too large to.
    async fn keep_in_memory(&self, key: Key, request: Key, answer: Arc<Answer>) {
        let weight = answer.weight();
        if weight > self.config.max_bytes / MAX_ENTRY_SHARE {
            return;
        }
        self.counts.add(weight);
        self.requests
            .insert(request, (key, Instant::now() + answer.ttl));
        self.entries.insert(key, answer).await;
    }

    /// Runs the function once for every identical call waiting; `found_on_disk` is why the
    /// disk store did not answer, when it held an entry. `running` is set while this call runs
    /// the function.
    #[allow(clippy::too_many_arguments)]
    async fn run_once<F, R, C>(
        &self,
        context: &Arc<HostCallContext>,
        image: &str,
        cacheable: Cacheable,
        found_on_disk: Option<&'static str>,
        running: &AtomicBool,
        run: F,
        code_now: C,
    ) -> (Result<EvalResponse, EvalError>, Outcome)
    where
        F: Fn() -> R,
        R: Future<Output = Result<EvalResponse, EvalError>>,
        C: Fn() -> Option<String>,
    {
        let Cacheable {
            key,
            request,
            ttl,
            code,
            durable,
        } = cacheable;
        let largest = self.config.max_bytes / MAX_ENTRY_SHARE;
        // Told before a run records this request's new key.
        let reason = found_on_disk.unwrap_or_else(|| self.miss_reason(key, request));
        loop {
            let ran = AtomicBool::new(false);
            let init = async {
                ran.store(true, Ordering::Relaxed);
                running.store(true, Ordering::Relaxed);
                let outcome = run().await;
                running.store(false, Ordering::Relaxed);
                let response = match outcome {
                    Ok(response) => response,
                    // Its own caller went away: a waiting call takes over.
                    Err(error) if context.cancel_reason().is_some() => {
                        return Err(NotStored::Cancelled(error));
                    }
                    Err(error) => return Err(NotStored::Failed(error)),
                };
                let answer = Arc::new(Answer {
                    response,
                    resolved: context.resolved(),
                    image: image.to_owned(),
                    ttl,
                });
                let weight = answer.weight();
                // The code may have changed during the run (a tag moved to another digest):
                // the answer is kept only when the code named before and after it is the same.
                let same_code =
                    code_now().is_some_and(|now| Key::from(Sha256::digest(now)) == code);
                if weight > largest || !same_code {
                    return Err(NotStored::Unkept(answer));
                }
                self.counts.add(weight);
                self.requests.insert(request, (key, Instant::now() + ttl));
                if let Some(disk) = self.disk.as_ref().filter(|_| durable) {
                    let (disk, stored) = (disk.clone(), answer.clone());
                    let expires = SystemTime::now() + ttl;
                    // Awaited, so that an answer given is on disk when the runner stops.
                    let _ = tokio::task::spawn_blocking(move || disk.store(&key, &stored, expires))
                        .await;
                }
                Ok(answer)
            };
            let entry = self.entries.entry(key).or_try_insert_with(init).await;
            let ran = ran.load(Ordering::Relaxed);
            if ran {
                metrics::cache_lookup(image, "miss", reason);
                // Evicts what the new answer pushed over the bound now rather than at some
                // later lookup, so that a flood of misses never holds more than the bound.
                self.entries.run_pending_tasks().await;
            }
            let outcome = if ran { Outcome::Miss } else { Outcome::Shared };
            match entry {
                Ok(entry) => {
                    if !ran {
                        metrics::cache_lookup(image, "shared", "");
                    }
                    let outcome = if entry.is_fresh() || ran {
                        outcome
                    } else {
                        Outcome::Shared
                    };
                    return (Ok(reply(context, entry.value())), outcome);
                }
                Err(not_stored) => match &*not_stored {
                    NotStored::Cancelled(error) if ran => return (Err(error.clone()), outcome),
                    // The call running it was cancelled: ask again (this call may run it).
                    NotStored::Cancelled(_) => {}
                    NotStored::Failed(error) => {
                        if !ran {
                            metrics::cache_lookup(image, "shared", "");
                        }
                        return (Err(error.clone()), outcome);
                    }
                    NotStored::Unkept(answer) => {
                        if !ran {
                            metrics::cache_lookup(image, "shared", "");
                        }
                        return (Ok(reply(context, answer)), outcome);
                    }
                },
            }
        }
    }

    /// Why the call with `key` missed: its request was answered before under other code
    /// (`new_digest`), or the answer expired or was evicted, or it is new.
    fn miss_reason(&self, key: Key, request: Key) -> &'static str {
        match self.requests.get(&request) {
            Some((known, _)) if known != key => "new_digest",
            Some((_, expires)) if expires <= Instant::now() => "expired",
            Some(_) => "evicted",
            None => "new",
        }
    }

    /// A call that may not be cached, counted.
    pub fn bypassed(image: &str) {
        metrics::cache_lookup(image, "miss", "not_cacheable");
    }

    /// What the stores hold now.
    pub fn stores(&self) -> Stores {
        Stores {
            memory: Usage {
                entries: self.counts.entries.load(Ordering::Relaxed),
                bytes: self.counts.bytes.load(Ordering::Relaxed),
                max_bytes: self.config.max_bytes,
            },
            disk: self.disk.as_ref().map(|disk| disk.usage()),
        }
    }

    /// Empties the stores; runs in flight still answer their callers.
    pub async fn clear(&self) {
        self.entries.invalidate_all();
        self.entries.run_pending_tasks().await;
        self.requests.invalidate_all();
        if let Some(disk) = &self.disk {
            let disk = disk.clone();
            let _ = tokio::task::spawn_blocking(move || disk.clear()).await;
        }
    }
}

/// The path of the admin route on the metrics listener: GET shows the stores ([`Stores`] as
/// JSON), DELETE empties them and shows what is left.
pub const ADMIN_PATH: &str = "/cache";

/// The admin route of `cache` ([`ADMIN_PATH`]).
pub fn admin_routes(cache: Arc<ResultCache>) -> axum::Router {
    use axum::extract::State;
    async fn show(State(cache): State<Arc<ResultCache>>) -> impl axum::response::IntoResponse {
        as_json(&cache.stores())
    }
    async fn clear(State(cache): State<Arc<ResultCache>>) -> impl axum::response::IntoResponse {
        cache.clear().await;
        as_json(&cache.stores())
    }
    axum::Router::new()
        .route(ADMIN_PATH, axum::routing::get(show).delete(clear))
        .with_state(cache)
}

fn as_json(stores: &Stores) -> impl axum::response::IntoResponse + use<> {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        // Plain numbers and paths: serializing cannot fail.
        serde_json::to_string(stores).unwrap_or_default(),
    )
}

fn reply(context: &HostCallContext, answer: &Answer) -> EvalResponse {
    if let Some(resolved) = &answer.resolved {
        context.set_resolved(resolved);
    }
    answer.response.clone()
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity<'a>(code: &'a str, request: &'a [u8]) -> Identity<'a> {
        Identity {
            instance: "builtin",
            plugin: "builtin",
            plugin_version: "0.1.0",
            code,
            route: "",
            image: "set-namespace",
            tag: "",
            request,
        }
    }

    /// An answer whose evaluator names other code after the run than before (a tag that moved
    /// to another digest during the call) is given but not kept; one naming the same code is.
    #[tokio::test]
    async fn an_answer_is_kept_only_when_the_same_code_is_named_after_the_run() {
        let cache = ResultCache::new(&CacheConfig::default()).expect("on by default");
        let context = HostCallContext::new(None);
        let Decision::Cache(cacheable) =
            cache.decide(&identity("sha256:aaaa", b"items: []"), true, true, None)
        else {
            panic!("a pure call is cacheable");
        };
        let runs = &AtomicU64::new(0);
        let run = move || async move {
            runs.fetch_add(1, Ordering::Relaxed);
            Ok(EvalResponse::new(b"out".to_vec(), Vec::new()))
        };
        let moved = || Some("sha256:bbbb".to_owned());
        let same = || Some("sha256:aaaa".to_owned());
        let (answer, outcome) = cache.answer(&context, "fn", cacheable, run, moved).await;
        assert_eq!(answer.unwrap().resource_list, b"out");
        assert_eq!(outcome, Outcome::Miss);
        let (_, outcome) = cache.answer(&context, "fn", cacheable, run, same).await;
        assert_eq!(outcome, Outcome::Miss, "not kept under another code's key");
        let (answer, outcome) = cache.answer(&context, "fn", cacheable, run, same).await;
        assert_eq!(
            (answer.unwrap().resource_list, outcome),
            (b"out".to_vec(), Outcome::Hit)
        );
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn every_part_of_the_identity_changes_the_key() {
        let (key, request) = identity("set-namespace", b"items: []").keys();
        let (other_code, same_request) = identity("set-labels", b"items: []").keys();
        assert_ne!(key, other_code);
        assert_eq!(request, same_request);
        let (other_bytes, other_request) = identity("set-namespace", b"items: [] ").keys();
        assert_ne!(key, other_bytes);
        assert_ne!(request, other_request);
        // Moving bytes from one part to the next is another identity.
        let mut moved = identity("set-namespace", b"items: []");
        moved.instance = "builtinset-namespace";
        moved.image = "";
        assert_ne!(moved.keys().1, request);
    }
}
