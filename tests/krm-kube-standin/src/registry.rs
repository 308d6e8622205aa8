//! A local OCI registry for tests: Debian's `docker-registry` (distribution 2.8) serving plain
//! HTTP on 127.0.0.1:<free port>, storage in a directory, optionally requiring a login
//! (htpasswd with a bcrypt hash, as a private registry would) or serving HTTPS with a
//! certificate from a CA of its own. Stopped when dropped.

use anyhow::{Context, Result, bail};
use base64::Engine as _;
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
    /// The user and password every request needs, when it requires a login.
    pub login: Option<(String, String)>,
    /// The PEM CA its certificate comes from, when it serves HTTPS.
    pub ca_file: Option<PathBuf>,
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
    http_get_as(addr, path, accept, None, timeout)
}

/// [`http_get_accept`] with HTTP basic authentication when `login` is given.
fn http_get_as(
    addr: SocketAddr,
    path: &str,
    accept: &str,
    login: Option<&(String, String)>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>)> {
    let answer = request(
        addr,
        "GET",
        path,
        &[("Accept", accept)],
        b"",
        login,
        timeout,
    )?;
    Ok((answer.status, answer.body))
}

/// An HTTP answer: the status, the headers (lowercase names) and the body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }
}

/// One plain HTTP/1.0 request on a loopback address, with basic authentication when `login`
/// is given.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    login: Option<&(String, String)>,
    timeout: Duration,
) -> Result<Answer> {
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some((user, password)) = login {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        head.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..split]);
    let mut lines = text.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP response")?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let body = buf.get(split + 4..).unwrap_or_default().to_vec();
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// `sha256:<hex>` of `bytes`: the digest a registry files them under.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// The media type of an OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The media type of an OCI image index (a manifest list).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The media type of a Docker image manifest (schema 2).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The media type of a Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// One layer of a manifest [`LocalRegistry::push_manifest`] makes.
pub struct Layer<'a> {
    pub media_type: &'a str,
    pub bytes: &'a [u8],
    /// The descriptor's annotations (a JSON object, or null for none).
    pub annotations: serde_json::Value,
}

impl LocalRegistry {
    /// Starts `docker-registry` with a five-line config in `dir`, waiting (at most 20 s) until
    /// `/v2/` answers.
    pub fn start(dir: &Path) -> Result<Self> {
        Self::start_with(dir, None, false)
    }

    /// [`LocalRegistry::start`], requiring `user` and `password` for every request (htpasswd
    /// file with a bcrypt hash, the only kind docker-registry accepts).
    pub fn start_with_login(dir: &Path, user: &str, password: &str) -> Result<Self> {
        Self::start_with(dir, Some((user.to_owned(), password.to_owned())), false)
    }

    /// [`LocalRegistry::start`] serving HTTPS only, with a certificate for 127.0.0.1 from a
    /// CA made for it (`ca_file`), which no system trusts.
    pub fn start_with_tls(dir: &Path) -> Result<Self> {
        Self::start_with(dir, None, true)
    }

