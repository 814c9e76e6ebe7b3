#!/usr/bin/env bash
# docs/RESULTS.md, docs/results/speed.md and docs/results/practitioner.png are generated: they must be what
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
# The practitioner's picture: the same header and pixels (compared inflated, so another zlib's bytes pass).
same_png='
import sys, struct, zlib
def pixels(path):
    data, pos, head, idat = open(path, "rb").read(), 8, b"", b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        head, idat = (data[pos + 8:pos + 8 + n], idat) if kind == b"IHDR" else (head, idat + data[pos + 8:pos + 8 + n] * (kind == b"IDAT"))
        pos += 12 + n
    return head, zlib.decompress(idat)
sys.exit(pixels(sys.argv[1]) != pixels(sys.argv[2]))'
if ! [ -f "$root/docs/results/practitioner.png" ] || \
   ! python3 -c "$same_png" "$root/docs/results/practitioner.png" "$tmp/results/practitioner.png"; then
  echo "report_current.sh: docs/results/practitioner.png is not what the records give:" \
       "run \`python3 results/reproduce.py report\` and commit it" >&2
  status=1
fi
exit $status
