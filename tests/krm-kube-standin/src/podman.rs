//! podman, configured the way it works in this sandbox: as root, `--runtime=runc
//! --cgroup-manager=cgroupfs`, with `CONTAINERS_CONF` naming a containers.conf whose
//! `[containers]` table sets `default_ulimits = []` (the sandbox refuses to raise rlimits), and
//! a private `--root`, `--runroot` and `--tmpdir` (with file locks) so that stand-ins never share
//! state with each other or with the machine's own podman.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A private podman environment.
#[derive(Debug, Clone)]
pub struct Podman {
    /// Base directory (holds `containers.conf`, `root/`, `runroot/`, `tmp/`).
    pub dir: PathBuf,
}

/// Whether podman and runc are installed: `Err` explains what is missing.
pub fn available() -> Result<(), String> {
    let mut missing = Vec::new();
    for tool in ["podman", "runc"] {
        let ok = std::process::Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            missing.push(tool);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("not installed: {}", missing.join(", ")))
    }
}

impl Podman {
    /// Prepares the directory and its containers.conf.
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("resolving {}", dir.display()))?;
        std::fs::write(
            dir.join("containers.conf"),
            "# Written by krm-kube-standin (test-only).\n\
             [containers]\n\
             default_ulimits = []\n\
             \n\
             [engine]\n\
             lock_type = \"file\"\n",
        )?;
        Ok(Self { dir })
    }

    fn args(&self) -> Vec<String> {
        let d = |s: &str| self.dir.join(s).display().to_string();
        vec![
            "--root".into(),
            d("root"),
            "--runroot".into(),
            d("runroot"),
            "--tmpdir".into(),
            d("tmp"),
            "--runtime=runc".into(),
            "--cgroup-manager=cgroupfs".into(),
        ]
    }

    /// A blocking `podman` command with the private configuration.
    pub fn std_command(&self) -> std::process::Command {
        let mut c = std::process::Command::new("podman");
        c.args(self.args())
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"));
        c
    }

    /// An async `podman` command with the private configuration (killed when dropped).
    pub fn command(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("podman");
        c.args(self.args())
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Runs podman with `args`, failing with its stderr on a non-zero exit or after `timeout`.
    pub async fn run(&self, args: &[String], timeout: Duration) -> Result<String> {
        let mut c = self.command();
        c.args(args);
        let out = tokio::time::timeout(timeout, c.output())
            .await
            .with_context(|| format!("podman {} timed out after {timeout:?}", args.join(" ")))?
            .context("running podman")?;
        if !out.status.success() {
            bail!(
                "podman {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Blocking variant of [`Podman::run`] (for helpers used outside a runtime and for Drop).
    pub fn run_blocking(&self, args: &[&str]) -> Result<String> {
        let out = self
            .std_command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running podman")?;
        if !out.status.success() {
            bail!(
                "podman {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Removes (forcibly, no grace) every container carrying `label=value`.
    pub fn remove_labelled_blocking(&self, label: &str) {
        let Ok(ids) = self.run_blocking(&["ps", "-aq", "--filter", &format!("label={label}")])
        else {
            return;
        };
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if ids.is_empty() {
            return;
        }
        let mut args = vec!["rm", "-f", "-t", "0"];
        args.extend(ids);
        if let Err(e) = self.run_blocking(&args) {
            tracing::warn!("cleaning up containers: {e}");
        }
    }

    /// IDs of the containers carrying `label=value` (running or not).
    pub fn labelled_blocking(&self, label: &str) -> Vec<String> {
        self.run_blocking(&["ps", "-aq", "--filter", &format!("label={label}")])
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default()
    }
}

/// Where running stand-ins record their podman environments, so that one whose process died
/// (killed test, CI timeout) has its containers removed by the next stand-in that starts.
const ROOTS_DIR: &str = "/tmp/krm-kube-standin-roots";

fn process_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence; no memory is involved.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl Podman {
    /// Records this environment as in use by the current process; returns the record's path
    /// (remove it with [`Podman::unregister`]).
    pub fn register(&self, id: &str) -> Option<PathBuf> {
        std::fs::create_dir_all(ROOTS_DIR).ok()?;
        let path = Path::new(ROOTS_DIR).join(format!("{id}.json"));
        let rec = serde_json::json!({"pid": std::process::id(), "dir": self.dir});
        std::fs::write(&path, rec.to_string()).ok()?;
        Some(path)
    }

    /// Drops the record written by [`Podman::register`].
    pub fn unregister(record: &Path) {
        let _ = std::fs::remove_file(record);
    }

    /// Removes every container of environments whose process is gone, and their records.
    pub fn sweep_abandoned() {
        let Ok(entries) = std::fs::read_dir(ROOTS_DIR) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Ok(rec) = serde_json::from_str::<serde_json::Value>(&text) else {
                let _ = std::fs::remove_file(e.path());
                continue;
            };
            let pid = rec["pid"].as_i64().unwrap_or(0) as i32;
            if pid > 0 && process_alive(pid) {
                continue;
            }
            if let Some(dir) = rec["dir"].as_str().map(PathBuf::from)
                && dir.join("containers.conf").is_file()
            {
                tracing::info!("removing containers abandoned in {}", dir.display());
                let pm = Podman { dir };
                let _ = pm.run_blocking(&["rm", "-a", "-f", "-t", "0"]);
            }
            let _ = std::fs::remove_file(e.path());
        }
    }
}
