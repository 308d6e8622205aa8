//! Per image (pinned to its digest: see `digest.rs`), a pool of warm pods. Calls go to the least-loaded ready pod (round robin among
//! equals); another pod starts when every pod's load reaches the preferred length, the pods
//! already starting cannot take the excess, and the image has fewer than its maximum; calls
//! beyond `max_queued_calls` are refused. Loads are held by a
//! lease that is released when dropped, so a cancelled or timed-out call can never leak one.
//!
//! Each image has its own [`Limits`] (TTL, pod count, preferred load, template overrides),
//! settled by the first call or warm-up and kept until a call says otherwise. When its template
//! overrides change, pods made with others are retired: they take no new calls and are deleted
//! once idle. So are idle pods beyond a lowered pod count.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use krm_plugin_api::{
    ErrorKind, EvalError, FunctionConfigExecutor, FunctionConfigRoute, Telemetry,
};
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use rand::Rng;
use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};

use crate::cluster::Cluster;
use crate::config::Settings;
use crate::image::{Registry, pod_stem, unpinned};
use crate::limits::Limits;
use crate::template::{
    self, IMAGE_ANNOTATION, OVERRIDES_ANNOTATION, OWNER_LABEL, OWNER_POD_ANNOTATION,
    OWNER_UID_ANNOTATION, PodRequest, TEMPLATE_VERSION_ANNOTATION, WRAPPER_PORT,
};

/// How often a ready pod's wrapper server is dialled until it accepts a connection.
const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// How long an adopted pod's wrapper server may take to accept a connection: it was serving.
const ADOPT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pings on an idle-looking connection to a pod, so that a call to a pod that vanished without
/// closing its connections (a lost node) fails in seconds rather than at the TCP timeout.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A ready pod.
pub struct PodHandle {
    pub name: String,
    image: String,
    /// The template overrides' hash it was made with (empty: none).
    overrides_hash: String,
    client: FunctionEvaluatorClient<Channel>,
    load: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl PodHandle {
    pub fn client(&self) -> FunctionEvaluatorClient<Channel> {
        self.client.clone()
    }

    fn load(&self) -> usize {
        self.load.load(Ordering::SeqCst)
    }
}

/// One call's claim on a pod.
pub struct Lease {
    pub pod: Arc<PodHandle>,
    /// The call waited for a pod to start.
    pub cold: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self
            .pod
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.pod.load.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct ImagePool {
    pods: Vec<Arc<PodHandle>>,
    creating: usize,
    /// Round-robin position among equally loaded pods.
    next: usize,
    /// Creation attempts so far, and the last one that failed with its message.
    attempts: u64,
    failure: Option<(u64, EvalError)>,
    /// Calls waiting for a pod to be created.
    waiting: usize,
    /// The image's settings once a call or warm-up said them, and the route section that did
    /// (`None`: no route), which later calls are compared with.
    limits: Option<Arc<Limits>>,
    told_by: Option<serde_json::Value>,
}

impl ImagePool {
    fn least_loaded(&mut self) -> Option<Arc<PodHandle>> {
        let min = self.pods.iter().map(|p| p.load()).min()?;
        let count = self.pods.len();
        let index = (0..count)
            .map(|offset| (self.next + offset) % count)
            .find(|&i| self.pods[i].load() == min)?;
        self.next = (index + 1) % count;
        Some(self.pods[index].clone())
    }

    fn queued_beyond(&self, preferred: usize) -> usize {
        self.waiting
            + self
                .pods
                .iter()
                .map(|p| p.load().saturating_sub(preferred))
                .sum::<usize>()
    }
}

/// Decrements `waiting` when a waiting call stops waiting, however it stops.
struct Waiting<'a> {
    pool: &'a Pool,
    image: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.images().get_mut(self.image) {
            pool.waiting -= 1;
            self.pool.publish(self.image, pool);
        }
    }
}

