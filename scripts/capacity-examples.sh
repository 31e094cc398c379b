#!/usr/bin/env bash
# Regenerates reports/capacity.md: `stepcast capacity` on two example budgets (simulated MFU),
# the fixed-MFU arithmetic for comparison, and sizing for failures, checkpoints and restarts
# (--goodput) at Llama 3 405B's scale and on the 70B budget with slower storage, one budget on
# three hardware profiles, an 8B budget on an SXM node against three 8-card PCIe servers, a
# LoRA fine-tune of the 70B model on three kinds of node, and `stepcast scaling` over GPU counts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmds=(
  "./build/stepcast capacity --model llama3.1-8b --hardware h100-sxm --seq 8192 --batch 512 --tokens-per-param 20 --days 7 --price 3"
  "./build/stepcast capacity --model llama3.1-8b --hardware h100-sxm --seq 8192 --batch 512 --tokens-per-param 20 --days 7 --price 3 --margin 0.3"
  "./build/stepcast capacity --model llama3.1-8b --hardware h100-sxm --seq 8192 --batch 512 --tokens-per-param 20 --days 7 --price 3 --mfu 0.4"
  "./build/stepcast capacity --model llama3.1-70b --hardware h100-sxm --seq 8192 --batch 1024 --tokens 15e12 --days 60 --price 2.5"
  "./build/stepcast capacity --model llama3.1-70b --hardware h100-sxm --seq 8192 --batch 1024 --tokens 15e12 --days 60 --price 2.5 --goodput --restart 20min --storage-bw 100GB/s"
  "./build/stepcast capacity --model llama3.1-405b --hardware h100-sxm --seq 8192 --batch 2048 --tokens 15.6e12 --days 80 --price 2.5 --mfu 0.4 --goodput"
  "./build/stepcast capacity --model llama3.1-70b --hardware h100-sxm,b200,mi300x --seq 8192 --batch 1024 --tokens 2e12 --days 30 --price h100-sxm=2.5,b200=4.5,mi300x=2.2 --goodput"
  "./build/stepcast capacity --model llama3.1-8b --hardware h100-sxm,h100-pcie-8x,a100-pcie-80gb-8x,l40s-pcie-8x --seq 8192 --batch 512 --tokens 2e11 --days 14 --price h100-sxm=2.5,h100-pcie-8x=2,a100-pcie-80gb-8x=1.3,l40s-pcie-8x=1"
  "./build/stepcast capacity --model llama3.1-70b --hardware h100-sxm,a100-sxm-80gb,l40s-pcie-8x --seq 4096 --batch 64 --tokens 2e9 --days 2 --lora 16 --price h100-sxm=2.5,a100-sxm-80gb=1.6,l40s-pcie-8x=1"
  "./build/stepcast scaling --model llama3.1-70b --hardware h100-sxm --seq 8192 --batch 1024 --gpus 64,128,256,512,1024,2048 --tokens 2e12 --price 2.5"
)
{
  echo "# stepcast capacity examples"
  echo
  echo "Regenerate with \`bash scripts/capacity-examples.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores)."
  for c in "${cmds[@]}"; do
    echo
    echo "\`$c\`"
    echo
    echo '```'
    $c
    echo '```'
  done
} >reports/capacity.md.tmp
mv reports/capacity.md.tmp reports/capacity.md
