//! One call: a fresh instance of the compiled module in a store of its own, the ResourceList on
//! stdin, stdout and stderr captured within bounds, memory limited, interrupted when the call is
//! cancelled or its deadline passes.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use krm_plugin_api::results::failure_detail;
use krm_plugin_api::{CallContext, CancelReason, ErrorKind, EvalError, EvalResponse, quoted};
use wasmtime::{Engine, InstancePre, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::config::Limits;

/// How often the engine's epoch advances: a running module notices a cancelled call or a passed
/// deadline within one tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// A store's data: the module's WASI view and its limits.
pub(crate) struct CallState {
    wasi: WasiP1Ctx,
    limiter: MemoryLimiter,
}

impl CallState {
    pub(crate) fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }
}

/// The limit a module ran into; the call answers RESOURCE_EXHAUSTED naming it.
#[derive(Debug, thiserror::Error)]
enum LimitReached {
    #[error(
        "its linear memory would grow to {desired} bytes, beyond the limit of {limit} bytes (memory_limit_mib)"
    )]
    Memory { desired: usize, limit: usize },
    #[error("its table would grow to {desired} elements, beyond the limit of {limit} elements")]
    Table { desired: usize, limit: usize },
    #[error("its output exceeded {limit} bytes (max_output_bytes) and it was stopped")]
    Output { limit: usize },
}

/// Why a module was stopped from outside.
#[derive(Debug, thiserror::Error)]
#[error("stopped: {0:?}")]
struct Stopped(CancelReason);

struct MemoryLimiter {
    memory_bytes: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> anyhow::Result<bool> {
        if desired > self.memory_bytes {
            return Err(LimitReached::Memory {
                desired,
                limit: self.memory_bytes,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> anyhow::Result<bool> {
        // An element is a pointer in wasmtime: the table counts against the same budget.
        let limit = self.memory_bytes / size_of::<usize>();
        if desired > limit {
            return Err(LimitReached::Table { desired, limit }.into());
        }
        Ok(true)
    }
}

/// Runs `pre` (the module of `image`) on `resource_list`, granted the variables `env`.
pub(crate) fn run(
    engine: &Engine,
    context: &CallContext<'_>,
    image: &str,
    pre: &InstancePre<CallState>,
    env: &[(String, String)],
    limits: &Limits,
    resource_list: &[u8],
) -> Result<EvalResponse, EvalError> {
    let fail = |kind: ErrorKind, detail: String| {
        EvalError::new(
            kind,
            format!("Failed to execute function {}: {detail}", quoted(image)),
        )
    };
    let stdout = Captured::new(limits.max_output_bytes, Overflow::Stop);
    let stderr = Captured::new(limits.max_log_bytes, Overflow::Drop);
    let wasi = WasiCtxBuilder::new()
        .stdin(MemoryInputPipe::new(resource_list.to_vec()))
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .arg(image)
        .envs(env)
        .build_p1();
    let mut store = Store::new(
        engine,
        CallState {
            wasi,
            limiter: MemoryLimiter {
                memory_bytes: limits.memory_bytes,
            },
        },
    );
    store.limiter(|state| &mut state.limiter);

    let stop: Arc<OnceLock<CancelReason>> = Arc::new(OnceLock::new());
    let on_cancel = stop.clone();
    context.on_cancel(move |reason| {
        let _ = on_cancel.set(reason);
    });
    let deadline = context.deadline();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if let Some(reason) = stop.get() {
            return Err(Stopped(*reason).into());
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(Stopped(CancelReason::DeadlineExceeded).into());
        }
        Ok(UpdateDeadline::Continue(1))
    });

    let outcome = pre
        .instantiate(&mut store)
        .and_then(|instance| instance.get_typed_func::<(), ()>(&mut store, "_start"))
        .and_then(|start| start.call(&mut store, ()));
    drop(store);
    let (stdout, overflowed) = stdout.take();
    let (log, _) = stderr.take();

    let exit_code = match outcome {
        Ok(()) => 0,
        Err(error) => {
            if let Some(I32Exit(code)) = error.downcast_ref::<I32Exit>() {
                *code
            } else if let Some(Stopped(reason)) = error.downcast_ref::<Stopped>() {
                return Err(reason.to_error(image).with_output(Vec::new(), log));
            } else if let Some(limit) = error.downcast_ref::<LimitReached>() {
                return Err(fail(ErrorKind::ResourceExhausted, limit.to_string())
                    .with_output(Vec::new(), log));
            } else if overflowed {
                // The module went on writing after its output was refused.
                let limit = LimitReached::Output {
                    limit: limits.max_output_bytes,
                };
                return Err(fail(ErrorKind::ResourceExhausted, limit.to_string())
                    .with_output(Vec::new(), log));
            } else if let Some(trap) = error.downcast_ref::<Trap>() {
                return Err(
                    fail(ErrorKind::Failed, format!("the module trapped: {trap}"))
                        .with_output(stdout, log),
                );
            } else {
                return Err(fail(ErrorKind::Failed, format!("{error:#}")).with_output(stdout, log));
            }
        }
    };
    if exit_code == 0 {
        return Ok(EvalResponse::new(stdout, log));
    }
    let detail = failure_detail(&format!("exit status {exit_code}"), &log, &stdout);
    Err(fail(ErrorKind::Failed, detail).with_output(stdout, log))
}

/// What a stream does with bytes beyond its limit.
#[derive(Debug, Clone, Copy)]
enum Overflow {
    /// Stop the module: its output is the call's answer, and a cut one is wrong.
    Stop,
    /// Keep what fits: the log is for people, and its beginning says most.
    Drop,
}

/// A module's stdout or stderr, kept in memory up to a limit.
#[derive(Clone)]
struct Captured {
    inner: Arc<CapturedInner>,
}

struct CapturedInner {
    bytes: Mutex<Vec<u8>>,
    limit: usize,
    overflow: Overflow,
    overflowed: AtomicBool,
}

impl Captured {
    fn new(limit: usize, overflow: Overflow) -> Self {
        Self {
            inner: Arc::new(CapturedInner {
                bytes: Mutex::new(Vec::new()),
                limit,
                overflow,
                overflowed: AtomicBool::new(false),
            }),
        }
    }

    /// What was written, and whether more was refused.
    fn take(&self) -> (Vec<u8>, bool) {
        let bytes = std::mem::take(
            &mut *self
                .inner
                .bytes
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        (bytes, self.inner.overflowed.load(Ordering::Relaxed))
    }

    /// Keeps `data`; `Err` once the limit is passed on a stream that stops the module.
    fn append(&self, data: &[u8]) -> Result<(), LimitReached> {
        let mut bytes = self
            .inner
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let room = self.inner.limit.saturating_sub(bytes.len());
        if data.len() <= room {
            bytes.extend_from_slice(data);
            return Ok(());
        }
        self.inner.overflowed.store(true, Ordering::Relaxed);
        match self.inner.overflow {
            Overflow::Stop => Err(LimitReached::Output {
                limit: self.inner.limit,
            }),
            Overflow::Drop => {
                bytes.extend_from_slice(&data[..room]);
                Ok(())
            }
        }
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes)
            .map_err(|limit| StreamError::Trap(limit.into()))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Every write is taken (or stops the module), so that a write past the limit is seen
        // rather than shortened into one that fits.
        Ok(usize::MAX)
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.append(data)
                .map(|()| data.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
