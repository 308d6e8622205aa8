#!/bin/sh
# Builds statically linked `wrapper-server` and `grpc-health-probe` (glibc, crt-static), which
# run when copied into any function image, `FROM scratch` and distroless included, and puts them
# in an image build context for deploy/Containerfile.wrapper-server.
#
#   plugins/krm-plugin-pod/krm-wrapper-server/build-static.sh [CONTEXT_DIR]
#
# CONTEXT_DIR defaults to <target dir>/image. The last line printed is CONTEXT_DIR.
# The build uses its own target dir (WRAPPER_STATIC_TARGET_DIR, default
# ${CARGO_TARGET_DIR:-<repo>/target}/wrapper-server-static), so the workspace's ordinary build
# is not invalidated by the different flags.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
triple=x86_64-unknown-linux-gnu
target_dir=${WRAPPER_STATIC_TARGET_DIR:-${CARGO_TARGET_DIR:-$repo/target}/wrapper-server-static}
context=${1:-$target_dir/image}

cd "$repo"
# With --target, RUSTFLAGS apply to the target's artifacts only, not to build scripts and
# proc-macros (which cannot be static). No debug info and no symbols: every function pod copies
# these binaries, so size matters more than backtraces.
unset CARGO_ENCODED_RUSTFLAGS
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
CARGO_PROFILE_RELEASE_DEBUG=false \
CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release -p krm-wrapper-server --bins \
    --target "$triple" --target-dir "$target_dir" >&2

built="$target_dir/$triple/release"
mkdir -p "$context"
for binary in wrapper-server grpc-health-probe; do
  # A dynamically linked executable names its loader in a PT_INTERP (.interp) section.
  if command -v readelf >/dev/null 2>&1 && readelf -lW "$built/$binary" | grep -q INTERP; then
    echo "build-static.sh: $built/$binary is dynamically linked" >&2
    exit 1
  fi
  # Copied aside, then renamed into place: tests run this script concurrently, and a reader
  # must see the old binary or the new one, never a removed or half-copied file.
  staged="$context/.$binary.$$"
  cp "$built/$binary" "$staged"
  chmod 0555 "$staged"
  mv -f "$staged" "$context/$binary"
done
echo "$context"
