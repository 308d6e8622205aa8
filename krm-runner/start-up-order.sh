#!/usr/bin/env bash
# Writes krm-runner/start-up.order: the functions of the release `krm-runner` that a
# `krm-runner fn set-namespace` call on 10 Deployments runs, as callgrind saw them, which
# krm-runner/build.rs has the linker lay out first (see there). Run it after a toolchain or
# dependency update, then rebuild: `cargo build --release --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null 2>&1 || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends valgrind >/dev/null
}
CARGO_INCREMENTAL=0 cargo build --release --workspace
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n'
  for i in $(seq 0 9); do
    printf -- '- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-%s\n' "$i"
    printf '  spec:\n    replicas: 2\n    template:\n      spec:\n        containers:\n'
    printf '        - name: app\n          image: nginx:1.25\n'
  done
  printf 'functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n'
  printf '  data:\n    namespace: prod\n'
} > "$work/input.yaml"
# The first call checks the plugin's layout and remembers it; the one profiled is a later one.
target/release/krm-runner fn set-namespace < "$work/input.yaml" > /dev/null
valgrind --tool=callgrind --demangle=no --compress-strings=no \
  --callgrind-out-file="$work/callgrind.out" \
  target/release/krm-runner fn set-namespace < "$work/input.yaml" > /dev/null 2> "$work/valgrind.log"
# Each function once, in the order callgrind first names it, from the `krm-runner` object only.
awk '/^ob=/ { ob = substr($0, 4) }
     /^fn=/ && ob ~ /\/krm-runner$/ && !seen[$0]++ { print substr($0, 4) }' \
  "$work/callgrind.out" > krm-runner/start-up.order
echo "krm-runner/start-up.order: $(wc -l < krm-runner/start-up.order) functions" >&2
