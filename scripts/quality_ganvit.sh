#!/usr/bin/env bash
# The GAN + ViT recipe's quality run (README, "GAN + ViT"): clips, the
# conditional GAN, the ViT on real clips only and on real + synthetic,
# then each classifier on the held-out test clips and the generator judged
# per genre by the real-only classifier. CPU preset; about 25 minutes on
# 2 cores. Settings through the environment:
#   OUT (out/ganvit) CLIPS (400) CLIP_SECONDS (3) GAN_EPOCHS (25) EPOCHS (20) NUM_SYNTHETIC (400) TORCHFIT (built here)
set -euo pipefail
OUT=${OUT:-out/ganvit}
CLIPS=${CLIPS:-400}
CLIP_SECONDS=${CLIP_SECONDS:-3}
GAN_EPOCHS=${GAN_EPOCHS:-25}
EPOCHS=${EPOCHS:-20}
NUM_SYNTHETIC=${NUM_SYNTHETIC:-400}
mkdir -p "$OUT"
if [ -z "${TORCHFIT:-}" ]; then
  TORCHFIT="$OUT/torchfit"
  go build -o "$TORCHFIT" ./cmd/torchfit
fi
run() { echo "+ $*" >&2; /usr/bin/time -f "  (%e s wall, %U s user CPU)" "$@"; }
run "$TORCHFIT" ganvit data --out "$OUT/data" --clips "$CLIPS" --seconds "$CLIP_SECONDS"
common=(--data "$OUT/data" --device cpu --preset cpu --overwrite --memory-every 100)
run "$TORCHFIT" ganvit train "${common[@]}" --stage gan --gan-epochs "$GAN_EPOCHS" --checkpoint-dir "$OUT/gan" 2> "$OUT/gan.log"
GAN="$OUT/gan/checkpoint_gan_epoch_$GAN_EPOCHS.pt"
run "$TORCHFIT" ganvit train "${common[@]}" --stage classifier --num-synthetic 0 --epochs "$EPOCHS" --checkpoint-dir "$OUT/real" 2> "$OUT/real.log"
run "$TORCHFIT" ganvit train "${common[@]}" --stage classifier --gan "$GAN" --num-synthetic "$NUM_SYNTHETIC" --epochs "$EPOCHS" --checkpoint-dir "$OUT/mixed" 2> "$OUT/mixed.log"
REAL="$OUT/real/checkpoint_epoch_$EPOCHS.pt"
MIXED="$OUT/mixed/checkpoint_epoch_$EPOCHS.pt"
echo "== real only"; run "$TORCHFIT" ganvit eval --checkpoint "$REAL" --data "$OUT/data" --device cpu --generated 0
echo "== real + synthetic"; run "$TORCHFIT" ganvit eval --checkpoint "$MIXED" --data "$OUT/data" --device cpu --generated 0
echo "== the generator, judged by the real-only classifier"
run "$TORCHFIT" ganvit eval --checkpoint "$GAN" --classifier "$REAL" --data "$OUT/data" --device cpu --generated 100
