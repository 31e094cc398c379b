#!/usr/bin/env bash
# Regenerates reports/finetuning.md: which fine-tuning method fits where. For Llama 3.1 8B and
# 70B, full fine-tuning, LoRA (rank 16, every projection) and QLoRA (the same adapters on a
# 4-bit NF4 base) are planned (`stepcast plan`, the best simulated layout) on one H100, one
# 8-GPU H100 node, two L40S and one A100 40GB, at 4,096-token sequences and 32 sequences per
# step. A cell without a layout gives the planner's reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=reports/finetuning.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
models=(llama3.1-8b llama3.1-70b)
methods=("full:" "LoRA r16:--lora 16" "QLoRA r16:--lora 16 --qlora")
machines=("h100-sxm:1" "h100-sxm:8" "l40s-pcie-8x:2" "a100-sxm-40gb:1")
{
  echo "# Fine-tuning: what fits where"
  echo
  echo "Regenerate with \`bash scripts/finetune-examples.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores)."
  echo "Each cell is \`stepcast plan --model M --hardware H --gpus N --seq 4096 --batch 32 [--lora 16 [--qlora]] --top 1\`:"
  echo "the planner's best layout (simulated) for bf16 training, every parallelism, ZeRO/FSDP, recomputation"
  echo "and offload-free layout it enumerates. Full fine-tuning trains every parameter with Adam (16 bytes"
  echo "per parameter of state before sharding); LoRA freezes the base in bf16 and trains rank-16"
  echo "adapters on the attention and MLP projections; QLoRA stores the frozen layers in 4-bit NF4"
  echo "(docs/MODEL.md, \"LoRA fine-tuning and packed sequences\"). MFU counts 6 FLOPs per trained and"
  echo "4 per frozen parameter and token."
  echo
  echo "| model | method | GPUs | best layout | step s | tokens/s/GPU | MFU | peak GiB |"
  echo "|---|---|---|---|---:|---:|---:|---:|"
  for m in "${models[@]}"; do
    for meth in "${methods[@]}"; do
      name=${meth%%:*}
      flags=${meth#*:}
      for mach in "${machines[@]}"; do
        hw=${mach%%:*}
        n=${mach#*:}
        json="$tmp/plan.json"
        # shellcheck disable=SC2086
        if ./build/stepcast plan --model "$m" --hardware "$hw" --gpus "$n" --seq 4096 --batch 32 $flags --top 1 --json >"$json" 2>"$tmp/err"; then
          python3 - "$json" "$m" "$name" "$hw" "$n" <<'PY'
import json, sys
path, model, method, hw, n = sys.argv[1:]
d = json.load(open(path))
b = d["layouts"][0]
print(f"| {model} | {method} | {n} x {hw} | {b['layout']} | {b['step_time_s']:.2f} | {b['tokens_per_s_per_gpu']:.0f} | "
      f"{100 * b['mfu']:.1f}% | {b['peak_memory_bytes'] / 2**30:.1f} |")
PY
        else
          # The planner's reason, up to its advice on what to try next.
          reason=$(tr '\n' ' ' <"$tmp/err" | sed 's/^stepcast: error: //; s/^<flags>: //; s/ (stepcast capacity.*//; s/|/\\|/g')
          echo "| $m | $name | $n x $hw | no layout fits: $reason | | | | |"
        fi
      done
    done
  done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
