#!/usr/bin/env bash
# Runs every test of the workspace.
#
# The plugins are cdylibs, which `cargo test` does not build, and the integration tests start
# the real `krm-runner` binary with the real plugin libraries: so build everything first.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the container tests use (podman + runc run pods for real, docker-registry is the
# local OCI registry, busybox-static gives test images a static shell), and the Prometheus server
# the metrics test scrapes the runner with. Installed when missing.
packages=()
for pair in podman:podman runc:runc docker-registry:docker-registry busybox:busybox-static prometheus:prometheus; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/bin/${pair%%:*}" ] || packages+=("${pair#*:}")
done
# Debian's C toolchain for WebAssembly (clang, wasm-ld, wasi-libc and the wasm32 compiler
# runtime): tests/tests/wasm.rs builds its WASI test functions from tests/wasm/*.c.
for package in clang lld wasi-libc libclang-rt-dev-wasm32; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || packages+=("$package")
done
if [ ${#packages[@]} -gt 0 ]; then
  echo "tests/run.sh: installing ${packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

missing=()
for tool in kubectl kpt; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: not on this machine: ${missing[*]} (tests that use them skip locally and fail under CI=true)" >&2
fi

# The dependency rules of deny.toml (licenses, banned crates, sources); cargo-deny is built from
# crates.io when missing.
command -v cargo-deny >/dev/null 2>&1 || cargo install --locked cargo-deny
cargo deny check licenses bans sources

# One clean build: incremental compilation would only add its caches to the disk.
export CARGO_INCREMENTAL=0
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
# The plugin template is its own workspace, built as a platform team builds it; its in-process
# tests (tests/tests/plugin_template.rs builds and loads it into the runner).
cargo test --manifest-path plugin-template/Cargo.toml --target-dir target/plugin-template-unwind
