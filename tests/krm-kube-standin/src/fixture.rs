//! One-call setup for end-to-end tests: a local registry, a podman environment to build images
//! in, and a stand-in whose node runs pods with podman — plus the "skip loudly outside CI, fail
//! under CI=true" rule for missing prerequisites.

use crate::image::{self, ScratchImage};
use crate::podman::{self, Podman};
use crate::registry::{self, LocalRegistry};
use crate::{Options, StandIn, node::NodeOptions};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// What is missing for podman-backed tests (podman, runc, docker-registry, busybox-static).
pub fn missing_prerequisites() -> Vec<String> {
    [
        podman::available(),
        registry::available(),
        image::busybox_available(),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect()
}

/// `true` when podman-backed tests can run; otherwise the test is reported as skipped (see
/// [`skip`]). `test` names it in the message.
pub fn require_podman(test: &str) -> bool {
    let missing = missing_prerequisites();
    if missing.is_empty() {
        return true;
    }
    skip(&format!(
        "{test} needs {} (tests/run.sh installs podman, runc, docker-registry, busybox-static)",
        missing.join("; ")
    ));
    false
}

/// Reports that the running test cannot run because something is missing from this machine.
/// Under `CI=true` it panics, so CI never passes by skipping. Elsewhere it writes one
/// `SKIPPED <test name>: <missing>` line to the process's stderr directly, not through
/// `eprintln!`, which the test harness captures: so the line shows in `cargo test`'s output
/// without `--nocapture`, next to the test's `ok`.
pub fn skip(missing: &str) {
    use std::io::Write;
    let current = std::thread::current();
    let test = current.name().unwrap_or("(unnamed test)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {missing}; required under CI=true");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {missing}");
}

/// A stand-in cluster with a node, a registry and an image builder. Dropping it removes every
/// container, then stops the registry.
pub struct Cluster {
    /// The API server and node (dropped first).
    pub standin: StandIn,
    /// The local registry.
    pub registry: LocalRegistry,
    /// Where images are built.
    pub builder: Podman,
    /// Base directory.
    pub dir: PathBuf,
}

impl Cluster {
    /// Starts everything under `dir` (`registry/`, `builder/`, `build/`, `standin/`).
    pub fn start(dir: &Path) -> Result<Self> {
        Self::start_with(dir, NodeOptions::default())
    }

    /// [`Cluster::start`] with node options.
    pub fn start_with(dir: &Path, node: NodeOptions) -> Result<Self> {
        let registry = LocalRegistry::start(&dir.join("registry"))?;
        let builder = Podman::new(&dir.join("builder"))?;
        let standin = StandIn::start_with(
            &dir.join("standin"),
            Options {
                node: Some(node),
                ..Default::default()
            },
        )?;
        Ok(Self {
            standin,
            registry,
            builder,
            dir: dir.to_path_buf(),
        })
    }

    /// Builds `image` and pushes it as `<registry>/<name_tag>`; returns the reference.
    pub fn push(&self, image: &ScratchImage, name_tag: &str) -> Result<String> {
        self.push_to(&self.registry, image, name_tag)
    }

    /// [`Cluster::push`] to another registry (one requiring a login, say).
    pub fn push_to(
        &self,
        registry: &LocalRegistry,
        image: &ScratchImage,
        name_tag: &str,
    ) -> Result<String> {
        image.build_and_push(&self.builder, &self.dir.join("build"), registry, name_tag)
    }
}

/// The image build context holding the static `wrapper-server` and `grpc-health-probe`, built by
/// the crate's own script (release, in its own target folder; cached after the first build).
pub fn static_wrapper_server_context() -> PathBuf {
    // This crate is tests/krm-kube-standin of the workspace.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root");
    let output = std::process::Command::new("sh")
        .arg(repo.join("plugins/krm-plugin-pod/krm-wrapper-server/build-static.sh"))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("run build-static.sh");
    assert!(
        output.status.success(),
        "build-static.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 path");
    PathBuf::from(stdout.lines().last().expect("context dir").trim())
}
