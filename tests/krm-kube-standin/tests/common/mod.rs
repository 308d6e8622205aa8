//! Shared helpers for the stand-in's own tests.
#![allow(dead_code)]

use krm_kube_standin::StandIn;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::time::Duration;

/// A stand-in in a fresh temporary state dir (kept alive with it).
pub struct Env {
    pub standin: StandIn,
    pub dir: tempfile::TempDir,
}

pub fn start() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let standin = StandIn::start(dir.path()).expect("stand-in starts");
    Env { standin, dir }
}

/// A kube-rs client built the way the plugin will build one: from the generated kubeconfig.
pub async fn client(standin: &StandIn) -> Client {
    let kc = Kubeconfig::read_from(&standin.kubeconfig).expect("kubeconfig parses");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts the kubeconfig");
    Client::try_from(cfg).expect("client")
}

/// `(code, reason)` of a kube-rs API error.
pub fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `f` every 50 ms until it returns `Some`, failing after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a namespace through the API.
pub async fn namespace(client: &Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    api.create(&Default::default(), &ns)
        .await
        .expect("namespace created");
}
