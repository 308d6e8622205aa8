//! Compiles the `.proto` contracts with protox (a pure-Rust protobuf compiler), so building the
//! workspace never needs a system `protoc`.
//!
//! Servers and clients are generated apart, because they decode differently: a request that
//! does not decode is the caller's mistake (`serving::RequestCodec`), an answer that does not
//! decode is not (tonic-prost's codec). The clients use the messages generated with the servers.

use std::path::PathBuf;

fn main() {
    let protos = [
        "proto/evaluator.proto",
        "proto/krmrunner/v1/functions.proto",
        "proto/krmrunner/v1/executor.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"]).expect("proto files compile");
    tonic_prost_build::configure()
        .build_client(false)
        .codec_path("crate::serving::RequestCodec")
        .compile_fds(descriptors.clone())
        .expect("generated messages and servers");
    let clients = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("clients");
    std::fs::create_dir_all(&clients).expect("clients folder");
    tonic_prost_build::configure()
        .build_server(false)
        .out_dir(clients)
        .extern_path(".evaluator", "crate::evaluator")
        .extern_path(".krmrunner.v1", "crate::krmrunner::v1")
        .compile_fds(descriptors)
        .expect("generated clients");
}
