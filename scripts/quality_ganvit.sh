#!/usr/bin/env bash
# The GAN + ViT recipe's quality runs (recipes/ganvit/README.md), CPU preset,
# in two regimes, each classifier pair trained for the same number of
# optimizer steps (real only vs real + 400 synthetic):
#   full:     all 320 training clips; the GAN 15 epochs (300 steps); the
#             ViT 135 steps (5 epochs of the real clips);
#   low-data: the first 32 training clips (8 per genre); the GAN 150
#             epochs (300 steps) on them; the ViT 150 steps.
# Then each classifier on the 40 held-out test clips, and each generator
# judged per genre by its regime's real-only classifier. 3.0 CPU-minutes;
# 21 minutes of wall time on 2 cores shared with other work (load ~15). OUT (out/ganvit) and TORCHFIT (built here) from the
# environment; REGIMES="full low" chooses.
set -euo pipefail
OUT=${OUT:-out/ganvit}
REGIMES=${REGIMES:-full low}
mkdir -p "$OUT"
if [ -z "${TORCHFIT:-}" ]; then
  TORCHFIT="$OUT/torchfit"
  go build -o "$TORCHFIT" ./cmd/torchfit
fi
run() { echo "+ $*" >&2; /usr/bin/time -f "  (%e s wall, %U s user CPU)" "$@"; }
run "$TORCHFIT" ganvit data --out "$OUT/data" --clips 400 --seconds 3
common=(--data "$OUT/data" --device cpu --preset cpu --overwrite --memory-every 100)
for regime in $REGIMES; do
  d="$OUT/$regime"
  case $regime in
    full) clips=0; gan_epochs=15; cls=(--epochs 100 --max-steps 135) ;;
    low) clips=32; gan_epochs=150; cls=(--epochs 200 --max-steps 150) ;;
    *) echo "unknown regime $regime"; exit 2 ;;
  esac
  run "$TORCHFIT" ganvit train "${common[@]}" --train-clips $clips --stage gan --gan-epochs $gan_epochs --checkpoint-dir "$d/gan" 2> "$d-gan.log"
  gan="$d/gan/checkpoint_gan_epoch_$gan_epochs.pt"
  run "$TORCHFIT" ganvit train "${common[@]}" --train-clips $clips --stage classifier --num-synthetic 0 "${cls[@]}" --checkpoint-dir "$d/real" 2> "$d-real.log"
  run "$TORCHFIT" ganvit train "${common[@]}" --train-clips $clips --stage classifier --gan "$gan" --num-synthetic 400 "${cls[@]}" --checkpoint-dir "$d/mixed" 2> "$d-mixed.log"
  real=$(ls -t "$d"/real/checkpoint_epoch_*.pt | head -1)
  mixed=$(ls -t "$d"/mixed/checkpoint_epoch_*.pt | head -1)
  echo "== $regime: real only ($real)"; run "$TORCHFIT" ganvit eval --checkpoint "$real" --data "$OUT/data" --device cpu --generated 0
  echo "== $regime: real + synthetic ($mixed)"; run "$TORCHFIT" ganvit eval --checkpoint "$mixed" --data "$OUT/data" --device cpu --generated 0
  echo "== $regime: the generator, judged by the real-only classifier"
  run "$TORCHFIT" ganvit eval --checkpoint "$gan" --classifier "$real" --data "$OUT/data" --device cpu --generated 100
done