pub struct Pool {
    pub settings: Settings,
    cluster: Arc<Cluster>,
    pub(crate) registry: Registry,
    images: Mutex<HashMap<String, ImagePool>>,
    /// Pods being created, so that scans don't take them for strays.
    starting: Mutex<HashSet<String>>,
    /// Pods taken out of service (other template overrides, too many), deleted once idle.
    retiring: Mutex<Vec<Arc<PodHandle>>>,
    changed: Notify,
    /// The settings of images no route tells about: the pod-cache config file's, by resolved
    /// image, else the flags'.
    defaults: Arc<Limits>,
    pod_cache: HashMap<String, Arc<Limits>>,
    /// The pool's metrics (`krm_plugin_pod_*`) and the runner's traces.
    pub telemetry: Telemetry,
}

impl Pool {
    /// `pod_cache`: the pod-cache config file's settings by resolved image.
    pub fn new(
        settings: Settings,
        cluster: Arc<Cluster>,
        registry: Registry,
        pod_cache: HashMap<String, Limits>,
        telemetry: Telemetry,
    ) -> Arc<Self> {
        Arc::new(Self {
            defaults: Arc::new(Limits::defaults(&settings)),
            pod_cache: pod_cache
                .into_iter()
                .map(|(image, limits)| (image, Arc::new(limits)))
                .collect(),
            settings,
            cluster,
            registry,
            images: Mutex::default(),
            starting: Mutex::default(),
            retiring: Mutex::default(),
            changed: Notify::new(),
            telemetry,
        })
    }

    /// Sets the image's pool gauges: pods ready and starting, calls waiting for a pod. Called
    /// where they change, which is never on the warm path (a ready pod takes the call).
    fn publish(&self, image: &str, pool: &ImagePool) {
        let gauge = |name: &str, value: usize, labels: &[(&str, &str)]| {
            self.telemetry.gauge_set(name, value as f64, labels);
        };
        gauge(
            "pods",
            pool.pods.len(),
            &[("image", image), ("state", "ready")],
        );
        gauge(
            "pods",
            pool.creating,
            &[("image", image), ("state", "starting")],
        );
        gauge("waitlist", pool.waiting, &[("image", image)]);
    }

    /// Sets the gauge of retired pods not yet deleted, for every image.
    fn publish_retiring(&self) {
        let images = self.images();
        let retiring = self.retiring.lock().unwrap_or_else(PoisonError::into_inner);
        for image in images.keys() {
            let count = retiring.iter().filter(|pod| pod.image == *image).count();
            self.telemetry.gauge_set(
                "pods",
                count as f64,
                &[("image", image), ("state", "retiring")],
            );
        }
    }

    /// The settings of `image` when no route says otherwise: the pod-cache config file names
    /// tags, not the digests calls pin them to.
    fn unrouted(&self, image: &str) -> &Arc<Limits> {
        self.pod_cache
            .get(unpinned(image))
            .unwrap_or(&self.defaults)
    }

