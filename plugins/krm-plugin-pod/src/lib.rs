//! `pod`: runs any function image in a warm pool of Kubernetes pods, each running the wrapper
//! server in front of the function (Porch's pod evaluator, with its defects fixed: unique pod
//! names, leases that cannot leak, pods matched by identity, owner labels so that several
//! runners can share a namespace, no Kubernetes request on the warm path).
//!
//! Per image, the pool follows the call's FunctionConfig `podExecutor` settings, else the
//! pod-cache config file's, else its own flags (see `limits.rs`).
//!
//! A tagged image runs pinned to its digest, checked again against the registry (see
//! `digest.rs`); the digest is the code identity the runner's result cache keys calls by.
//!
//! The plugin runs its own tokio runtime: plugins cannot use the runner's.

mod cluster;
mod config;
mod digest;
mod docker_config;
mod image;
mod limits;
mod pod_cache_config;
mod pool;
mod template;
mod versions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, ConfigError, ErrorKind, EvalError, EvalResponse,
    Evaluator, FunctionConfigRoute, Plugin, Probe, Resolution, TraceContext, export_plugin,
};
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use tonic::Code;

use cluster::Cluster;
pub use config::PodConfig;
use image::{Registry, digest_of, has_tag, pinned, resolve, unpinned};
use limits::Limits;
use pool::{Eviction, Pool};

/// Longest wait for a tag's first digest while the runner asks what a call would run: on
/// that bound the call is keyed by no digest (and its answer is not kept).
const IDENTITY_WAIT: Duration = Duration::from_secs(10);

pub struct PodEvaluator {
    pool: Arc<Pool>,
    runtime: tokio::runtime::Runtime,
}

impl Evaluator for PodEvaluator {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let mut image = resolve(image, &self.pool.settings.default_image_prefix);
        let route = context.route();
        let deadline = context.deadline();
        let cancelled = context.cancelled();
        let requested_tag = context.requested_tag();
        let trace = context.trace_context();
        let label = image.clone();
        self.runtime.block_on(async {
            let call = async {
                if let Some(tag) = requested_tag {
                    let resolution =
                        versions::resolve_tag(&self.pool, &image, &tag, route.as_ref()).await?;
                    context.report_resolved(&resolution.reference());
                    image = resolution.image;
                }
                let digest = digest::current(&self.pool, &image)
                    .await
                    .map_err(|message| {
                        EvalError::failed(format!(
                            "unable to get the grpc client to the pod for {image}: {message}"
                        ))
                    })?;
                let image = pinned(&image, &digest);
                let limits = self.pool.settle(&image, route.as_ref())?;
                let call = Call {
                    image: &image,
                    resource_list,
                    deadline,
                    trace: trace.as_ref(),
                };
                evaluate(&self.pool, &limits, call).await
            };
            tokio::select! {
                outcome = call => outcome,
                reason = cancelled => Err(reason.to_error(&label)),
            }
        })
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        let image = resolve(image, &self.pool.settings.default_image_prefix);
        Some(
            self.runtime
                .block_on(versions::resolve_tag(&self.pool, &image, tag, route)),
        )
    }

    /// Any image can run in a pod: calls never fall through from here.
    fn probe(&self, _image: &str, _route: Option<&FunctionConfigRoute>) -> Probe {
        Probe::Serves
    }

    fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        let image = resolve(image, &self.pool.settings.default_image_prefix);
        self.runtime
            .spawn(warm_up(self.pool.clone(), image, route.cloned()));
    }

    /// Never pure (an image may do anything): the digest the call will run, so that an
    /// operator may mark images cacheable (`cache.images`) and a tag moved to another digest
    /// misses. An image without a tag is unnamed: its call may carry a tag constraint, which
    /// only the call resolves.
    fn cache_identity(
        &self,
        image: &str,
        _route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let image = resolve(image, &self.pool.settings.default_image_prefix);
        if !has_tag(&image) && digest_of(&image).is_none() {
            return Some(CacheIdentity {
                unnamed: true,
                ..CacheIdentity::default()
            });
        }
        // The warm path (a known digest) stays off the plugin's runtime's scheduler.
        let known = {
            let _runtime = self.runtime.enter();
            digest::known(&self.pool, &image)
        };
        let digest = match known {
            Some(digest) => Ok(Ok(digest)),
            None => self.runtime.block_on(async {
                tokio::time::timeout(IDENTITY_WAIT, digest::current(&self.pool, &image)).await
            }),
        };
        match digest {
            Ok(Ok(digest)) => Some(CacheIdentity {
                pure: false,
                code: digest,
                unnamed: false,
            }),
            Ok(Err(problem)) => {
                tracing::debug!(image, "no digest to key the call by: {problem}");
                None
            }
            Err(_) => None,
        }
    }
}

