//! Builds `FROM scratch` images from local static binaries with `podman build` (offline) and
//! pushes them to a [`LocalRegistry`] with `podman push --tls-verify=false` (and its login).

use crate::podman::Podman;
use crate::registry::LocalRegistry;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

/// What goes into a scratch image.
#[derive(Debug, Clone, Default)]
pub struct ScratchImage {
    /// `(host file, absolute path in the image)`; copied with their permissions.
    pub files: Vec<(PathBuf, String)>,
    /// `(absolute link path in the image, target)`.
    pub symlinks: Vec<(String, String)>,
    /// ENTRYPOINT (exec form); empty for none.
    pub entrypoint: Vec<String>,
    /// CMD (exec form); empty for none.
    pub cmd: Vec<String>,
    /// USER, if any (`"65532"`).
    pub user: Option<String>,
    /// WORKDIR, if any.
    pub workdir: Option<String>,
}

/// The static busybox that Debian's busybox-static installs.
pub const BUSYBOX: &str = "/bin/busybox";

/// Applets linked in [`ScratchImage::busybox`] images.
pub const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "ash", "cat", "echo", "sleep", "ls", "test", "true", "false", "httpd", "nc", "wget",
    "mkdir", "cp", "rm", "env", "id", "grep", "touch", "printf",
];

/// Whether `/bin/busybox` is the static busybox (busybox-static installed).
pub fn busybox_available() -> Result<(), String> {
    let bytes = std::fs::read(BUSYBOX).map_err(|e| format!("{BUSYBOX}: {e}"))?;
    // A dynamically linked ELF has a PT_INTERP naming the loader.
    if bytes.windows(14).any(|w| w == b"/lib64/ld-linu")
        || bytes.windows(12).any(|w| w == b"ld-linux.so.")
    {
        return Err(format!("{BUSYBOX} is not static: install busybox-static"));
    }
    Ok(())
}

impl ScratchImage {
    /// `/bin/busybox` plus symlinks for the common applets (a shell, httpd, nc, ...), with
    /// `ENTRYPOINT []` and CMD `["/bin/sh"]`.
    pub fn busybox() -> Self {
        Self {
            files: vec![(PathBuf::from(BUSYBOX), "/bin/busybox".into())],
            symlinks: BUSYBOX_APPLETS
                .iter()
                .map(|a| (format!("/bin/{a}"), "busybox".to_string()))
                .collect(),
            cmd: vec!["/bin/sh".into()],
            ..Default::default()
        }
    }

    /// Writes the build context (a `rootfs/` tree and a Containerfile) into `dir`.
    pub fn write_context(&self, dir: &Path) -> Result<()> {
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs)?;
        for (src, dest) in &self.files {
            let rel = dest.trim_start_matches('/');
            let to = rootfs.join(rel);
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p)?;
            }
            std::fs::copy(src, &to)
                .with_context(|| format!("copying {} into the image", src.display()))?;
        }
        for (link, target) in &self.symlinks {
            let to = rootfs.join(link.trim_start_matches('/'));
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p)?;
            }
            let _ = std::fs::remove_file(&to);
            std::os::unix::fs::symlink(target, &to)?;
        }
        // An empty /tmp is handy for programs that write temporary files.
        std::fs::create_dir_all(rootfs.join("tmp"))?;
        let mut cf = String::from("FROM scratch\nCOPY rootfs/ /\n");
        if !self.entrypoint.is_empty() {
            cf += &format!("ENTRYPOINT {}\n", json!(self.entrypoint));
        }
        if !self.cmd.is_empty() {
            cf += &format!("CMD {}\n", json!(self.cmd));
        }
        if let Some(u) = &self.user {
            cf += &format!("USER {u}\n");
        }
        if let Some(w) = &self.workdir {
            cf += &format!("WORKDIR {w}\n");
        }
        std::fs::write(dir.join("Containerfile"), cf)?;
        Ok(())
    }

    /// Builds the image as `<registry host>/<name_tag>` with podman (no network) and pushes it
    /// with `--tls-verify=false`. Returns the full reference.
    pub fn build_and_push(
        &self,
        podman: &Podman,
        work_dir: &Path,
        registry: &LocalRegistry,
        name_tag: &str,
    ) -> Result<String> {
        let reference = format!("{}/{name_tag}", registry.host);
        let ctx = work_dir.join(format!("ctx-{}", name_tag.replace(['/', ':'], "_")));
        let _ = std::fs::remove_dir_all(&ctx);
        std::fs::create_dir_all(&ctx)?;
        self.write_context(&ctx)?;
        let ctx_s = ctx.display().to_string();
        podman
            .run_blocking(&["build", "--network", "none", "-t", &reference, &ctx_s])
            .context("podman build")?;
        let mut push = vec!["push".to_owned(), "--tls-verify=false".to_owned()];
        if let Some((user, password)) = &registry.login {
            push.extend(["--creds".to_owned(), format!("{user}:{password}")]);
        }
        push.push(reference.clone());
        let push: Vec<&str> = push.iter().map(String::as_str).collect();
        podman.run_blocking(&push).context("podman push")?;
        Ok(reference)
    }
}
