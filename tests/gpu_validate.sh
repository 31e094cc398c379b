#!/usr/bin/env bash
# GPU test: `stepcast validate --backend cuda` executes a small single-GPU plan (cuBLAS GEMMs,
# device copies, Adam kernel, buffers through the caching allocator) and reports predicted
# against measured step time and memory. Skipped (exit 77) where no GPU is visible.
# Usage: gpu_validate.sh STEPCAST SOURCE_DIR OUT_DIR
set -euo pipefail
bin=$1
src=$2
out=$3
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU visible"
  exit 77
fi
mkdir -p "$out"
tiny=$(cd "$src/configs/validate" && pwd)
cat >"$out/gpu-tiny.json" <<JSON
{"model": {"path": "$tiny/gpt-tiny.json"}, "hardware": "h100-sxm", "cluster": {"num_gpus": 1},
 "training": {"seq_len": 1024, "global_batch_size": 8, "precision": "bf16", "attention": "unfused"},
 "parallel": {"micro_batch_size": 2}}
JSON
rm -f "$out/validation.json.journal"  # a fresh validation
"$bin" validate "$out/gpu-tiny.json" --backend cuda --steps 3 --warmup 1 --out "$out/validation.json" --report "$out/validation.md"
echo "validated on the GPU"
