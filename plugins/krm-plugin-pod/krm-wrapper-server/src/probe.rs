//! A gRPC health probe with the command line and exit codes of `grpc-health-probe`
//! (github.com/grpc-ecosystem/grpc-health-probe): 0 SERVING, 1 invalid arguments, 2 connection
//! failure, 3 RPC failure, 4 not SERVING. Plain-text connections only.

use std::net::SocketAddr;
use std::time::Duration;

use krm_go_duration as go_duration;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::flags::{self, Flag};

pub const EXIT_SERVING: i32 = 0;
pub const EXIT_INVALID_ARGUMENTS: i32 = 1;
pub const EXIT_CONNECTION_FAILURE: i32 = 2;
pub const EXIT_RPC_FAILURE: i32 = 3;
pub const EXIT_UNHEALTHY: i32 = 4;

const ACCEPTED: &[Flag] = &[
    Flag::value("addr"),
    Flag::value("service"),
    Flag::value("user-agent"),
    Flag::value("connect-timeout"),
    Flag::value("rpc-timeout"),
    Flag::value("rpc-header"),
    Flag::boolean("v"),
    Flag::boolean("gzip"),
    Flag::boolean("tls"),
    Flag::boolean("tls-no-verify"),
    Flag::value("tls-ca-cert"),
    Flag::value("tls-client-cert"),
    Flag::value("tls-client-key"),
    Flag::value("tls-server-name"),
    Flag::boolean("alts"),
    Flag::boolean("spiffe"),
];

/// The probe's settings.
#[derive(Debug)]
pub struct Options {
    pub addr: String,
    pub service: String,
    pub user_agent: String,
    pub connect_timeout: Duration,
    pub rpc_timeout: Duration,
    pub headers: Vec<(String, String)>,
    pub verbose: bool,
}

/// Parses the command line (without the program name).
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let parsed = flags::parse(args, ACCEPTED)?;
    if let Some(extra) = parsed.positional.first() {
        return Err(format!("unexpected argument {extra:?}"));
    }
    for unsupported in ["tls", "alts", "spiffe"] {
        if parsed.is_set(unsupported) {
            return Err(format!(
                "-{unsupported} is not supported by this probe (plain-text connections only)"
            ));
        }
    }
    let addr = parsed.get("addr").unwrap_or_default().to_owned();
    if addr.is_empty() {
        return Err("-addr not specified".to_owned());
    }
    let duration = |name: &str| -> Result<Duration, String> {
        let value = go_duration::parse_non_negative(parsed.get(name).unwrap_or("1s"))
            .map_err(|e| format!("-{name}: {e}"))?;
        if value.is_zero() {
            return Err(format!("-{name} must be greater than zero (specified: 0s)"));
        }
        Ok(value)
    };
    let connect_timeout = duration("connect-timeout")?;
    let rpc_timeout = duration("rpc-timeout")?;
    let headers = parsed
        .all("rpc-header")
        .into_iter()
        .map(|header| {
            let (key, value) = header
                .split_once(':')
                .ok_or_else(|| format!("-rpc-header {header:?} is not 'key: value'"))?;
            Ok((key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect::<Result<_, String>>()?;
    Ok(Options {
        addr,
        service: parsed.get("service").unwrap_or_default().to_owned(),
        user_agent: parsed
            .get("user-agent")
            .unwrap_or("grpc_health_probe")
            .to_owned(),
        connect_timeout,
        rpc_timeout,
        headers,
        verbose: parsed.is_set("v"),
    })
}

/// Runs the probe; returns the exit code after printing what upstream prints.
pub async fn run(options: &Options) -> i32 {
    let addresses = match crate::addr::resolve(&options.addr).await {
        Ok(addresses) => addresses,
        Err(error) => {
            eprintln!(
                "error: failed to connect service at {:?}: {error}",
                options.addr
            );
            return EXIT_CONNECTION_FAILURE;
        }
    };
    let channel = match connect(options, &addresses).await {
        Ok(channel) => channel,
        Err(ConnectError::Timeout) => {
            eprintln!(
                "timeout: failed to connect service {:?} within {:?}",
                options.addr, options.connect_timeout
            );
            return EXIT_CONNECTION_FAILURE;
        }
        Err(ConnectError::Failed(error)) => {
            eprintln!(
                "error: failed to connect service at {:?}: {error}",
                options.addr
            );
            return EXIT_CONNECTION_FAILURE;
        }
    };
    if options.verbose {
        eprintln!("established connection to {:?}", options.addr);
    }
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: options.service.clone(),
    });
    request.set_timeout(options.rpc_timeout);
    for (key, value) in &options.headers {
        match (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            (Ok(key), Ok(value)) => {
                request.metadata_mut().append(key, value);
            }
            _ => {
                eprintln!("error: invalid -rpc-header {key:?}");
                return EXIT_INVALID_ARGUMENTS;
            }
        }
    }
    // The request carries its deadline; the local bound only guards against a stalled stream.
    let bound = options.rpc_timeout + Duration::from_millis(100);
    let answer = tokio::time::timeout(bound, HealthClient::new(channel).check(request)).await;
    let response = match answer {
        Err(_) => {
            eprintln!(
                "timeout: health rpc did not complete within {:?}",
                options.rpc_timeout
            );
            return EXIT_RPC_FAILURE;
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            eprintln!(
                "error: this server does not implement the grpc health protocol \
                 (grpc.health.v1.Health): {}",
                status.message()
            );
            return EXIT_RPC_FAILURE;
        }
        Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {
            eprintln!(
                "timeout: health rpc did not complete within {:?}",
                options.rpc_timeout
            );
            return EXIT_RPC_FAILURE;
        }
        Ok(Err(status)) => {
            eprintln!(
                "error: health rpc failed: rpc error: code = {:?} desc = {}",
                status.code(),
                status.message()
            );
            return EXIT_RPC_FAILURE;
        }
        Ok(Ok(response)) => response.into_inner(),
    };
    let status = ServingStatus::try_from(response.status).unwrap_or(ServingStatus::Unknown);
    if status != ServingStatus::Serving {
        eprintln!(
            "service unhealthy (responded with {:?})",
            status.as_str_name()
        );
        return EXIT_UNHEALTHY;
    }
    println!("status: {}", status.as_str_name());
    EXIT_SERVING
}

enum ConnectError {
    Timeout,
    Failed(String),
}

/// Connects to the first address that answers, within the connect timeout overall. The
/// endpoint is an IP literal, so the connector does no name resolution.
async fn connect(options: &Options, addresses: &[SocketAddr]) -> Result<Channel, ConnectError> {
    let attempt = async {
        let mut last_error = String::from("no addresses");
        for address in addresses {
            let endpoint = Endpoint::from_shared(format!("http://{address}"))
                .map_err(|e| ConnectError::Failed(e.to_string()))?
                .user_agent(options.user_agent.clone())
                .map_err(|e| ConnectError::Failed(e.to_string()))?
                .connect_timeout(options.connect_timeout)
                .tcp_nodelay(true);
            match endpoint.connect().await {
                Ok(channel) => return Ok(channel),
                Err(error) => last_error = format!("{address}: {}", error_chain(&error)),
            }
        }
        Err(ConnectError::Failed(last_error))
    };
    tokio::time::timeout(options.connect_timeout, attempt)
        .await
        .unwrap_or(Err(ConnectError::Timeout))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
