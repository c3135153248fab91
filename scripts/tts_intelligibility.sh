#!/usr/bin/env bash
# The TTS intelligibility table of recipes/tts/README.md (make quality-tts): a corpus, an
# ASR model trained on it (the judge), the codec, the GPT, then tts eval on
# the held-out sentences with seen voices and the unseen one. A corpus or
# checkpoint directory already in OUT is reused (delete it to redo that
# step). Sizes: UTTERANCES, ASR_STEPS, CODEC_STEPS,
# GPT_STEPS, LIMIT (utterances per group of voices); OUT is the directory.
set -euo pipefail
OUT=${OUT:-out/tts-quality}
UTTERANCES=${UTTERANCES:-4000}
ASR_STEPS=${ASR_STEPS:-400}
CODEC_STEPS=${CODEC_STEPS:-300}
GPT_STEPS=${GPT_STEPS:-600}
LIMIT=${LIMIT:-40}
mkdir -p "$OUT"
go build -o "$OUT/torchfit" ./cmd/torchfit
tf="$OUT/torchfit"
last() { ls "$1"/checkpoint_step_*.pt 2>/dev/null | sort | tail -1; }
"$tf" tts data --out "$OUT/data" --utterances "$UTTERANCES"
[ -n "$(last "$OUT/asr")" ] || "$tf" asr train --data "$OUT/data" --preset minimal --batch-size 8 --grad-accum 2 \
	--max-steps "$ASR_STEPS" --lr 1e-3 --valid-limit 100 --checkpoint-dir "$OUT/asr" --checkpoint-every 100 --workers 1
[ -n "$(last "$OUT/codec")" ] || "$tf" tts train-codec --data "$OUT/data" --max-steps "$CODEC_STEPS" \
	--checkpoint-dir "$OUT/codec" --workers 1
[ -n "$(last "$OUT/gpt")" ] || "$tf" tts train --data "$OUT/data" --codec "$(last "$OUT/codec")" --batch-size 8 --grad-accum 2 \
	--max-steps "$GPT_STEPS" --warmup 50 --lr 1e-3 --valid-limit 100 --checkpoint-dir "$OUT/gpt" --checkpoint-every 100 --workers 1
"$tf" tts eval --checkpoint "$(last "$OUT/gpt")" --asr "$(last "$OUT/asr")" --data "$OUT/data" --limit "$LIMIT" --out "$OUT/eval"
