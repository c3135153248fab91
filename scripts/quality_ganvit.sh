#!/usr/bin/env bash
# The GAN + ViT recipe's quality runs (README, "GAN + ViT"), CPU preset,
# in two regimes:
#   full:     all 320 training clips; the GAN 25 epochs; the ViT 20 epochs
#             on real clips only, and on real + 400 synthetic;
#   low-data: the first 32 training clips (8 per genre); the GAN 250
#             epochs (500 steps) on them; the ViT 600 steps on real only
#             and on real + 400 synthetic (the same number of steps).
# Then each classifier on the 40 held-out test clips, and each generator
# judged per genre by its regime's real-only classifier. About 50 minutes
# on 2 cores. OUT (out/ganvit) and TORCHFIT (built here) from the
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
    full) clips=0; gan_epochs=25; cls=(--epochs 20) ;;
    low) clips=32; gan_epochs=250; cls=(--epochs 200 --max-steps 600) ;;
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
