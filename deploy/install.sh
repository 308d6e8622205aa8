#!/bin/sh
# Installs krm-runner, its plugins and the shipped FunctionConfigs into a prefix, as a package
# would:
#
#   deploy/install.sh [--prefix DIR] [--build-dir DIR] [--debug-info]
#
# --prefix DIR     where to install (default ~/.local; no root needed for a folder you own):
#                  DIR/bin/krm-runner, DIR/bin/krm-runner-server (every command but `fn`,
#                  which krm-runner runs through it), DIR/lib/krm-runner/libkrm_plugin_*.so,
#                  where the runner looks for its plugins, and DIR/lib/krm-runner/functions/,
#                  the FunctionConfigs of config/functions/, which the default configuration
#                  reads there
# --build-dir DIR  take the executables and the plugins from DIR (e.g. target/debug) instead of
#                  building them with `cargo build --release`
# --debug-info     also keep each file's debug info beside it, as FILE.debug (linked from the
#                  file by .gnu_debuglink, which gdb and perf follow); without it the debug
#                  info is not installed
#
# Executables and plugins are installed stripped of debug info and of the symbols they do not
# need to link (a panic's backtrace shows addresses; gdb and perf name them from the .debug
# files of --debug-info). The last line printed is the installed binary's path.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
prefix=${HOME:?}/.local
build_dir=
debug_info=
usage() {
  echo "usage: deploy/install.sh [--prefix DIR] [--build-dir DIR] [--debug-info]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --build-dir) [ $# -ge 2 ] || usage; build_dir=$2; shift 2 ;;
    --debug-info) debug_info=yes; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage ;;
  esac
done

if ! command -v objcopy >/dev/null 2>&1; then
  echo "install.sh: objcopy is missing (Debian package binutils)" >&2
  exit 1
fi
plugins="builtin confighub starlark exec wasm multi pod"
if [ -z "$build_dir" ]; then
  (cd "$repo" && cargo build --release -p krm-runner -p krm-plugin-builtin -p krm-plugin-confighub -p krm-plugin-starlark -p krm-plugin-exec -p krm-plugin-wasm \
    -p krm-plugin-multi -p krm-plugin-pod >&2)
  build_dir=$target_dir/release
fi
for file in krm-runner krm-runner-server $(for plugin in $plugins; do echo "libkrm_plugin_$plugin.so"; done); do
  if [ ! -f "$build_dir/$file" ]; then
    echo "install.sh: $build_dir/$file is missing (build the workspace first)" >&2
    exit 1
  fi
done

# Copies $1 to $2 stripped, with mode $3; with --debug-info, the debug info goes
# to $2.debug and the copy names it. Written beside the target first, so that a runner starting
# meanwhile never maps a half-written file.
install_stripped() {
  partial="$2.partial"
  if [ -n "$debug_info" ]; then
    objcopy --only-keep-debug "$1" "$2.debug"
    chmod 0644 "$2.debug"
    objcopy --strip-unneeded --add-gnu-debuglink="$2.debug" "$1" "$partial"
  else
    rm -f "$2.debug"
    objcopy --strip-unneeded "$1" "$partial"
  fi
  chmod "$3" "$partial"
  mv -f "$partial" "$2"
}

libdir=$prefix/lib/krm-runner
mkdir -p "$prefix/bin" "$libdir/functions"
for executable in krm-runner krm-runner-server; do
  install_stripped "$build_dir/$executable" "$prefix/bin/$executable" 0755
done
for plugin in $plugins; do
  install_stripped "$build_dir/libkrm_plugin_$plugin.so" "$libdir/libkrm_plugin_$plugin.so" 0644
done
# The shipped FunctionConfigs replace what an earlier install put there.
rm -f "$libdir"/functions/*.yaml
install -m 0644 "$repo"/config/functions/*.yaml "$libdir/functions/"
case ":${PATH:-}:" in
  *":$prefix/bin:"*) ;;
  *) echo "install.sh: $prefix/bin is not on PATH; add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" >&2 ;;
esac
echo "$prefix/bin/krm-runner"
