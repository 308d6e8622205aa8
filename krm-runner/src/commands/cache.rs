//! `krm-runner cache`: what the result cache's stores hold, and `--clear` to empty them. Given
//! `--server ADDRESS` (a serving runner's metrics listener), its memory and disk stores through
//! the cache's admin path there; otherwise the disk store the configuration names, read from
//! its folder (a process's memory store is its own).

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use http_body_util::BodyExt;

use super::{Exit, Workers, configure, run_async};
use crate::cache::disk::{self, DiskUsage};
use crate::cache::{ADMIN_PATH, Stores};
use crate::cli::{CacheArgs, Flags};

/// The largest admin answer read: a few numbers and a path.
const MAX_ANSWER_BYTES: usize = 64 << 10;

pub fn run(flags: &Flags, args: &CacheArgs) -> Exit {
    let config = configure(flags)?.without_problems()?;
    let code = match &args.server {
        Some(address) => run_async(Workers::One, async {
            let stores = ask(address, args.clear).await?;
            print_stores(&stores);
            Ok(0)
        }),
        None => super::exit_code(on_disk(config.cache.disk.as_ref(), args.clear)),
    };
    Ok(code)
}

/// Shows (after emptying, with `clear`) the disk store the configuration names.
fn on_disk(config: Option<&crate::config::DiskCacheConfig>, clear: bool) -> anyhow::Result<i32> {
    let Some(config) = config else {
        println!(
            "no disk store (cache.disk is not set); a serving runner's memory store is shown \
             with --server ADDRESS, its metrics listener"
        );
        return Ok(0);
    };
    let folder = || {
        format!(
            "cache.disk.path: cannot list folder {}",
            config.path.display()
        )
    };
    if clear {
        let removed = disk::clear(&config.path).with_context(folder)?;
        println!("removed {removed} entries");
    }
    let entries = disk::entries(&config.path).with_context(folder)?;
    print_disk(&DiskUsage::of(
        &config.path,
        &entries,
        Some(config.max_bytes),
    ));
    Ok(0)
}

/// The stores of the runner whose metrics listener is at `address`; emptied first with
/// `clear`.
async fn ask(address: &str, clear: bool) -> anyhow::Result<Stores> {
    let at = || format!("--server {address}");
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .with_context(at)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .with_context(at)?;
    tokio::spawn(connection);
    let method = if clear {
        hyper::Method::DELETE
    } else {
        hyper::Method::GET
    };
    let request = hyper::Request::builder()
        .method(method)
        .uri(ADMIN_PATH)
        .header(hyper::header::HOST, address)
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .with_context(at)?;
    let response = sender.send_request(request).await.with_context(at)?;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|error| anyhow::anyhow!("{}: cannot read the answer: {error}", at()))?
        .to_bytes();
    if status == hyper::StatusCode::NOT_FOUND {
        anyhow::bail!(
            "{}: no {ADMIN_PATH} there; it must be the metrics listener (telemetry.metrics) \
             of a runner serving with the cache on",
            at()
        );
    }
    if !status.is_success() {
        anyhow::bail!("{}: {ADMIN_PATH} answered {status}", at());
    }
    serde_json::from_slice(&body).with_context(|| format!("{}: not a cache report", at()))
}

fn print_stores(stores: &Stores) {
    let memory = &stores.memory;
    println!(
        "memory: {} entries, {} of {} bytes",
        memory.entries, memory.bytes, memory.max_bytes
    );
    match &stores.disk {
        Some(disk) => print_disk(disk),
        None => println!("disk: none"),
    }
}

fn print_disk(disk: &DiskUsage) {
    let bound = disk
        .max_bytes
        .map_or_else(String::new, |max| format!(" of {max}"));
    let mut line = format!(
        "disk {}: {} entries, {}{bound} bytes",
        disk.path.display(),
        disk.entries,
        disk.bytes
    );
    if let (Some(oldest), Some(newest)) = (disk.oldest, disk.newest) {
        line.push_str(&format!(
            ", oldest written {} s ago, newest {} s ago",
            age(oldest),
            age(newest)
        ));
    }
    println!("{line}");
}

/// Seconds since `written` (seconds since the Unix epoch).
fn age(written: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    now.saturating_sub(written)
}
