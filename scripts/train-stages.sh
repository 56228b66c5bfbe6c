#!/usr/bin/env bash
# Every training command end to end on the GPU with the learning check's tiny policy (run
# `gpu-check.sh train learning-check prepare sft --seeds 0` first): collect with the local model, dataset export, SFT with
# LoRA in bf16, one self-supervised round, three GRPO steps. Usage: bash scripts/train-stages.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/cudal1-out}
work=runs/train-stages
rm -rf "$work" && mkdir -p "$work"
model=runs/learning-check/seed-0/sft/model
cli() { python3 -m cudal1.cli "$@"; }
fast=(--set eval.timing.budget_s=1 --set pool.workers=4)
cli collect 5_gelu --llm "hf:$model" --out "$work/collect" --samples 4 "${fast[@]}"
cli dataset export runs/learning-check/arms "$work/collect" --out "$work/data" --test-fraction 0
cli train sft --model "$model" --data "$work/data" --out "$work/sft" --set optim.max_steps=10 --set optim.report_to=none
cli train selfsup --model "$work/sft/model" --out "$work/selfsup" --tasks 5_gelu --rounds 1 --samples 4 \
  --set optim.max_steps=4 --set optim.report_to=none --set sampling.max_tokens=512 "${fast[@]}"
cli train grpo --model "$work/selfsup/model" --out "$work/grpo" --tasks 5_gelu --steps 3 \
  --set optim.batch_size=8 --set num_generations=8 --set sampling.max_tokens=512 \
  --set baseline_labels='[cuda-graph]' "${fast[@]}"
cp "$work/grpo/steps.jsonl" "$out/train-stages-grpo-steps.jsonl"
ls -R "$work"/*/model | head -40