/// Starts a pod for `image` pinned to its digest, as calls will ask for it.
async fn warm_up(pool: Arc<Pool>, image: String, route: Option<FunctionConfigRoute>) {
    match digest::current(&pool, &image).await {
        Ok(digest) => pool.warm_up(&pinned(&image, &digest), route.as_ref()),
        Err(problem) => tracing::warn!(image, "cannot warm up: {problem}"),
    }
}

/// One call as the wrapper server is asked it.
struct Call<'a> {
    image: &'a str,
    resource_list: &'a [u8],
    deadline: Option<Instant>,
    /// Sent as `traceparent`/`tracestate` metadata, so that the function joins the trace.
    trace: Option<&'a TraceContext>,
}

async fn evaluate(
    pool: &Arc<Pool>,
    limits: &Arc<Limits>,
    call: Call<'_>,
) -> Result<EvalResponse, EvalError> {
    let retries = pool.settings.max_grpc_retries;
    retrying(unpinned(call.image), retries, call.deadline, || {
        attempt(pool, limits, &call)
    })
    .await
}

/// What one attempt at a call came to.
enum Attempt {
    Answered(Result<EvalResponse, EvalError>),
    /// The pod could not be reached (see [`unreachable`]); it is out of the pool already.
    Unreachable {
        pod: String,
        status: tonic::Status,
    },
}

/// Makes `attempt` until one is answered. A pod that went away behind the runner's back
/// (deleted, evicted, killed mid-call) fails the connection: the call is tried again on another
/// pod, `retries` times at most (Porch's `--max-grpc-retries`) and only while the caller's
/// `deadline` has not passed. Functions are pure transformations, so a retry is safe.
async fn retrying<F, A>(
    image: &str,
    retries: usize,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<EvalResponse, EvalError>
where
    F: FnMut() -> A,
    A: Future<Output = Attempt>,
{
    let mut unreachable = 0;
    loop {
        let (pod, status) = match attempt().await {
            Attempt::Answered(answer) => return answer,
            Attempt::Unreachable { pod, status } => (pod, status),
        };
        unreachable += 1;
        let expired = deadline.is_some_and(|deadline| Instant::now() >= deadline);
        if unreachable > retries || expired {
            return Err(EvalError::new(
                ErrorKind::Unavailable,
                format!(
                    "unable to evaluate {image} with pod evaluator: its pods were unreachable {unreachable} times, last {pod}: {}",
                    status.message()
                ),
            ));
        }
        tracing::warn!(pod = %pod, image, attempt = unreachable, "function pod unreachable ({}); retrying on another pod", status.message());
    }
}

/// One attempt at `call` on a pod of the pool; an unreachable pod is evicted.
async fn attempt(pool: &Arc<Pool>, limits: &Arc<Limits>, call: &Call<'_>) -> Attempt {
    let Call {
        image,
        resource_list,
        deadline,
        trace,
    } = *call;
    let lease_span = pool.telemetry.start_span(trace, "pod.lease");
    let waiting_since = Instant::now();
    let lease = match pool.acquire(image, limits, deadline).await {
        Ok(lease) => lease,
        Err(error) => {
            lease_span.set_error(&error.message);
            return Attempt::Answered(Err(error));
        }
    };
    lease_span.set_attribute("krm.pod.name", lease.pod.name.as_str());
    lease_span.set_attribute("krm.pod.cold", lease.cold);
    lease_span.set_attribute(
        "krm.pod.wait_ms",
        u64::try_from(waiting_since.elapsed().as_millis()).unwrap_or(u64::MAX),
    );
    lease_span.end();
    // The wrapper server's span, and the function's, show under this one.
    let call_span = pool.telemetry.start_span(trace, "pod.call");
    call_span.set_attribute("krm.pod.name", lease.pod.name.as_str());
    let handed_on = call_span.trace_context();
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        resource_list: resource_list.to_vec(),
        // As the caller named it, as Porch sends it.
        image: unpinned(image).to_owned(),
        tag: String::new(),
    });
    if let Some(deadline) = deadline {
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
    }
    if let Some(trace) = handed_on.as_ref().or(trace) {
        let headers = [
            ("traceparent", &trace.traceparent),
            ("tracestate", &trace.tracestate),
        ];
        for (key, value) in headers.into_iter().filter(|(_, value)| !value.is_empty()) {
            if let Ok(value) = value.parse() {
                request.metadata_mut().insert(key, value);
            }
        }
    }
    let status = match lease.pod.client().evaluate_function(request).await {
        Ok(response) => {
            let response = response.into_inner();
            return Attempt::Answered(Ok(EvalResponse::new(response.resource_list, response.log)));
        }
        Err(status) if unreachable(&status) => status,
        Err(status) => {
            let error = from_wrapper(unpinned(image), &status);
            call_span.set_error(&error.message);
            return Attempt::Answered(Err(error));
        }
    };
    call_span.set_error(status.message());
    let pod = lease.pod.name.clone();
    drop(lease);
    pool.evict(&pod, Eviction::Unreachable);
    Attempt::Unreachable { pod, status }
}

