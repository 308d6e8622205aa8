//! A local OCI registry for tests: Debian's `docker-registry` (distribution 2.8) serving plain
//! HTTP on 127.0.0.1:<free port>, storage in a directory. Stopped when dropped.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A running local registry.
pub struct LocalRegistry {
    /// `127.0.0.1:PORT`, the host part of image references (`127.0.0.1:PORT/name:tag`).
    pub host: String,
    /// Listening address.
    pub addr: SocketAddr,
    /// Storage and config directory.
    pub dir: PathBuf,
    child: Child,
}

/// Whether `docker-registry` is installed.
pub fn available() -> Result<(), String> {
    which("docker-registry")
        .map(|_| ())
        .ok_or_else(|| "not installed: docker-registry".to_string())
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `GET path` over plain HTTP/1.0 on a loopback address; returns the status code and body.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>)> {
    http_get_accept(addr, path, "*/*", timeout)
}

/// [`http_get`] with an `Accept` header.
pub fn http_get_accept(
    addr: SocketAddr,
    path: &str,
    accept: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP response")?;
    let body_at = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .unwrap_or(buf.len());
    Ok((code, buf[body_at..].to_vec()))
}

impl LocalRegistry {
    /// Starts `docker-registry` with a five-line config in `dir`, waiting (at most 20 s) until
    /// `/v2/` answers.
    pub fn start(dir: &Path) -> Result<Self> {
        available().map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(dir.join("storage"))?;
        let mut last_err = None;
        for _ in 0..5 {
            let port = free_port()?;
            let config = dir.join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                    dir.join("storage").display()
                ),
            )?;
            let log = std::fs::File::create(dir.join("registry.log"))?;
            let child = std::process::Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("starting docker-registry")?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut reg = Self {
                host: format!("127.0.0.1:{port}"),
                addr,
                dir: dir.to_path_buf(),
                child,
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok((200, _)) = http_get(addr, "/v2/", Duration::from_secs(2)) {
                    return Ok(reg);
                }
                if let Ok(Some(status)) = reg.child.try_wait() {
                    last_err = Some(anyhow::anyhow!(
                        "docker-registry exited ({status}): {}",
                        std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
                    ));
                    break;
                }
                if Instant::now() > deadline {
                    bail!("docker-registry did not answer on {addr} within 20 s");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("docker-registry did not start")))
    }

    /// Whether the registry holds `name:tag` (its manifest answers 200).
    pub fn has(&self, name: &str, tag: &str) -> bool {
        matches!(
            http_get_accept(
                self.addr,
                &format!("/v2/{name}/manifests/{tag}"),
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json",
                Duration::from_secs(5)
            ),
            Ok((200, _))
        )
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
