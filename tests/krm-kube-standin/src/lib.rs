//! # krm-kube-standin — a TEST-ONLY stand-in for a Kubernetes API server and node
//!
//! This is **not Kubernetes** and is never shipped. It exists because no real API server can
//! be installed on the machines krm-runner is developed and tested on. It speaks the part of
//! the Kubernetes REST API that kube-rs and `kubectl get` use (discovery, CRUD, selectors,
//! watch, patches, graceful deletion, finalizers, CRDs stored generically, `Status` errors)
//! over plain HTTP on 127.0.0.1, and — optionally — runs each pod for real with podman,
//! giving every pod its own loopback address 127.0.0.N as its pod IP.
//!
//! What it does not do (see README.md): authentication/authorization, admission webhooks,
//! OpenAPI validation and pruning, managedFields, real server-side apply conflict detection,
//! protobuf, aggregated discovery, foreground and orphan deletion propagation, and anything
//! about nodes beyond one local podman.
//!
//! ```no_run
//! let dir = tempfile::tempdir().unwrap();
//! let standin = krm_kube_standin::StandIn::start(dir.path()).unwrap();
//! // Point kube-rs or kubectl at it:
//! println!("KUBECONFIG={}", standin.kubeconfig.display());
//! // Dropping `standin` stops the server (and every container of its pods).
//! ```

pub mod api;
pub mod cosign;
pub mod error;
pub mod fixture;
pub mod image;
pub mod node;
pub mod patch;
pub mod podman;
pub mod proxy;
pub mod registry;
pub mod resources;
pub mod selector;
pub mod store;
pub mod table;
pub mod util;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;
use store::Store;
use tokio::sync::oneshot;

/// Name used for the cluster, user and context in the generated kubeconfig.
pub const CONTEXT: &str = "krm-kube-standin";

/// How to start a stand-in.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Port on 127.0.0.1 (0 = any free port).
    pub port: u16,
    /// Run pods with podman (`None`: pods are stored but never run).
    pub node: Option<node::NodeOptions>,
}

/// A running stand-in. Dropping it stops the server.
pub struct StandIn {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// Listening address.
    pub addr: SocketAddr,
    /// Generated kubeconfig (no auth; current context `krm-kube-standin`, namespace `default`).
    pub kubeconfig: PathBuf,
    /// State directory given at start.
    pub state_dir: PathBuf,
    store: Arc<Store>,
    requests: Arc<AtomicU64>,
    shutdown: Option<oneshot::Sender<()>>,
    /// Whether the API server should listen (see [`StandIn::stop_api`]).
    api_up: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    node: Option<Arc<node::NodeAgent>>,
    record: Option<PathBuf>,
}

impl StandIn {
    /// Starts the API server and a node agent that runs pods with podman (private podman state
    /// under `<state_dir>/podman`). Fails when podman or runc is missing.
    pub fn start_with_node(state_dir: &Path) -> Result<Self> {
        Self::start_with(
            state_dir,
            Options {
                node: Some(node::NodeOptions::default()),
                ..Default::default()
            },
        )
    }

    /// Starts the API server (no node agent: pods are stored but never run) on a free port.
    pub fn start(state_dir: &Path) -> Result<Self> {
        Self::start_with(state_dir, Options::default())
    }

