//! A userspace stand-in for kube-proxy (runs with the node agent): for every Service with a
//! cluster IP in 127.0.1.0/24, it listens on `clusterIP:port` (TCP) and forwards each
//! connection to a ready endpoint of the Service (round robin), so that "connect by service IP"
//! works in tests. No endpoint: the connection is closed at once. Service DNS names are not
//! resolvable here.

use crate::store::Store;
use crate::util::meta_str;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::task::JoinHandle;

/// Key of one forwarded port: service uid, cluster IP, port.
type Key = (String, String, u16);

struct Listener {
    handle: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Runs until the runtime stops.
pub async fn run(store: Arc<Store>) {
    let mut rx = store.subscribe();
    let mut listeners: HashMap<Key, Listener> = HashMap::new();
    let svc_gr = (String::new(), "services".to_string());
    reconcile(&store, &mut listeners);
    loop {
        match rx.recv().await {
            Ok(ev) if ev.gr == svc_gr => reconcile(&store, &mut listeners),
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                reconcile(&store, &mut listeners)
            }
            Err(_) => return,
        }
    }
}

fn wanted(store: &Store) -> HashMap<Key, (String, String, Value)> {
    let mut out = HashMap::new();
    for svc in store.all(&(String::new(), "services".into())) {
        let ip = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !ip.starts_with("127.0.1.") {
            continue;
        }
        let uid = meta_str(&svc, "uid").unwrap_or("").to_string();
        let ns = meta_str(&svc, "namespace").unwrap_or("").to_string();
        let name = meta_str(&svc, "name").unwrap_or("").to_string();
        for p in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if p["protocol"].as_str().unwrap_or("TCP") != "TCP" {
                continue;
            }
            let Some(port) = p["port"].as_u64().and_then(|n| u16::try_from(n).ok()) else {
                continue;
            };
            out.insert(
                (uid.clone(), ip.to_string(), port),
                (ns.clone(), name.clone(), p.clone()),
            );
        }
    }
    out
}

fn reconcile(store: &Arc<Store>, listeners: &mut HashMap<Key, Listener>) {
    let want = wanted(store);
    listeners.retain(|k, _| want.contains_key(k));
    for (key, (ns, name, port)) in want {
        if listeners.contains_key(&key) {
            continue;
        }
        let addr: SocketAddr = match format!("{}:{}", key.1, key.2).parse() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let store = store.clone();
        let handle = tokio::spawn(async move {
            let l = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%addr, "service proxy cannot listen: {e}");
                    return;
                }
            };
            let rr = Arc::new(AtomicUsize::new(0));
            loop {
                let Ok((mut inbound, _)) = l.accept().await else {
                    continue;
                };
                let target = pick(&store, &ns, &name, &port, &rr);
                tokio::spawn(async move {
                    let Some(target) = target else { return };
                    if let Ok(mut out) = tokio::net::TcpStream::connect(target).await {
                        let _ = inbound.set_nodelay(true);
                        let _ = out.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        listeners.insert(key, Listener { handle });
    }
}

/// A ready endpoint for the service port, round robin.
fn pick(
    store: &Store,
    ns: &str,
    name: &str,
    svc_port: &Value,
    rr: &AtomicUsize,
) -> Option<SocketAddr> {
    let ep = store.get_gr(&(String::new(), "endpoints".into()), ns, name)?;
    let want_name = svc_port["name"].as_str().unwrap_or("");
    let mut targets = Vec::new();
    for subset in ep.get("subsets")?.as_array()? {
        let ports = subset.get("ports").and_then(Value::as_array);
        let port = ports.and_then(|ps| {
            ps.iter()
                .find(|p| p["name"].as_str().unwrap_or("") == want_name)
                .or_else(|| (ps.len() == 1).then(|| &ps[0]))
        })?;
        let port = port["port"].as_u64().and_then(|n| u16::try_from(n).ok())?;
        for a in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ip) = a["ip"].as_str().and_then(|i| i.parse().ok()) {
                targets.push(SocketAddr::new(ip, port));
            }
        }
    }
    if targets.is_empty() {
        return None;
    }
    Some(targets[rr.fetch_add(1, Ordering::Relaxed) % targets.len()])
}
