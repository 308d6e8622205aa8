//! Readiness probes: exec through `podman exec`, tcpSocket, httpGet (grpc as a TCP connect).

use super::{Ctr, NodeAgent};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a container's readiness probe has found so far.
#[derive(Debug, Clone, Default)]
pub(super) struct Probe {
    pub(super) ready: bool,
    pub(super) successes: u32,
    pub(super) failures: u32,
    pub(super) last: Option<Instant>,
}

impl NodeAgent {
    /// Probes a running container when its readiness probe is due and moves its readiness by
    /// the probe's success and failure thresholds; a container that is not running is not ready.
    pub(super) async fn update_readiness(&self, c: &mut Ctr, ip: &str) {
        let running = c.state.get("running").is_some();
        if !running {
            c.probe.ready = false;
            return;
        }
        let Some(probe) = c.spec.get("readinessProbe").cloned() else {
            c.probe.ready = true;
            return;
        };
        let delay = probe["initialDelaySeconds"].as_u64().unwrap_or(0);
        if c.started
            .is_some_and(|s| s.elapsed() < Duration::from_secs(delay))
        {
            return;
        }
        let mut period = Duration::from_secs(probe["periodSeconds"].as_u64().unwrap_or(10).max(1));
        if let Some(cap) = self.opts.max_probe_period {
            period = period.min(cap);
        }
        if c.probe.last.is_some_and(|t| t.elapsed() < period) {
            return;
        }
        c.probe.last = Some(Instant::now());
        let ok = self.probe(&c.cname, &c.spec, &probe, ip).await;
        if ok {
            c.probe.successes += 1;
            c.probe.failures = 0;
            if c.probe.successes >= probe["successThreshold"].as_u64().unwrap_or(1) as u32 {
                c.probe.ready = true;
            }
        } else {
            c.probe.failures += 1;
            c.probe.successes = 0;
            if !c.probe.ready
                || c.probe.failures >= probe["failureThreshold"].as_u64().unwrap_or(3) as u32
            {
                c.probe.ready = false;
            }
        }
    }

    pub(super) async fn probe(&self, cname: &str, c: &Value, probe: &Value, ip: &str) -> bool {
        let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(3));
        let port_of = |p: &Value| -> Option<u16> {
            if let Some(n) = p.as_u64() {
                return u16::try_from(n).ok();
            }
            let name = p.as_str()?;
            c.get("ports")?
                .as_array()?
                .iter()
                .find(|cp| cp["name"] == name)?["containerPort"]
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
        };
        let addr =
            |port: u16| SocketAddr::new(ip.parse().unwrap_or(Ipv4Addr::LOCALHOST).into(), port);
        if let Some(cmd) = probe.pointer("/exec/command").and_then(Value::as_array) {
            let mut args = vec!["exec".to_string(), cname.to_string()];
            args.extend(cmd.iter().filter_map(|x| x.as_str().map(String::from)));
            return self.podman.run(&args, timeout).await.is_ok();
        }
        if let Some(p) = probe.pointer("/tcpSocket/port").and_then(port_of) {
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr(p)))
                .await
                .is_ok_and(|r| r.is_ok());
        }
        if let Some(p) = probe
            .pointer("/grpc/port")
            .and_then(|p| p.as_u64())
            .and_then(|n| u16::try_from(n).ok())
        {
            // Not a real gRPC health check: a TCP connect.
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr(p)))
                .await
                .is_ok_and(|r| r.is_ok());
        }
        if let Some(p) = probe.pointer("/httpGet/port").and_then(port_of) {
            let path = probe
                .pointer("/httpGet/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string();
            let fut = async move {
                let mut s = tokio::net::TcpStream::connect(addr(p)).await.ok()?;
                s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", addr(p)).as_bytes())
                    .await
                    .ok()?;
                let mut buf = vec![0u8; 64];
                let n = s.read(&mut buf).await.ok()?;
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                head.split_whitespace().nth(1)?.parse::<u16>().ok()
            };
            return matches!(tokio::time::timeout(timeout, fut).await, Ok(Some(code)) if (200..400).contains(&code));
        }
        false
    }
}
