//! `krm-runner serve` (and no command at all): the gRPC server, and ConfigHub's function routes
//! over HTTP when configured.

use std::sync::Arc;
use std::time::Duration;

use super::{Exit, Workers, adopt_orphans, configure, run_async};
use crate::cli::Flags;
use crate::config::Config;
use crate::confighub::{self, serving};
use crate::runtime::{Purpose, Runtime};
use crate::{routing, server, telemetry, worker};

pub fn run(flags: &Flags) -> Exit {
    let configured = configure(flags)?;
    let runtime = configured.start_runtime(Purpose::ServeIsolated, Runtime::start)?;
    adopt_orphans(krm_plugin_api::process::adopt_orphans);
    let code = run_async(Workers::Many, async {
        serve(runtime, &configured.config).await.map(|()| 0)
    });
    krm_plugin_api::process::kill_orphans_now();
    Ok(code)
}

async fn serve(runtime: Arc<Runtime>, config: &Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|error| anyhow::anyhow!("listen: cannot bind {}: {error}", config.listen))?;
    let address = listener.local_addr()?;
    let confighub_http =
        match &config.confighub_listen {
            Some(http) => Some(tokio::net::TcpListener::bind(http).await.map_err(|error| {
                anyhow::anyhow!("confighub_listen: cannot bind {http}: {error}")
            })?),
            None => None,
        };
    telemetry::start(&config.telemetry, runtime.cache().cloned())
        .await
        .map_err(anyhow::Error::new)?;
    runtime.store().report_routes();
    let chain = runtime.served_chain();
    routing::start_sources(
        runtime.store(),
        &config.function_configs,
        runtime.policy().clone(),
    )
    .await
    .map_err(|problem| anyhow::anyhow!(problem))?;
    tracing::info!(%address, serve = %config.serve, chain = ?chain, "serving");
    if let Some(http) = &confighub_http {
        tracing::info!(address = %http.local_addr()?, "serving ConfigHub's function routes over HTTP");
    }
    // The configuration's problems were reported before serving started.
    let typed = config.typed_executor()?;
    let workers = if config.workers.typed_functions {
        let contributors = confighub::contributors(&runtime);
        Some(worker::typed::TypedWorkers::start(config, contributors).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let typed =
        serving::TypedFunctions::new(typed, config.properties_executor(), &runtime, workers);
    server::serve(
        runtime,
        listener,
        confighub_http,
        typed,
        config.max_message_bytes,
        Duration::from_secs(config.shutdown_grace_seconds),
    )
    .await?;
    // The exporter blocks while it sends what is left.
    let _ = tokio::task::spawn_blocking(telemetry::traces::shutdown).await;
    Ok(())
}
