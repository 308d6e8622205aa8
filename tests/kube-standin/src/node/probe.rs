//! Readiness probes: exec through `podman exec`, tcpSocket, httpGet (grpc as a TCP connect).

use super::*;

impl NodeAgent {
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
