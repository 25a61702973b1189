#!/usr/bin/env bash
# Builds the demo model's training text from public-domain Debian packages, into .cache/demo-corpus/:
#   bible-kjv (+ bible-kjv-text): the King James Bible, one verse a line, verse references stripped;
#   fortunes: the fortune-mod cookie files (the package holds only the non-offensive ones), one fortune a record.
# Writes kjv.txt and fortunes.txt (records separated by blank lines); tools/train_demo_model.py splits them into
# train and validation sets. Idempotent; installs the packages if they are missing (run as root).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/.cache/demo-corpus"
mkdir -p "$out"
missing=()
for p in bible-kjv bible-kjv-text fortunes; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# "Ge1:1 In the beginning ..." -> "In the beginning ..."; verses of a chapter joined into one paragraph.
bible -f "Genesis 1:1-Revelation 22:21" |
  awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, p, ":"); if (p[1] != chapter && NR > 1) print ""; chapter = p[1];
         printf "%s%s", (started && p[1] == chapter_printed ? " " : ""), $0; started = 1; chapter_printed = p[1] }
       END { print "" }' | sed 's/^ //' >"$out/kjv.txt"
: >"$out/fortunes.txt"
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] || continue
  # Records end with a line holding only "%"; keep them as paragraphs separated by blank lines.
  awk 'BEGIN { rec = "" } /^%$/ { if (rec != "") print rec "\n"; rec = ""; next } { rec = rec (rec == "" ? "" : "\n") $0 }
       END { if (rec != "") print rec "\n" }' "$f" >>"$out/fortunes.txt"
done
wc -c "$out"/kjv.txt "$out"/fortunes.txt
