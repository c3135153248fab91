#!/usr/bin/env bash
# The bf16 table of docs/bf16-onednn.md: samples/s and
# RSS of 300 bf16 steps of the tiny conformer for oneDNN cache capacities
# and padding multiples. Run on a quiet machine with native bf16 (on one
# without, bf16 is emulated and the figures mean little):
#
#   scripts/onednn_matrix.sh [ROUNDS] [OLD_BINARY]
#
# OLD_BINARY, when given, is a torchfit built before the fix (its row
# "before the fix" runs with its own defaults).
set -euo pipefail
rounds=${1:-2}
old=${2:-}
work=$(mktemp -d /tmp/torchfit-onednn.XXXXXX)
cd "$(dirname "$0")/.."
go build -o "$work/torchfit" ./cmd/torchfit
"$work/torchfit" asr data --out "$work/corpus" --utterances 700 >/dev/null
run() { # tag binary env... -- flags...
  local tag=$1 bin=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local d="$work/$tag"; mkdir -p "$d"
  env "${envs[@]}" "$bin" asr train --data "$work/corpus" --preset tiny --batch-size 4 --grad-accum 2 \
    --mixed-precision bf16 --device cpu --workers 1 --seed 1 --valid-limit 8 --epochs 100 --max-steps 300 \
    --memory-every 0 --checkpoint-dir "$d/ck" --checkpoint-every 0 --metrics "$d/m.jsonl" "$@" >"$d/log.txt" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do awk '/VmRSS/{print $2}' /proc/$pid/status >>"$d/rss.txt" 2>/dev/null || true; sleep 1; done
  wait $pid || echo "$tag: exit $?" >&2
  /usr/bin/python3 - "$d" "$tag" <<'PY'
import json, sys
d, tag = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(d + "/m.jsonl") if '"samples_per_sec"' in l]
rss = [int(x) for x in open(d + "/rss.txt").read().split()]
steps = rows[10:]
sps = len(steps) * 8 / sum(8 / r["samples_per_sec"] for r in steps)
print(f"{tag:24s} steps {len(rows):4d}  samples/s {sps:6.1f}  RSS MB at 10% {rss[len(rss)//10]/1024:6.0f}  end {rss[-2]/1024:6.0f}")
PY
}
for r in $(seq "$rounds"); do
  [ -n "$old" ] && run "r$r-before-fix" "$old" X=1 --
  run "r$r-c1024-p1" "$work/torchfit" ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 -- --pad-multiple 1
  run "r$r-c1024-p32" "$work/torchfit" ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 -- --pad-multiple 32
  run "r$r-c256-p32" "$work/torchfit" ONEDNN_PRIMITIVE_CACHE_CAPACITY=256 -- --pad-multiple 32
  run "r$r-c64-p32" "$work/torchfit" ONEDNN_PRIMITIVE_CACHE_CAPACITY=64 -- --pad-multiple 32
  run "r$r-c0-p32" "$work/torchfit" ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 -- --pad-multiple 32
done
rm -rf "$work"
