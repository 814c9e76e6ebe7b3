#!/usr/bin/env bash
# docs/RESULTS.md and docs/results/speed.md are generated: they must be what
# `python3 results/reproduce.py report` writes from the committed records and results/discussion.md.
# A record or a discussion edit committed without the regenerated pages fails here.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 "$root/results/reproduce.py" report --to "$tmp/RESULTS.md" > /dev/null
status=0
for page in RESULTS.md results/speed.md; do
  if ! diff -u "$root/docs/$page" "$tmp/$page" > "$tmp/diff.txt"; then
    head -n 40 "$tmp/diff.txt"
    echo "report_current.sh: docs/$page is not what the records and results/discussion.md give:" \
         "run \`python3 results/reproduce.py report\` and commit its pages" >&2
    status=1
  fi
done
exit $status
