//! `grpc-health-probe -addr host:port`: exits 0 when the server's `grpc.health.v1.Health/Check`
//! answers SERVING, non-zero otherwise (codes as the upstream probe).

use krm_wrapper_server::probe;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match probe::parse_args(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(probe::EXIT_INVALID_ARGUMENTS);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start: {error}");
            std::process::exit(probe::EXIT_CONNECTION_FAILURE);
        }
    };
    let code = runtime.block_on(probe::run(&options));
    std::process::exit(code);
}
