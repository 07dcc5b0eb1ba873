# Sourced by the other scripts: makes sure libtorch is installed, then points the build at it.
# shellcheck shell=bash
# CI may run without HOME; the caches live under it.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
af_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
eval "$("$af_root/scripts/setup" --env)"
# CI clones afresh each time: keep cargo's build cache outside the clone so libtorch's C++ shim
# is compiled once per machine, not once per clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${AF_TARGET_DIR:-$HOME/.cache/af/target}}"
