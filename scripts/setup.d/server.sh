#!/usr/bin/env bash
# What the server tests and benchmark need beyond the build and the Debian packages of scripts/setup.sh (curl, and
# chromium, in which the chat page is loaded headless): the Node.js clients pinned in tests/server/package.json (the
# official `openai` package; ajv, which checks structured outputs against their JSON Schemas; and puppeteer-core,
# which drives the system chromium and downloads no browser), installed into .cache/server-node (git-ignored).
# Idempotent: installs only what is missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

command -v npm >/dev/null 2>&1 || { echo "server.sh: npm is required for the server tests" >&2; exit 1; }
dest="$root/.cache/server-node"
mkdir -p "$dest"
# Reinstall only when the pinned list changed since the last install.
if ! cmp -s "$root/tests/server/package.json" "$dest/package.json" || [ ! -d "$dest/node_modules/openai" ] ||
  [ ! -d "$dest/node_modules/puppeteer-core" ]; then
  cp "$root/tests/server/package.json" "$dest/package.json"
  (cd "$dest" && PUPPETEER_SKIP_DOWNLOAD=1 npm install --silent --no-audit --no-fund)
  echo "server.sh: node clients in $dest"
fi
