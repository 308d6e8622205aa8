#!/bin/sh
# Installs krm-runner and its plugins into a prefix, as a package would:
#
#   deploy/install.sh [--prefix DIR] [--build-dir DIR]
#
# --prefix DIR     where to install (default ~/.local; no root needed for a folder you own):
#                  DIR/bin/krm-runner, DIR/bin/krm-runner-server (every command but `fn`,
#                  which krm-runner runs through it) and DIR/lib/krm-runner/libkrm_plugin_*.so,
#                  where the runner looks for its plugins
# --build-dir DIR  take the executables and the plugins from DIR (e.g. target/debug) instead of
#                  building them with `cargo build --release`
#
# The last line printed is the installed binary's path.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
prefix=${HOME:?}/.local
build_dir=
usage() {
  echo "usage: deploy/install.sh [--prefix DIR] [--build-dir DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --build-dir) [ $# -ge 2 ] || usage; build_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage ;;
  esac
done

plugins="builtin confighub starlark exec multi pod"
if [ -z "$build_dir" ]; then
  (cd "$repo" && cargo build --release -p krm-runner -p krm-plugin-builtin -p krm-plugin-confighub -p krm-plugin-starlark -p krm-plugin-exec \
    -p krm-plugin-multi -p krm-plugin-pod >&2)
  build_dir=$target_dir/release
fi
for file in krm-runner krm-runner-server $(for plugin in $plugins; do echo "libkrm_plugin_$plugin.so"; done); do
  if [ ! -f "$build_dir/$file" ]; then
    echo "install.sh: $build_dir/$file is missing (build the workspace first)" >&2
    exit 1
  fi
done

mkdir -p "$prefix/bin" "$prefix/lib/krm-runner"
install -m 0755 "$build_dir/krm-runner" "$build_dir/krm-runner-server" "$prefix/bin/"
for plugin in $plugins; do
  install -m 0644 "$build_dir/libkrm_plugin_$plugin.so" "$prefix/lib/krm-runner/"
done
case ":${PATH:-}:" in
  *":$prefix/bin:"*) ;;
  *) echo "install.sh: $prefix/bin is not on PATH; add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" >&2 ;;
esac
echo "$prefix/bin/krm-runner"