/// Whether the call failed for want of a connection to the pod, not with the wrapper's
/// answer. grpc-go says UNAVAILABLE for both a refused and a broken connection; tonic reports
/// a connection broken mid-call as UNKNOWN or INTERNAL, carrying the transport error as its
/// source (an answer from the wrapper never carries one).
fn unreachable(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown | Code::Internal => status.source().is_some(),
        _ => false,
    }
}

/// The wrapper's status code is kept (a decline would make the chain run the function
/// elsewhere, so NOT_FOUND becomes a failure); the message gets Porch's prefix.
fn from_wrapper(image: &str, status: &tonic::Status) -> EvalError {
    let kind = match ErrorKind::from_grpc_code(status.code() as i32) {
        Some(ErrorKind::NotFound) | None => ErrorKind::Failed,
        Some(kind) => kind,
    };
    EvalError::new(
        kind,
        format!(
            "unable to evaluate {image} with pod evaluator: rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        ),
    )
}

pub struct PodPlugin;

impl Plugin for PodPlugin {
    const NAME: &'static str = "pod";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "runs any function image in a warm pool of Kubernetes pods";
    type Config = PodConfig;
    type Evaluator = PodEvaluator;

    fn build(config: PodConfig, context: &BuildContext) -> Result<PodEvaluator, ConfigError> {
        let settings =
            config.settings(context.max_message_bytes(), context.default_image_prefix())?;
        // The file's images match after the resolution calls get, as in Porch.
        let defaults = Limits::defaults(&settings);
        let pod_cache = settings
            .pod_cache
            .iter()
            .map(|(image, pod)| {
                let limits = Limits::from_pod_executor(pod, &defaults)
                    .map_err(|e| ConfigError::field("pod_cache_config", format!("{image}: {e}")))?;
                Ok((resolve(image, &settings.default_image_prefix), limits))
            })
            .collect::<Result<HashMap<_, _>, ConfigError>>()?;
        // The registry client (reqwest) needs a process-wide TLS provider: ring, as kube uses.
        // Fails only when one is already installed, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let registry = Registry::new(
            &config.plain_http_registries,
            settings.registry_ca.as_deref(),
        )
        .map_err(|e| ConfigError::field("tls_secret_path", e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("krm-pod")
            .enable_all()
            .build()
            .map_err(|e| ConfigError::new(format!("cannot start the pod plugin's runtime: {e}")))?;
        let validate_only = context.validate_only();
        let pool = runtime.block_on(async {
            let client = kube_client(config.kubeconfig.as_deref()).await?;
            let mut cluster = Cluster::new(client, &settings);
            // The downward API's names for the runner's own Pod.
            if let Ok(name) = std::env::var("POD_NAME") {
                let namespace = std::env::var("POD_NAMESPACE").ok();
                let uid = std::env::var("POD_UID").ok();
                if let Err(error) = cluster.identify(name, namespace, uid).await {
                    tracing::warn!(
                        "function pods will name no owner, so only this runner deletes them: {error}"
                    );
                }
            }
            let cluster = Arc::new(cluster);
            let pool = Pool::new(settings, cluster, registry, pod_cache, context.telemetry());
            if !validate_only {
                pool.adopt().await.map_err(|e| {
                    ConfigError::new(format!("adopting existing function pods: {e}"))
                })?;
            }
            Ok::<_, ConfigError>(pool)
        })?;
        if validate_only {
            return Ok(PodEvaluator { pool, runtime });
        }
        if config.warm_up_pod_cache {
            let listed = pool.settings.pod_cache.iter().map(|(image, _)| image);
            for image in config.warm_up.iter().chain(listed) {
                let image = resolve(image, &pool.settings.default_image_prefix);
                runtime.spawn(warm_up(pool.clone(), image, None));
            }
        }
        runtime.spawn(pool.clone().scan_forever());
        Ok(PodEvaluator { pool, runtime })
    }
}

async fn kube_client(kubeconfig: Option<&str>) -> Result<kube::Client, ConfigError> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ConfigError::field("kubeconfig", format!("{path}: {e}")))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| ConfigError::field("kubeconfig", format!("{path}: {e}")))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            ConfigError::new(format!(
                "no Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
            ))
        })?,
    };
    kube::Client::try_from(config)
        .map_err(|e| ConfigError::new(format!("cannot build the Kubernetes client: {e}")))
}

