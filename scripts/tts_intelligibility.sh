#!/usr/bin/env bash
# The TTS intelligibility table of recipes/tts/README.md (make quality-tts):
# a corpus, an ASR model trained on it (the judge), the codec, the GPT, then
# tts eval on the held-out sentences with seen voices and the unseen one.
# Every stage runs at one libtorch thread; its CPU time (user + system of
# the process) is counted, and the whole is checked against the budget:
# fails unless CER TTS ≤ SEEN (0.35) with seen voices and ≤ UNSEEN (0.45)
# with the unseen one, within BUDGET_MIN (30) CPU minutes. CHECK=0 prints
# the figures without failing (the smoke run of make test).
#
# RANK_STEPS > 0 also trains a second ASR model, the ranker: the judge's
# command with seed RANK_SEED (2) instead of 1, for RANK_STEPS steps; tts
# eval then keeps, of its candidates (EVAL_FLAGS, e.g. --candidates 8),
# the one the ranker transcribes closest to the text (--rank-asr).
#
# A corpus or checkpoint directory already in OUT is reused (delete it to
# redo that step; its CPU time is then not counted). Sizes: UTTERANCES,
# ASR_STEPS, CODEC_STEPS, GPT_STEPS, RANK_STEPS, LIMIT (utterances per
# group of voices); extra flags: ASR_FLAGS, CODEC_FLAGS, GPT_FLAGS,
# EVAL_FLAGS; OUT is the directory, TORCHFIT the binary (built here when
# unset).
set -euo pipefail
OUT=${OUT:-out/tts-quality}
UTTERANCES=${UTTERANCES:-4000}
ASR_STEPS=${ASR_STEPS:-400}
CODEC_STEPS=${CODEC_STEPS:-4000}
GPT_STEPS=${GPT_STEPS:-600}
RANK_STEPS=${RANK_STEPS:-0}
RANK_SEED=${RANK_SEED:-2}
LIMIT=${LIMIT:-40}
SEEN=${SEEN:-0.35}
UNSEEN=${UNSEEN:-0.45}
BUDGET_MIN=${BUDGET_MIN:-30}
CHECK=${CHECK:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p "$OUT"
tf=${TORCHFIT:-}
if [ -z "$tf" ]; then
	tf="$OUT/torchfit"
	go build -o "$tf" ./cmd/torchfit
fi
last() { ls "$1"/checkpoint_step_*.pt 2>/dev/null | sort | tail -1; }
cpu=0 # clock ticks
hz=$(getconf CLK_TCK)
# stage NAME CMD...: runs CMD, adds its CPU seconds to cpu and logs them.
stage() {
	local name=$1 t0 t1
	shift
	t0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
	"$@"
	t1=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
	cpu=$((cpu + t1 - t0))
	echo "quality-tts: $name: $(awk -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.1f", t / hz }') CPU seconds" | tee -a "$OUT/cpu.log"
}
: >"$OUT/cpu.log"
[ -f "$OUT/data/test.jsonl" ] || stage data "$tf" tts data --out "$OUT/data" --utterances "$UTTERANCES"
[ -n "$(last "$OUT/asr")" ] || stage judge "$tf" asr train --data "$OUT/data" --preset minimal --batch-size 8 --grad-accum 2 \
	--max-steps "$ASR_STEPS" --lr 1e-3 --valid-limit 100 --checkpoint-dir "$OUT/asr" --checkpoint-every 100 --workers 1 --threads 1 ${ASR_FLAGS:-}
rank=()
if [ "$RANK_STEPS" -gt 0 ]; then
	[ -n "$(last "$OUT/ranker")" ] || stage ranker "$tf" asr train --data "$OUT/data" --preset minimal --batch-size 8 --grad-accum 2 \
		--max-steps "$RANK_STEPS" --lr 1e-3 --valid-limit 100 --checkpoint-dir "$OUT/ranker" --checkpoint-every 100 --workers 1 --threads 1 \
		--seed "$RANK_SEED" ${ASR_FLAGS:-}
	rank=(--rank-asr "$(last "$OUT/ranker")")
fi
[ -n "$(last "$OUT/codec")" ] || stage codec "$tf" tts train-codec --data "$OUT/data" --max-steps "$CODEC_STEPS" \
	--checkpoint-dir "$OUT/codec" --workers 1 --threads 1 ${CODEC_FLAGS:-}
[ -n "$(last "$OUT/gpt")" ] || stage gpt "$tf" tts train --data "$OUT/data" --codec "$(last "$OUT/codec")" --batch-size 8 --grad-accum 2 \
	--max-steps "$GPT_STEPS" --warmup 50 --lr 1e-3 --valid-limit 100 --checkpoint-dir "$OUT/gpt" --checkpoint-every 200 --workers 1 --threads 1 --dropout 0 ${GPT_FLAGS:-}
rm -rf "$OUT/eval"
stage eval "$tf" tts eval --checkpoint "$(last "$OUT/gpt")" --asr "$(last "$OUT/asr")" --data "$OUT/data" --limit "$LIMIT" --out "$OUT/eval" --threads 1 \
	"${rank[@]}" ${EVAL_FLAGS:-}
read -r seen unseen < <(python3 -c 'import json,sys; r={x["Group"]: x["CERTTS"] for x in json.load(open(sys.argv[1]))["Rows"]}; print("%.3f %.3f" % (r["seen voices"], r["unseen voice"]))' "$OUT/eval/eval.json")
minutes=$(awk -v t="$cpu" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz / 60 }')
verdict="CER TTS $seen (seen voices) and $unseen (unseen voice) after $minutes CPU minutes (target ≤ $SEEN and ≤ $UNSEEN within $BUDGET_MIN)"
if awk -v a="$seen" -v b="$unseen" -v m="$minutes" -v x="$SEEN" -v y="$UNSEEN" -v z="$BUDGET_MIN" 'BEGIN { exit !(a <= x && b <= y && m <= z) }'; then
	echo "quality-tts: met: $verdict"
else
	echo "quality-tts: NOT met: $verdict"
	[ "$CHECK" = 0 ] || exit 1
fi
