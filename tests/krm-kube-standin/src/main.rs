//! `krm-kube-standin`: runs the TEST-ONLY Kubernetes API stand-in until interrupted.
//!
//! Usage: `krm-kube-standin --state-dir DIR [--port PORT] [--node]`
//! (`--node`: run pods for real with podman).
//! Prints one JSON line `{"url": ..., "kubeconfig": ...}` once it listens.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut state_dir: Option<PathBuf> = None;
    let mut opts = krm_kube_standin::Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--state-dir" => {
                state_dir = Some(args.next().context("--state-dir needs a value")?.into())
            }
            "--port" => opts.port = args.next().context("--port needs a value")?.parse()?,
            "--node" => opts.node = Some(krm_kube_standin::node::NodeOptions::default()),
            "-h" | "--help" => {
                println!(
                    "krm-kube-standin --state-dir DIR [--port PORT] [--node]\nA TEST-ONLY stand-in for a Kubernetes API server (with --node, pods run for real with podman). Not Kubernetes."
                );
                return Ok(());
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    let state_dir = state_dir.context("--state-dir is required")?;
    let standin = krm_kube_standin::StandIn::start_with(&state_dir, opts)?;
    println!(
        "{}",
        serde_json::json!({"url": standin.base_url, "kubeconfig": standin.kubeconfig})
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async { tokio::signal::ctrl_c().await })?;
    drop(standin);
    Ok(())
}