    /// Starts with options.
    pub fn start_with(state_dir: &Path, opts: Options) -> Result<Self> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating state dir {}", state_dir.display()))?;
        let store = Arc::new(Store::new());
        let agent = match &opts.node {
            Some(nopts) => {
                podman::available().map_err(anyhow::Error::msg)?;
                podman::Podman::sweep_abandoned();
                let pm = podman::Podman::new(&state_dir.join("podman"))?;
                Some(Arc::new(node::NodeAgent::new(
                    store.clone(),
                    pm,
                    state_dir,
                    nopts.clone(),
                )))
            }
            None => None,
        };
        let record = agent.as_ref().and_then(|a| a.podman.register(&a.instance));
        let agent2 = agent.clone();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<Result<SocketAddr>>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let st = store.clone();
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        let (api_up, serving) = tokio::sync::watch::channel(true);
        let port = opts.port;
        let thread = std::thread::Builder::new()
            .name("kube-standin".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.into()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = addr_tx
                                .send(Err(anyhow::Error::from(e).context("binding 127.0.0.1")));
                            return;
                        }
                    };
                    let addr = listener.local_addr().expect("local addr");
                    let logs: Option<api::LogFn> = agent2.clone().map(|a| {
                        let f: api::LogFn =
                            Arc::new(move |ns: String, name: String, c: Option<String>| {
                                let a = a.clone();
                                Box::pin(async move { a.logs(&ns, &name, c.as_deref()).await })
                            });
                        f
                    });
                    if let Some(a) = agent2 {
                        tokio::spawn(a.run());
                        tokio::spawn(proxy::run(st.clone()));
                    }
                    let app = Arc::new(api::App {
                        store: st,
                        addr,
                        logs,
                        requests: counted,
                    });
                    let _ = addr_tx.send(Ok(addr));
                    tokio::select! {
                        _ = serve(listener, api::router(app), serving) => {}
                        _ = shutdown_rx => {}
                    }
                });
                rt.shutdown_timeout(std::time::Duration::from_secs(2));
            })?;
        let addr = addr_rx
            .recv()
            .context("stand-in thread died before listening")??;
        let base_url = format!("http://{addr}");
        let kubeconfig = state_dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            serde_json::to_vec_pretty(&kubeconfig_json(&base_url))?,
        )?;
        Ok(Self {
            base_url,
            addr,
            kubeconfig,
            state_dir: state_dir.to_path_buf(),
            store,
            requests,
            shutdown: Some(shutdown_tx),
            api_up,
            thread: Some(thread),
            node: agent,
            record,
        })
    }

    /// The node agent, when pods run with podman.
    pub fn node(&self) -> Option<&Arc<node::NodeAgent>> {
        self.node.as_ref()
    }

    /// How many API requests the server has received (every kind: discovery, watches, ...),
    /// for tests and benchmarks that count what a client asks.
    pub fn api_requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes the API server down as a restarting kube-apiserver is: its port refuses
    /// connections and every open connection (watches included) is cut. The objects (etcd's
    /// part) and the node keep going. Returns once the port is closed.
    pub fn stop_api(&self) {
        self.api_up.send_replace(false);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(self.addr).is_ok() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Brings the API server back on the same address after [`StandIn::stop_api`]; returns once
    /// it accepts connections.
    pub fn start_api(&self) {
        self.api_up.send_replace(true);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(self.addr).is_err() && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Direct access to the object store (for assertions that bypass HTTP).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The runtime is gone, so no pod worker can start anything any more: remove every
        // container this stand-in created (twice, in case a cancelled `podman run` was still
        // completing the first time).
        if let Some(agent) = self.node.take() {
            agent.remove_all_blocking();
            std::thread::sleep(std::time::Duration::from_millis(300));
            agent.remove_all_blocking();
        }
        if let Some(r) = self.record.take() {
            podman::Podman::unregister(&r);
        }
    }
}

/// Serves HTTP/1.1 on `listener` while `serving` says so; when it turns false, the port is
/// closed and every connection dropped, and when it turns true again, the same address is
/// bound anew. Each connection is a task of this one, so that none outlives an outage.
async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut serving: tokio::sync::watch::Receiver<bool>,
) {
    let addr = listener.local_addr().expect("local addr");
    let mut listener = Some(listener);
    loop {
        let Some(open) = listener.take() else {
            if serving.wait_for(|up| *up).await.is_err() {
                return;
            }
            match tokio::net::TcpListener::bind(addr).await {
                Ok(open) => listener = Some(open),
                Err(e) => {
                    tracing::warn!("rebinding {addr}: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
            continue;
        };
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = open.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let service = hyper_util::service::TowerToHyperService::new(router.clone());
                    connections.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
                Some(_) = connections.join_next() => {}
                changed = serving.wait_for(|up| !*up) => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
            }
        }
        // Dropping the listener and the tasks closes the port and cuts every connection.
    }
}

/// The kubeconfig document for a server URL (JSON, which is valid YAML for every reader).
pub fn kubeconfig_json(server: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
        "preferences": {},
    })
}
