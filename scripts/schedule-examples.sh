#!/usr/bin/env bash
# Regenerates reports/schedules.md: one layout (Llama 3.1 70B on 128 H100s, tp 8, pp 8, dp 2,
# 16 micro-batches of 8k tokens) under every pipeline schedule, simulated: step time, bubble,
# MFU and each stage's peak memory; then the planner with tp and pp fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
ex=configs/examples/llama3.1-70b-h100x128-zbv.json
plan="./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 128 --seq 8192 --batch 32 --fix tp=8 --fix pp=8 --fix sp=true --rows 8"
{
  echo "# stepcast pipeline schedules"
  echo
  echo "Regenerate with \`bash scripts/schedule-examples.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores). The run file is"
  echo "\`$ex\`; each row sets \`parallel.schedule\` and \`parallel.vpp\` with \`--set\` and runs"
  echo "\`stepcast simulate --json\`. Memory per pipeline stage is the ledger's peak (the simulated timeline's agrees within 1%), in GiB."
  echo
  echo "| schedule | vpp | step s | bubble | MFU | peak GiB per stage (0..7) |"
  echo "|---|---:|---:|---:|---:|---|"
  for s in "gpipe 1" "1f1b 1" "interleaved 2" "zb-h1 1" "zbv 2" "dualpipev 2"; do
    set -- $s
    ./build/stepcast simulate $ex --set parallel.schedule=$1 --set parallel.vpp=$2 --json --allow-oom | python3 -c "
import json, sys
d = json.load(sys.stdin)
stages = ', '.join('%.1f' % (st['total_bytes'] / 2**30) for st in d['memory']['stages'])
print('| $1 | $2 | %.3f | %.1f%% | %.1f%% | %s |' % (d['step_time_s'], 100 * d['bubble_fraction'], 100 * d['mfu'], stages))"
  done
  echo
  echo "\`${plan#./build/}\`"
  echo
  echo '```'
  $plan 2>&1
  echo '```'
} >reports/schedules.md.tmp
mv reports/schedules.md.tmp reports/schedules.md