    fn start_with(dir: &Path, login: Option<(String, String)>, tls: bool) -> Result<Self> {
        available().map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(dir.join("storage"))?;
        let (tls_config, ca_file) = if tls {
            let files = write_certificates(&dir.join("tls"))?;
            let config = format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                files.certificate.display(),
                files.key.display()
            );
            (config, Some(files.ca))
        } else {
            (String::new(), None)
        };
        let auth = match &login {
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 5).context("bcrypt")?;
                let htpasswd = dir.join("htpasswd");
                std::fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
                format!(
                    "auth:\n  htpasswd:\n    realm: krm-standin\n    path: {}\n",
                    htpasswd.display()
                )
            }
            None => String::new(),
        };
        let mut last_err = None;
        for _ in 0..5 {
            let port = free_port()?;
            std::fs::write(
                dir.join("config.yml"),
                format!(
                    "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{tls_config}{auth}",
                    dir.join("storage").display()
                ),
            )?;
            let mut reg = Self {
                host: format!("127.0.0.1:{port}"),
                addr: ([127, 0, 0, 1], port).into(),
                dir: dir.to_path_buf(),
                login: login.clone(),
                ca_file: ca_file.clone(),
                child: spawn(dir)?,
            };
            match reg.wait_until_serving()? {
                None => return Ok(reg),
                // Most likely the port was taken meanwhile: another one.
                Some(exited) => last_err = Some(exited),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("docker-registry did not start")))
    }

    /// Waits (at most 20 s) until `/v2/` answers. `Ok(Some(_))`: the process exited first.
    fn wait_until_serving(&mut self) -> Result<Option<anyhow::Error>> {
        let tls = self.ca_file.is_some();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match http_get_as(
                self.addr,
                "/v2/",
                "*/*",
                self.login.as_ref(),
                Duration::from_secs(2),
            ) {
                Ok((200, _)) => return Ok(None),
                // Go's answer to plain HTTP on its HTTPS port: it is up.
                Ok((400, body))
                    if tls
                        && body.starts_with(b"Client sent an HTTP request to an HTTPS server") =>
                {
                    return Ok(None);
                }
                _ => {}
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Ok(Some(anyhow::anyhow!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
                )));
            }
            if Instant::now() > deadline {
                bail!(
                    "docker-registry did not answer on {} within 20 s",
                    self.addr
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the registry, as an outage would: its port refuses connections until
    /// [`LocalRegistry::restart`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the registry again after [`LocalRegistry::stop`]: same port, storage and login.
    pub fn restart(&mut self) -> Result<()> {
        self.child = spawn(&self.dir)?;
        match self.wait_until_serving()? {
            None => Ok(()),
            Some(exited) => Err(exited),
        }
    }

    /// Whether the registry holds `name:tag` (its manifest answers 200).
    pub fn has(&self, name: &str, tag: &str) -> bool {
        matches!(
            http_get_as(
                self.addr,
                &format!("/v2/{name}/manifests/{tag}"),
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json",
                self.login.as_ref(),
                Duration::from_secs(5)
            ),
            Ok((200, _))
        )
    }

    /// The manifest digest `reference` (`<host>/<name>:<tag>` of this registry) names now;
    /// `None` when the registry has no such manifest.
    pub fn digest_of(&self, reference: &str) -> Option<String> {
        let (name, tag) = reference
            .strip_prefix(&format!("{}/", self.host))?
            .rsplit_once(':')?;
        match http_get_as(
            self.addr,
            &format!("/v2/{name}/manifests/{tag}"),
            "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
            self.login.as_ref(),
            Duration::from_secs(5),
        ) {
            Ok((200, manifest)) => Some(sha256_digest(&manifest)),
            _ => None,
        }
    }

    /// How many requests it has answered whose path contains `fragment` (from its access
    /// log, which it writes as it answers; `""` counts every request).
    pub fn requests(&self, fragment: &str) -> usize {
        std::fs::read_to_string(self.dir.join("registry.log"))
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("response completed"))
            .filter_map(|line| line.split(" http.request.uri=").nth(1))
            // Logrus quotes a value only when it holds characters beyond letters, digits and
            // `-._/@^+` (a query, say).
            .filter_map(|field| match field.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next(),
                None => field.split(' ').next(),
            })
            .filter(|uri| uri.contains(fragment))
            .count()
    }

    /// Uploads `bytes` as a blob of `repository` (a monolithic upload, with its login); its
    /// digest.
    pub fn push_blob(&self, repository: &str, bytes: &[u8]) -> Result<String> {
        let digest = sha256_digest(bytes);
        let timeout = Duration::from_secs(30);
        let started = request(
            self.addr,
            "POST",
            &format!("/v2/{repository}/blobs/uploads/"),
            &[],
            b"",
            self.login.as_ref(),
            timeout,
        )?;
        if started.status != 202 {
            bail!(
                "starting an upload to {repository}: {} {}",
                started.status,
                String::from_utf8_lossy(&started.body)
            );
        }
        let location = started
            .header("location")
            .context("an upload without a location")?;
        let path = location
            .split_once(&self.host)
            .map_or(location, |(_, path)| path);
        let separator = if path.contains('?') { '&' } else { '?' };
        let put = request(
            self.addr,
            "PUT",
            &format!("{path}{separator}digest={digest}"),
            &[("Content-Type", "application/octet-stream")],
            bytes,
            self.login.as_ref(),
            timeout,
        )?;
        if put.status != 201 {
            bail!(
                "uploading {digest} to {repository}: {} {}",
                put.status,
                String::from_utf8_lossy(&put.body)
            );
        }
        Ok(digest)
    }

    /// Puts `manifest` (of `media_type`) at `repository:reference`; its digest.
    pub fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        manifest: &[u8],
    ) -> Result<String> {
        let put = request(
            self.addr,
            "PUT",
            &format!("/v2/{repository}/manifests/{reference}"),
            &[("Content-Type", media_type)],
            manifest,
            self.login.as_ref(),
            Duration::from_secs(30),
        )?;
        if put.status != 201 {
            bail!(
                "putting the manifest {repository}:{reference}: {} {}",
                put.status,
                String::from_utf8_lossy(&put.body)
            );
        }
        Ok(sha256_digest(manifest))
    }

    /// Pushes an OCI image manifest of `layers` (and a small config) as `repository:tag`;
    /// its digest.
    pub fn push_manifest(&self, repository: &str, tag: &str, layers: &[Layer]) -> Result<String> {
        let config = br#"{"architecture":"amd64","os":"linux","config":{}}"#;
        let config_digest = self.push_blob(repository, config)?;
        let mut descriptors = Vec::new();
        for layer in layers {
            let digest = self.push_blob(repository, layer.bytes)?;
            descriptors.push(serde_json::json!({
                "mediaType": layer.media_type,
                "digest": digest,
                "size": layer.bytes.len(),
                "annotations": layer.annotations,
            }));
        }
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": descriptors,
        }))?;
        self.put_manifest(repository, tag, OCI_MANIFEST, &manifest)
    }

    /// Puts an OCI image index (a manifest list) of `repository`'s manifests `digests`, each
    /// for linux/amd64, at `repository:tag`; its digest.
    pub fn push_index(&self, repository: &str, tag: &str, digests: &[&str]) -> Result<String> {
        let mut manifests = Vec::new();
        for digest in digests {
            let (status, manifest) = http_get_as(
                self.addr,
                &format!("/v2/{repository}/manifests/{digest}"),
                OCI_MANIFEST,
                self.login.as_ref(),
                Duration::from_secs(30),
            )?;
            if status != 200 {
                bail!("{repository}@{digest}: {status}");
            }
            manifests.push(serde_json::json!({
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": manifest.len(),
                "platform": {"architecture": "amd64", "os": "linux"},
            }));
        }
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": manifests,
        }))?;
        self.put_manifest(repository, tag, OCI_INDEX, &index)
    }

    /// Pushes `module` as kpt pushes a WebAssembly function (`kpt alpha wasm push`): a gzipped
    /// tar of the one file `file_name` as the layer of a Docker image manifest, named by a
    /// Docker manifest list for the platform `js/wasm`, at `repository:tag`; the list's digest.
    pub fn push_kpt_wasm(
        &self,
        repository: &str,
        tag: &str,
        file_name: &str,
        module: &[u8],
    ) -> Result<String> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header.set_size(module.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, file_name, module)?;
        let tar = tar.into_inner()?;
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gzip.write_all(&tar)?;
        let layer = gzip.finish()?;
        let layer_digest = self.push_blob(repository, &layer)?;
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&tar)]},
        }))?;
        let config_digest = self.push_blob(repository, &config)?;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        }))?;
        let manifest_digest = sha256_digest(&manifest);
        self.put_manifest(repository, &manifest_digest, DOCKER_MANIFEST, &manifest)?;
        let list = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_LIST,
            "manifests": [{
                "mediaType": DOCKER_MANIFEST,
                "digest": manifest_digest,
                "size": manifest.len(),
                "platform": {"architecture": "wasm", "os": "js"},
            }],
        }))?;
        self.put_manifest(repository, tag, DOCKER_LIST, &list)
    }

    /// Pushes an image whose one layer holds `content` as `repository:tag`; its digest. Not
    /// runnable: for tests of what names, resolves and signs images.
    pub fn push_image(&self, repository: &str, tag: &str, content: &str) -> Result<String> {
        self.push_manifest(
            repository,
            tag,
            &[Layer {
                media_type: "application/vnd.oci.image.layer.v1.tar",
                bytes: content.as_bytes(),
                annotations: serde_json::json!({}),
            }],
        )
    }

    /// Answers `GET /v2/` without credentials with 401 (it requires a login).
    pub fn refuses_anonymous(&self) -> bool {
        matches!(
            http_get(self.addr, "/v2/", Duration::from_secs(5)),
            Ok((401, _))
        )
    }
}

/// `docker-registry serve <dir>/config.yml`, logging to `<dir>/registry.log`.
fn spawn(dir: &Path) -> Result<Child> {
    let log = std::fs::File::create(dir.join("registry.log"))?;
    std::process::Command::new("docker-registry")
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting docker-registry")
}

/// The PEM files of a registry served over HTTPS.
struct Certificates {
    ca: PathBuf,
    certificate: PathBuf,
    key: PathBuf,
}

/// A CA, and a certificate for `127.0.0.1` and `localhost` signed by it, in `dir`.
fn write_certificates(dir: &Path) -> Result<Certificates> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "krm-kube-standin test CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    let certificate = params.signed_by(&key, &Issuer::new(ca_params, ca_key))?;
    let files = Certificates {
        ca: dir.join("ca.crt"),
        certificate: dir.join("registry.crt"),
        key: dir.join("registry.key"),
    };
    std::fs::write(&files.ca, ca.pem())?;
    std::fs::write(&files.certificate, certificate.pem())?;
    std::fs::write(&files.key, key.serialize_pem())?;
    Ok(files)
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
