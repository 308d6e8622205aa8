//! Hostile and careless clients against the real runner: idle connections at shutdown, running
//! out of file descriptors, stalled uploads, and caller strings too large to echo.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Launch, Server, exec_chain_config, process_stat, resident_kib, scratch, script,
};
use tonic::Code;

/// `exec` serving each (image, script) pair, behind a multi over `kit, exec`.
fn config(functions: &[(&str, &std::path::Path)], extra: &str) -> String {
    exec_chain_config(functions, "kit, exec", extra)
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_is_not_held_up_by_idle_connections() {
    let mut server = Server::start(&config(&[], "shutdown_grace_seconds: 2\n"), &[]);
    // A TCP connection that never speaks, and an HTTP/2 connection left idle after one call.
    let _silent = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let idle = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic_health::pb::health_client::HealthClient::new(idle.clone())
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    // And a call that outlives the grace period.
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                tag: String::new(),
                resource_list: b"x".to_vec(),
                image: "testkit/sleep:60000".into(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal(libc::SIGTERM);
    let started = Instant::now();
    let (status, server) =
        tokio::task::spawn_blocking(move || (server.wait_exit(Duration::from_secs(30)), server))
            .await
            .unwrap();
    let elapsed = started.elapsed();
    let status = status.unwrap_or_else(|| panic!("still running: {}", server.stderr()));
    assert!(status.success(), "{status}: {}", server.stderr());
    // Grace (2 s) plus the runner's 1 s to deliver answers, plus scheduling slack.
    assert!(
        elapsed < Duration::from_secs(4),
        "took {elapsed:?}: {}",
        server.stderr()
    );
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_file_descriptors_the_runner_waits_instead_of_spinning() {
    let server = Server::launch(
        &config(&[], ""),
        &[],
        &Launch {
            max_open_files: Some(64),
            ..Launch::default()
        },
    );
    let pid = server.pid() as i32;
    // More connections than the runner has descriptors: accept(2) fails with EMFILE.
    let held: Vec<_> = (0..100)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = process_stat(pid).expect("runner").cpu_ticks;
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let used = process_stat(pid).expect("runner").cpu_ticks - before;
    // SAFETY: plain sysconf query.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    // A spinning accept loop burns the whole window (~96% of a core); waiting, almost nothing.
    assert!(
        used * 10 < ticks_per_second * window.as_secs(),
        "runner used {used} ticks of CPU in {window:?} ({ticks_per_second} per second)"
    );
    assert!(
        server.stderr().contains("cannot accept connections"),
        "{}",
        server.stderr()
    );
    drop(held);
    // Descriptors free again: it serves.
    let started = Instant::now();
    while server.health_check().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not serving again: {}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request body that sends one chunk and then stalls forever.
struct Stalled(Option<Bytes>);

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.take() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None => Poll::Pending,
        }
    }
}

/// The `grpc-status` of an answer, from its headers (trailers-only) or trailers.
async fn grpc_status(response: http::Response<hyper::body::Incoming>) -> Option<i32> {
    use http_body_util::BodyExt;
    let code = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .and_then(|value| value.to_str().ok()?.parse().ok())
    };
    if let Some(code) = code(response.headers()) {
        return Some(code);
    }
    let collected = response.into_body().collect().await.ok()?;
    collected.trailers().and_then(code)
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_uploads_are_refused_past_the_budget_and_cut_off_in_time() {
    const MAX_MESSAGE_BYTES: usize = 1 << 20;
    const UPLOADS: usize = 60;
    let server = Server::start(
        &config(&[], &format!("max_message_bytes: {MAX_MESSAGE_BYTES}\n")),
        &[],
    );
    let pid = server.pid() as i32;
    let resident_before = resident_kib(pid);
    // One HTTP/2 connection carrying every upload.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Stalled>();
    let declared = MAX_MESSAGE_BYTES - 1024;
    let sent = declared - 100 * 1024;
    let mut chunk = vec![0u8; 5 + sent];
    chunk[1..5].copy_from_slice(&(declared as u32).to_be_bytes());
    let chunk = Bytes::from(chunk);
    let started = Instant::now();
    let uploads: Vec<_> = (0..UPLOADS)
        .map(|_| {
            let request = http::Request::post(format!(
                "{}/evaluator.FunctionEvaluator/EvaluateFunction",
                server.endpoint()
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Stalled(Some(chunk.clone())))
            .unwrap();
            let response = client.request(request);
            tokio::spawn(async move {
                let response = response.await.expect("an answer");
                (grpc_status(response).await, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resident_during = resident_kib(pid);
    let mut refused = 0;
    let mut cut_off = 0;
    for upload in uploads {
        let (code, after) = tokio::time::timeout(Duration::from_secs(40), upload)
            .await
            .expect("every stalled upload is answered")
            .unwrap();
        match code {
            Some(code) if code == Code::ResourceExhausted as i32 => refused += 1,
            Some(code) if code == Code::DeadlineExceeded as i32 => {
                assert!(after >= Duration::from_secs(10), "cut off after {after:?}");
                cut_off += 1;
            }
            other => panic!("unexpected answer {other:?} after {after:?}"),
        }
    }
    // 60 x ~0.9 MB offered; the runner holds at most 16 x max_message_bytes of them.
    assert!(refused >= 30, "{refused} refused, {cut_off} cut off");
    assert!(cut_off >= 1, "{refused} refused, {cut_off} cut off");
    let growth_mib = resident_during.saturating_sub(resident_before) / 1024;
    assert!(
        growth_mib < 40,
        "resident memory grew by {growth_mib} MiB while uploads stalled"
    );
    assert!(server.health_check().await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn caller_strings_and_function_logs_are_echoed_bounded() {
    let dir = scratch();
    let loud = script(
        dir.path(),
        "loud",
        "head -c 200000 /dev/zero | tr '\\0' 'x' >&2\nexit 3",
    );
    let server = Server::start(&config(&[("example.com/loud:v1", &loud)], ""), &[]);
    let image = format!("{}\nforged log line", "i".repeat(1 << 20));
    let status = server.call(&image, b"x").await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{}", status.message());
    assert!(
        status.message().len() < 1024,
        "{} bytes of message",
        status.message().len()
    );
    assert!(
        status.message().starts_with("function \"iii"),
        "{}",
        status.message()
    );
    assert!(!status.message().contains('\n'));

    let status = server.call("example.com/loud:v1", b"x").await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().len() <= 9 * 1024,
        "{} bytes of message",
        status.message().len()
    );
    assert!(
        status.message().contains("exit status 3"),
        "{}",
        status.message()
    );
    assert!(status.message().contains("more bytes not shown"));

    let log = server.stderr();
    assert!(
        !log.lines().any(|line| line.starts_with("forged log line")),
        "{log}"
    );
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2048, "a log line of {longest} bytes");
    assert!(server.health_check().await.is_ok());
}
