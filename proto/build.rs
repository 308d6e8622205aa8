//! Compiles the `.proto` contracts with protox (a pure-Rust protobuf compiler), so building the
//! workspace never needs a system `protoc`.

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
        .compile_fds(descriptors)
        .expect("generated gRPC code");
}
