#!/bin/sh
# Builds the krm-runner image (deploy/Containerfile.runner) with podman, offline, FROM scratch.
#
#   deploy/build-runner-image.sh [--tag TAG] [--build-dir DIR] [-- PODMAN_OPTIONS...]
#
# --tag TAG        image name (default krm-runner:latest, what deploy/kubernetes/runner.yaml runs)
# --build-dir DIR  take krm-runner and its plugins from DIR (e.g. target/debug) instead of
#                  building them with `cargo build --release`
# PODMAN_OPTIONS   global podman options (e.g. --root DIR), placed before `build`
#
# The context is prepared in ${CARGO_TARGET_DIR:-<repo>/target}/runner-image. The health probe is
# the static one plugins/krm-plugin-pod/krm-wrapper-server/build-static.sh builds. The last line printed is TAG.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
tag=krm-runner:latest
build_dir=
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "build-runner-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

plugins="builtin confighub starlark exec wasm multi pod"
if [ -z "$build_dir" ]; then
  (cd "$repo" && cargo build --release -p krm-runner -p krm-plugin-builtin -p krm-plugin-confighub -p krm-plugin-starlark -p krm-plugin-exec -p krm-plugin-wasm \
    -p krm-plugin-multi -p krm-plugin-pod >&2)
  build_dir=$target_dir/release
fi
probe_dir=$(sh "$repo/plugins/krm-plugin-pod/krm-wrapper-server/build-static.sh" | tail -n 1)
certificates=/etc/ssl/certs/ca-certificates.crt
if [ ! -f "$certificates" ]; then
  echo "build-runner-image.sh: $certificates is missing (Debian package ca-certificates)" >&2
  exit 1
fi

context=$target_dir/runner-image
rootfs=$context/rootfs
home=$rootfs/home/nonroot
rm -rf "$context"
mkdir -p "$home" "$rootfs/etc/krm-runner" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cp "$build_dir/krm-runner" "$build_dir/krm-runner-server" "$home/"
for plugin in $plugins; do
  cp "$build_dir/libkrm_plugin_$plugin.so" "$home/"
done
# Debug info would make up most of the image; symbols stay, so backtraces name functions.
strip --strip-debug "$home/krm-runner" "$home/krm-runner-server" "$home"/libkrm_plugin_*.so
cp "$probe_dir/grpc-health-probe" "$home/"
# The shipped FunctionConfigs, where the runner looks for them beside its plugins.
mkdir -p "$home/functions"
cp "$repo"/config/functions/*.yaml "$home/functions/"
cp "$here/runner-image-config.yaml" "$rootfs/etc/krm-runner/config.yaml"
cp "$certificates" "$rootfs/etc/ssl/certs/"

# The loader and the libraries, at the paths ldd resolves them to (the loader's path is the one
# the binary names, so it is found).
for binary in "$home/krm-runner" "$home/krm-runner-server" "$home"/libkrm_plugin_*.so; do
  ldd "$binary"
done | awk '{ for (i = 1; i <= NF; i++) if (substr($i, 1, 1) == "/") print $i }' | sort -u |
  while read -r library; do
    mkdir -p "$rootfs$(dirname "$library")"
    cp -L "$library" "$rootfs$library"
  done

podman "$@" build --network none -f "$here/Containerfile.runner" -t "$tag" "$context" >&2
echo "$tag"
