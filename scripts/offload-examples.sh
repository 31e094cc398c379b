#!/usr/bin/env bash
# Regenerates reports/offload.md: CPU offload (parallel.offload) where the sharded state does not
# fit: one 8B model fine-tuned on one H100 (the example run file under each mode), and the
# planner's search with and without --offload for one node of H100s and a 70B model; activation
# offload (parallel.activation_offload_layers) against recomputation, over PCIe and over a
# faster host link.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
ex=configs/examples/llama3.1-8b-h100x1-offload.json
# Activation offload: the 8B node example without recomputation at 2 sequences per micro-batch,
# its first 24 layers' activations on the host.
act=configs/examples/llama3.1-8b-h100x8-activation-offload.json
cmds=(
  "./build/stepcast memory $ex --set parallel.offload=none"
  "./build/stepcast memory $ex"
  "./build/stepcast simulate $ex"
  "./build/stepcast simulate $ex --set parallel.offload=params"
  "./build/stepcast sensitivity $ex"
  "./build/stepcast plan --model llama3.1-8b --hardware h100-sxm --gpus 1 --seq 4096 --batch 8 --offload --rows 5"
  "./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 8 --seq 4096 --batch 32 --rows 3"
  "./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 8 --seq 4096 --batch 32 --offload --rows 5"
  "./build/stepcast memory $act"
  "./build/stepcast simulate $act"
  "./build/stepcast simulate $act --set parallel.activation_offload_layers=0 --set parallel.recompute=full --set parallel.recompute_layers=22"
  "./build/stepcast simulate $act --set hardware={\"base\":\"h100-sxm\",\"host\":{\"link\":\"200GB/s\"}}"
  "./build/stepcast plan --model llama3.1-8b --hardware h100-sxm --gpus 8 --seq 8192 --batch 64 --offload --fix tp=1 --fix pp=1 --fix cp=1 --fix micro_batch_size=2 --fix zero_stage=1 --rows 4"
)
{
  echo "# stepcast CPU offload examples"
  echo
  echo "Regenerate with \`bash scripts/offload-examples.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores). The host side of"
  echo "the h100-sxm profile (hardware.host) is the DGX H100's: 2 TiB, 614.4 GB/s of DDR5 (0.8 of it"
  echo "reached), 44 GB/s per GPU to the host. A command that finds no fitting layout exits 3; its"
  echo "message is shown."
  for c in "${cmds[@]}"; do
    echo
    echo "\`${c#./build/}\`"
    echo
    echo '```'
    $c 2>&1 || true
    echo '```'
  done
} >reports/offload.md.tmp
mv reports/offload.md.tmp reports/offload.md
