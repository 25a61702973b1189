#!/usr/bin/env bash
# Installs every Debian and npm package plumb needs to build and test. Idempotent; run as root (or with sudo).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev libedit-dev
  clang clang-format libclang-rt-14-dev python3 curl chromium tmux
)
# The machine image ships Node.js with npm; Debian's nodejs package conflicts with that npm, so only install it where
# neither exists.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Optional setup steps of other parts of the project (each one idempotent).
for step in "$here"/scripts/setup.d/*.sh; do
  [ -e "$step" ] || continue
  bash "$step"
done