export_plugin!(PodPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::Cell;

    use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;

    /// A wrapper-server client whose pod is gone: nothing listens at its address any more.
    fn gone_pod() -> FunctionEvaluatorClient<tonic::transport::Channel> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect_lazy();
        FunctionEvaluatorClient::new(channel)
    }

    /// A real call to a pod that is gone, as an attempt sees it.
    async fn call_gone_pod(attempts: &Cell<usize>) -> Attempt {
        attempts.set(attempts.get() + 1);
        let request = EvaluateFunctionRequest {
            resource_list: b"items: []\n".to_vec(),
            image: "example.com/fn:v1".into(),
            tag: String::new(),
        };
        match gone_pod().evaluate_function(request).await {
            Err(status) if unreachable(&status) => Attempt::Unreachable {
                pod: format!("pod-{}", attempts.get()),
                status,
            },
            other => panic!("a call to a closed port is unreachable, not {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_unreachable_pod_is_retried_as_often_as_configured() {
        for retries in [0, 2, 5] {
            let attempts = Cell::new(0);
            let error = retrying("example.com/fn:v1", retries, None, || {
                call_gone_pod(&attempts)
            })
            .await
            .unwrap_err();
            assert_eq!(attempts.get(), retries + 1, "{retries} retries");
            assert_eq!(error.kind, ErrorKind::Unavailable, "{error:?}");
            assert!(
                error.message.contains(&format!(
                    "unreachable {} times, last pod-{}",
                    retries + 1,
                    retries + 1
                )),
                "{error:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_retry_that_reaches_a_pod_is_the_answer() {
        let attempts = &Cell::new(0);
        let answer = retrying("example.com/fn:v1", 2, None, move || async move {
            if attempts.get() < 2 {
                call_gone_pod(attempts).await
            } else {
                attempts.set(attempts.get() + 1);
                Attempt::Answered(Ok(EvalResponse::new(b"served".to_vec(), Vec::new())))
            }
        })
        .await
        .unwrap();
        assert_eq!(
            (attempts.get(), answer.resource_list),
            (3, b"served".to_vec())
        );
    }

    #[tokio::test]
    async fn no_retry_once_the_deadline_has_passed() {
        let attempts = Cell::new(0);
        let error = retrying("example.com/fn:v1", 2, Some(Instant::now()), || {
            call_gone_pod(&attempts)
        })
        .await
        .unwrap_err();
        assert_eq!(attempts.get(), 1, "{error:?}");
    }

    #[tokio::test]
    async fn a_pod_that_answers_with_an_error_is_not_retried() {
        let attempts = Cell::new(0);
        let error = retrying("example.com/fn:v1", 2, None, || {
            attempts.set(attempts.get() + 1);
            async { Attempt::Answered(Err(EvalError::failed("the function failed"))) }
        })
        .await
        .unwrap_err();
        assert_eq!(
            (attempts.get(), error.message.as_str()),
            (1, "the function failed")
        );
    }
}
