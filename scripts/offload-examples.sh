#!/usr/bin/env bash
# Regenerates reports/offload.md: CPU offload (parallel.offload) where the sharded state does not
# fit: one 8B model fine-tuned on one H100 (the example run file under each mode), and the
# planner's search with and without --offload for one node of H100s and a 70B model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
ex=configs/examples/llama3.1-8b-h100x1-offload.json
cmds=(
  "./build/stepcast memory $ex --set parallel.offload=none"
  "./build/stepcast memory $ex"
  "./build/stepcast simulate $ex"
  "./build/stepcast simulate $ex --set parallel.offload=params"
  "./build/stepcast sensitivity $ex"
  "./build/stepcast plan --model llama3.1-8b --hardware h100-sxm --gpus 1 --seq 4096 --batch 8 --offload --rows 5"
  "./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 8 --seq 4096 --batch 32 --rows 3"
  "./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 8 --seq 4096 --batch 32 --offload --rows 5"
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