    /// The image's settings as `route` (or its absence) has them. Cheap when nothing changed:
    /// a comparison of the route's section with the last one. On a change, pods made with other
    /// template overrides, and idle pods beyond the pod count, are retired.
    pub fn settle(
        self: &Arc<Self>,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Result<Arc<Limits>, EvalError> {
        // Another executor's route (a delegating evaluator's) says nothing about pods.
        let route = route.filter(|route| route.executor == FunctionConfigExecutor::PodExecutor);
        let told_by = route.map(|route| &route.settings);
        let mut retired = Vec::new();
        let limits = {
            let mut images = self.images();
            let pool = images.entry(image.to_owned()).or_default();
            if let Some(limits) = &pool.limits
                && pool.told_by.as_ref() == told_by
            {
                return Ok(limits.clone());
            }
            let limits = match route {
                Some(route) => Arc::new(Limits::from_route(route, &self.defaults)?),
                None => self.unrouted(image).clone(),
            };
            pool.told_by = told_by.cloned();
            if pool.limits.as_deref() != Some(&*limits) {
                pool.pods.retain(|pod| {
                    let keep = pod.overrides_hash == limits.overrides_hash;
                    if !keep {
                        retired.push(pod.clone());
                    }
                    keep
                });
                while pool.pods.len() > limits.max_pods {
                    let Some(index) = pool.pods.iter().rposition(|pod| pod.load() == 0) else {
                        break;
                    };
                    retired.push(pool.pods.remove(index));
                }
                pool.limits = Some(limits.clone());
                self.publish(image, pool);
            }
            limits
        };
        if !retired.is_empty() {
            for pod in &retired {
                tracing::info!(pod = %pod.name, image, "retiring a function pod: the image's pod settings changed");
            }
            self.retire(retired);
        }
        Ok(limits)
    }

    /// Takes pods out of service; they are deleted once idle (now, or by a later scan).
    fn retire(self: &Arc<Self>, pods: Vec<Arc<PodHandle>>) {
        self.retiring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(pods);
        self.publish_retiring();
        tokio::spawn(self.clone().delete_idle_retired());
    }

    async fn delete_idle_retired(self: Arc<Self>) {
        let idle: Vec<Arc<PodHandle>> = {
            let mut retiring = self.retiring.lock().unwrap_or_else(PoisonError::into_inner);
            let (idle, busy) = retiring.drain(..).partition(|pod| pod.load() == 0);
            *retiring = busy;
            idle
        };
        if !idle.is_empty() {
            self.publish_retiring();
        }
        for pod in idle {
            tracing::info!(pod = %pod.name, image = %pod.image, "deleting a retired function pod");
            self.cluster.delete(&pod.name).await;
        }
    }

    fn images(&self) -> MutexGuard<'_, HashMap<String, ImagePool>> {
        self.images.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pod for `image`, starting one when needed; waits no longer than `until`.
    pub async fn acquire(
        self: &Arc<Self>,
        image: &str,
        limits: &Arc<Limits>,
        until: Option<Instant>,
    ) -> Result<Lease, EvalError> {
        let preferred = limits.preferred_load;
        let mut waiting: Option<Waiting<'_>> = None;
        let mut waited_for = u64::MAX;
        loop {
            let changed = self.changed.notified();
            {
                let mut images = self.images();
                let pool = images.entry(image.to_owned()).or_default();
                if let Some((attempt, error)) = &pool.failure
                    && *attempt >= waited_for
                    && pool.pods.is_empty()
                    && pool.creating == 0
                {
                    return Err(error.clone());
                }
                let best = pool.least_loaded();
                let total = pool.pods.len() + pool.creating;
                let beyond_preferred = best.as_ref().is_none_or(|pod| pod.load() >= preferred);
                // Calls beyond the pods' preferred load, this one included (a waiting call is
                // counted already); each pod being started will take `preferred` of them. So a
                // burst starts its pods at once, as Porch's pending pods with waitlists do.
                let overflow = pool.queued_beyond(preferred) + usize::from(waiting.is_none());
                if beyond_preferred
                    && overflow > pool.creating * preferred
                    && total < limits.max_pods
                {
                    pool.creating += 1;
                    pool.attempts += 1;
                    self.clone()
                        .start_pod(image.to_owned(), limits.clone(), pool.attempts, until);
                    self.publish(image, pool);
                }
                if let Some(pod) = best {
                    if pod.load() >= preferred
                        && pool.queued_beyond(preferred) >= self.settings.max_queued_calls
                    {
                        return Err(queue_full(image, self.settings.max_queued_calls));
                    }
                    pod.load.fetch_add(1, Ordering::SeqCst);
                    return Ok(Lease {
                        pod,
                        cold: waiting.is_some(),
                    });
                }
                if waiting.is_none() {
                    if pool.queued_beyond(preferred) >= self.settings.max_queued_calls {
                        return Err(queue_full(image, self.settings.max_queued_calls));
                    }
                    pool.waiting += 1;
                    waited_for = pool.attempts;
                    self.publish(image, pool);
                    drop(images);
                    self.telemetry
                        .counter_add("cold_starts", 1.0, &[("image", image)]);
                    waiting = Some(Waiting { pool: self, image });
                }
            }
            match until {
                Some(until) => {
                    if tokio::time::timeout_at(until.into(), changed)
                        .await
                        .is_err()
                    {
                        return Err(EvalError::new(
                            ErrorKind::DeadlineExceeded,
                            format!(
                                "function evaluation timed out for {}: no pod was ready before the deadline",
                                unpinned(image)
                            ),
                        ));
                    }
                }
                None => changed.await,
            }
        }
    }

    fn start_pod(
        self: Arc<Self>,
        image: String,
        limits: Arc<Limits>,
        attempt: u64,
        caller_deadline: Option<Instant>,
    ) {
        let limit = Instant::now() + self.settings.readiness_timeout;
        let until = caller_deadline.map_or(limit, |deadline| deadline.min(limit));
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome = self.create_pod(&image, &limits, until).await;
            self.telemetry.histogram_record(
                "pod_start_seconds",
                started.elapsed().as_secs_f64(),
                &[
                    ("image", &image),
                    ("outcome", if outcome.is_ok() { "ready" } else { "failed" }),
                ],
            );
            let mut outdated = None;
            {
                let mut images = self.images();
                let pool = images.entry(image.clone()).or_default();
                pool.creating -= 1;
                match outcome {
                    // The image's overrides changed while it started.
                    Ok(pod)
                        if pool
                            .limits
                            .as_ref()
                            .is_some_and(|now| now.overrides_hash != pod.overrides_hash) =>
                    {
                        outdated = Some(pod);
                    }
                    Ok(pod) => {
                        tracing::info!(pod = %pod.name, image, "function pod ready");
                        pool.pods.push(pod);
                    }
                    Err(error) => {
                        tracing::warn!(image, "cannot start a function pod: {}", error.message);
                        pool.failure = Some((attempt, error));
                    }
                }
                self.publish(&image, pool);
            }
            if let Some(pod) = outdated {
                tracing::info!(pod = %pod.name, image, "retiring a new function pod: the image's template overrides changed");
                self.retire(vec![pod]);
            }
            self.changed.notify_waiters();
        });
    }

    async fn create_pod(
        &self,
        image: &str,
        limits: &Limits,
        until: Instant,
    ) -> Result<Arc<PodHandle>, EvalError> {
        // Messages name the image as calls ask for it.
        let named = unpinned(image);
        let fail = |message: String| {
            EvalError::failed(format!(
                "unable to get the grpc client to the pod for {named}: {message}"
            ))
        };
        let private = self.settings.private_registries.as_ref();
        let docker_config = self
            .settings
            .docker_config()
            .map_err(|e| fail(e.to_string()))?;
        let metadata = self
            .registry
            .metadata(image, docker_config.as_ref())
            .await
            .map_err(fail)?;
        if let (Some(private), Some(docker_config)) = (private, &docker_config) {
            self.cluster
                .ensure_pull_secret(&private.secret_name, &docker_config.content)
                .await
                .map_err(fail)?;
        }
        let (base, version) = self
            .cluster
            .base_template(&self.settings.wrapper_server_image)
            .await
            .map_err(fail)?;
        let suffix: String = (0..5)
            .map(|_| char::from(b"bcdfghjklmnpqrstvwxz2456789"[rand::rng().random_range(0..27)]))
            .collect();
        let name = format!("{}-{suffix}", pod_stem(image, &metadata.digest));
        let pod = template::pod(
            &base,
            &PodRequest {
                name: &name,
                namespace: self.cluster.namespace(),
                image,
                entrypoint: &metadata.entrypoint,
                owner: &self.settings.owner,
                runner: self.cluster.runner(),
                template_version: &version,
                max_message_bytes: self.settings.max_message_bytes,
                wrapper_server_image: &self.settings.wrapper_server_image,
                image_pull_secret: private.map(|private| private.secret_name.as_str()),
                overrides: limits.overrides.as_ref(),
                overrides_hash: &limits.overrides_hash,
            },
        )
        .map_err(fail)?;
        self.starting().insert(name.clone());
        let ready = async {
            self.cluster.create(&pod).await?;
            match self.cluster.wait_ready(&name, until).await? {
                Ok(address) => Ok(self.connect(&name, &address, until).await),
                Err(late) => Ok(Err(late)),
            }
        }
        .await;
        self.starting().remove(&name);
        let (kind, message) = match ready {
            Ok(Ok(client)) => {
                return Ok(self.handle(&name, image, &limits.overrides_hash, client));
            }
            Ok(Err(late)) => (ErrorKind::DeadlineExceeded, late),
            Err(message) => (ErrorKind::Failed, message),
        };
        self.cluster.delete(&name).await;
        Err(EvalError::new(
            kind,
            format!("unable to get the grpc client to the pod for {named}: {message}"),
        ))
    }

    fn starting(&self) -> MutexGuard<'_, HashSet<String>> {
        self.starting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection to the pod's wrapper server, dialled until it is established (Porch waits
    /// for gRPC's READY likewise): a pod joins the pool only once it can take calls. `Err`:
    /// not established by `until`.
    async fn connect(
        &self,
        name: &str,
        address: &str,
        until: Instant,
    ) -> Result<FunctionEvaluatorClient<Channel>, String> {
        let target = format!("http://{address}:{WRAPPER_PORT}");
        let endpoint = Endpoint::from_shared(target.clone())
            .map_err(|e| format!("pod {name}: bad address {target}: {e}"))?
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
        loop {
            let failure = match tokio::time::timeout_at(until.into(), endpoint.connect()).await {
                Ok(Ok(channel)) => {
                    let limit = self.settings.max_message_bytes;
                    return Ok(FunctionEvaluatorClient::new(channel)
                        .max_decoding_message_size(limit)
                        .max_encoding_message_size(limit));
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => "no connection yet".to_owned(),
            };
            if Instant::now() + CONNECT_RETRY > until {
                return Err(format!(
                    "pod {name} is ready but its wrapper server at {target} took no connection in time: {failure}"
                ));
            }
            tokio::time::sleep(CONNECT_RETRY).await;
        }
    }

    fn handle(
        &self,
        name: &str,
        image: &str,
        overrides_hash: &str,
        client: FunctionEvaluatorClient<Channel>,
    ) -> Arc<PodHandle> {
        Arc::new(PodHandle {
            name: name.to_owned(),
            image: image.to_owned(),
            overrides_hash: overrides_hash.to_owned(),
            client,
            load: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Takes a pod out of service at once, so that no call is given it any more, and deletes
    /// it (with its service) in the background: a call retrying elsewhere does not wait for the
    /// API server, and what a failed deletion leaves behind the next scan deletes. Its
    /// connection closes when the last call using it ends.
    pub fn evict(self: &Arc<Self>, name: &str, reason: Eviction) {
        let removed = {
            let mut images = self.images();
            images.iter_mut().find_map(|(image, pool)| {
                let before = pool.pods.len();
                pool.pods.retain(|pod| pod.name != name);
                (pool.pods.len() != before).then(|| {
                    self.publish(image, pool);
                    image.clone()
                })
            })
        };
        if let Some(image) = removed {
            tracing::info!(pod = name, "function pod evicted");
            self.telemetry.counter_add(
                "evictions",
                1.0,
                &[("image", &image), ("reason", reason.label())],
            );
        }
        self.changed.notify_waiters();
        let pool = self.clone();
        let name = name.to_owned();
        tokio::spawn(async move { pool.cluster.delete(&name).await });
    }

    /// Adopts this runner's ready pods of the current template that accept a connection, and
    /// deletes its other pods; then reclaims the pods of runners that are gone. Pods made by
    /// an earlier Pod of the same name (another uid) are not adopted: a garbage collector may
    /// be deleting them. Which template overrides an image has is only known from its first
    /// call or warm-up (a FunctionConfig may give it some): pods made with any overrides are
    /// adopted, up to the image's pod count for no route, and those whose overrides or count
    /// turn out wrong are retired then.
    pub async fn adopt(&self) -> Result<(), String> {
        let (_, version) = self
            .cluster
            .base_template(&self.settings.wrapper_server_image)
            .await?;
        let pods = self.cluster.function_pods().await?;
        let runner_uid = self.cluster.runner().map(|runner| runner.uid.as_str());
        for pod in pods.iter().filter(|pod| self.is_own(pod)) {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let image = annotations.get(IMAGE_ANNOTATION).cloned();
            let overrides_hash = annotations
                .get(OVERRIDES_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            let current = annotations.get(TEMPLATE_VERSION_ANNOTATION) == Some(&version)
                && annotations.get(OWNER_UID_ANNOTATION).map(String::as_str) == runner_uid;
            let client = match self.cluster.ready_address(pod).await {
                Some(address) if current => self
                    .connect(&name, &address, Instant::now() + ADOPT_CONNECT_TIMEOUT)
                    .await
                    .inspect_err(|error| tracing::info!(pod = %name, "not adopted: {error}"))
                    .ok(),
                _ => None,
            };
            match (image, client) {
                (Some(image), Some(client))
                    if self.pods_of(&image) < self.unrouted(&image).max_pods =>
                {
                    tracing::info!(pod = %name, image, "adopted function pod");
                    let handle = self.handle(&name, &image, &overrides_hash, client);
                    let mut images = self.images();
                    let pool = images.entry(image.clone()).or_default();
                    pool.pods.push(handle);
                    self.publish(&image, pool);
                }
                _ => {
                    tracing::info!(pod = %name, "deleting a function pod this runner cannot use");
                    self.cluster.delete(&name).await;
                }
            }
        }
        self.reclaim_orphans(&pods).await;
        Ok(())
    }

    fn is_own(&self, pod: &Pod) -> bool {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(OWNER_LABEL))
            == Some(&self.settings.owner)
    }

    /// Deletes other runners' pods whose runner Pod is gone (rolled out, evicted, deleted): a
    /// garbage collector would not when the runners run in another namespace than their pods.
    /// A runner's pods stay as long as its Pod is there, or cannot be proven gone; pods naming
    /// no runner Pod are left alone.
    async fn reclaim_orphans(&self, pods: &[Pod]) {
        let mut by_runner: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for pod in pods {
            let (Some(name), Some(annotations)) = (&pod.metadata.name, &pod.metadata.annotations)
            else {
                continue;
            };
            if let (Some(runner), Some(uid)) = (
                annotations.get(OWNER_POD_ANNOTATION),
                annotations.get(OWNER_UID_ANNOTATION),
            ) && !self.is_own(pod)
                && pod.metadata.deletion_timestamp.is_none()
            {
                by_runner
                    .entry((runner.as_str(), uid.as_str()))
                    .or_default()
                    .push(name.as_str());
            }
        }
        for ((runner, uid), names) in by_runner {
            if self.cluster.runner_gone(runner, uid).await {
                for name in names {
                    tracing::info!(
                        pod = name,
                        runner,
                        "reclaiming a function pod whose runner is gone"
                    );
                    self.cluster.delete(name).await;
                }
            }
        }
    }

    fn pods_of(&self, image: &str) -> usize {
        self.images().get(image).map_or(0, |pool| pool.pods.len())
    }

    /// Starts one pod for `image` with `route`'s settings (or the image's own without one) if
    /// it has none, in the background; failures are logged.
    pub fn warm_up(self: &Arc<Self>, image: &str, route: Option<&FunctionConfigRoute>) {
        let limits = match self.settle(image, route) {
            Ok(limits) => limits,
            Err(error) => {
                tracing::warn!(image, "cannot warm up: {}", error.message);
                return;
            }
        };
        let mut images = self.images();
        let pool = images.entry(image.to_owned()).or_default();
        if pool.pods.is_empty() && pool.creating == 0 {
            tracing::info!(image, "warming up a function pod");
            pool.creating += 1;
            pool.attempts += 1;
            self.clone()
                .start_pod(image.to_owned(), limits, pool.attempts, None);
            self.publish(image, pool);
        }
    }

    /// Every `scan_interval`: deletes idle pods past their TTL, forgets pods that are gone or
    /// failed, and deletes this runner's pods that nothing uses.
    pub async fn scan(self: &Arc<Self>) {
        self.clone().delete_idle_retired().await;
        let idle: Vec<String> = {
            let images = self.images();
            images
                .iter()
                .flat_map(|(image, pool)| {
                    let ttl = pool.limits.as_ref().unwrap_or(self.unrouted(image)).ttl;
                    pool.pods.iter().filter(move |pod| {
                        pod.load() == 0
                            && pod
                                .last_used
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .elapsed()
                                > ttl
                    })
                })
                .map(|pod| pod.name.clone())
                .collect()
        };
        for name in idle {
            tracing::info!(pod = %name, "function pod idle past its TTL");
            self.evict(&name, Eviction::Idle);
        }
        let Ok(pods) = self.cluster.function_pods().await else {
            return;
        };
        self.reclaim_orphans(&pods).await;
        let live: HashMap<String, bool> = pods
            .iter()
            .filter(|pod| self.is_own(pod))
            .filter_map(|pod| {
                let name = pod.metadata.name.clone()?;
                let failed = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                    || pod.metadata.deletion_timestamp.is_some();
                Some((name, failed))
            })
            .collect();
        let known: Vec<(String, String)> = {
            let images = self.images();
            images
                .values()
                .flat_map(|pool| {
                    pool.pods
                        .iter()
                        .map(|pod| (pod.name.clone(), pod.image.clone()))
                })
                .collect()
        };
        let retiring: HashSet<String> = self
            .retiring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|pod| pod.name.clone())
            .collect();
        for (name, image) in &known {
            if live.get(name).is_none_or(|failed| *failed) {
                tracing::info!(pod = %name, image, "function pod gone or failed");
                self.evict(name, Eviction::Gone);
            }
        }
        let starting = self.starting().clone();
        for (name, _) in live {
            if !starting.contains(&name)
                && !retiring.contains(&name)
                && !known.iter().any(|(known, _)| *known == name)
            {
                self.cluster.delete(&name).await;
            }
        }
    }

    /// Runs [`Pool::scan`] forever.
    pub async fn scan_forever(self: Arc<Self>) {
        let mut ticker =
            tokio::time::interval(self.settings.scan_interval.max(Duration::from_millis(100)));
        ticker.tick().await;
        loop {
            ticker.tick().await;
            self.scan().await;
        }
    }
}

/// Why a pod was taken out of service (the `reason` label of `evictions`).
#[derive(Debug, Clone, Copy)]
pub enum Eviction {
    /// Idle past its TTL.
    Idle,
    /// Deleted or failed behind the runner's back.
    Gone,
    /// A call could not reach its wrapper server.
    Unreachable,
}

impl Eviction {
    fn label(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Gone => "gone",
            Self::Unreachable => "unreachable",
        }
    }
}

fn queue_full(image: &str, limit: usize) -> EvalError {
    EvalError::new(
        ErrorKind::ResourceExhausted,
        format!(
            "the queue for {} is full: {limit} calls are already waiting for its pods",
            unpinned(image)
        ),
    )
}
