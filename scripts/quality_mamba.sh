#!/usr/bin/env bash
# The Mamba recipe's quality target (recipes/mamba/README.md): --vram cpu
# (the tiny model and its 330-step schedule) on the King James Bible at one
# libtorch thread, held-out loss on the first 8,192 held-out tokens every 50
# steps, then on all of them. Fails unless the last held-out loss is at most
# 5.2 nats/token within 5 CPU minutes of the training process (evaluations
# included). OUT (out/mamba-quality) and TORCHFIT (built here) from the
# environment; STEPS stops the preset's schedule early and CHECK=0 prints
# the verdict without failing (the smoke run of make test).
set -euo pipefail
OUT=${OUT:-out/mamba-quality}
CHECK=${CHECK:-1}
mkdir -p "$OUT"
if [ -z "${TORCHFIT:-}" ]; then
  TORCHFIT="$OUT/torchfit"
  go build -o "$TORCHFIT" ./cmd/torchfit
fi
[ -d "$OUT/kjv" ] || "$TORCHFIT" mamba data --out "$OUT/kjv"
rm -rf "$OUT/ck"
"$TORCHFIT" mamba train --vram cpu --threads 1 --data_dir "$OUT/kjv" --eval-tokens 8192 \
  --checkpoint-dir "$OUT/ck" --metrics "$OUT/metrics.jsonl" ${STEPS:+--max-steps "$STEPS"} 2>&1 | tee "$OUT/train.log"
"$TORCHFIT" mamba eval --data_dir "$OUT/kjv" --checkpoint "$(ls "$OUT"/ck/checkpoint_step_*.pt | tail -n 1)" --max-tokens 0 | tee "$OUT/eval.log"
echo "| step | CPU minutes | held-out nats/token (first 8,192) | bits/char |"
echo "|---:|---:|---:|---:|"
sed -nE 's/.*step ([0-9]+): held-out loss ([0-9.]+) nats\/token \(([0-9.]+) bits\/char.*after ([0-9.]+) CPU.*/| \1 | \4 | \2 | \3 |/p' "$OUT/train.log"
last=$(sed -nE 's/.*held-out loss ([0-9.]+) nats\/token.*after ([0-9.]+) CPU minutes.*/\1 \2/p' "$OUT/train.log" | tail -n 1)
read -r loss minutes <<<"$last"
if awk -v l="$loss" -v m="$minutes" 'BEGIN { exit !(l <= 5.2 && m <= 5) }'; then
  echo "quality-mamba: met: $loss nats/token after $minutes CPU minutes (target ≤ 5.2 within 5)"
else
  echo "quality-mamba: NOT met: $loss nats/token after $minutes CPU minutes (target ≤ 5.2 within 5)"
  [ "$CHECK" = 0 ] || exit 1
fi
