#!/usr/bin/env bash
# Regenerates every report under reports/ that follows from the code and the data alone (not the
# machine-measured ones: performance.md from scripts/bench.sh, calibration-cpu.* and validation.*
# from calibrate / validate), one after the other, then lists the reports that changed. Run it
# after a model change and commit what moved with the change, so no report goes stale.
# Needs a built ./build/stepcast and ./build/tests/stepcast_input_mutations (about 15 minutes on
# 2 cores). Usage: bash scripts/reports.sh
set -euo pipefail
cd "$(dirname "$0")/.."
run() {
  echo "== $*" >&2
  "$@" > /dev/null
}
run ./build/stepcast accuracy --plans --out reports/accuracy.md --emit-runs configs/published
run ./build/stepcast accuracy --data data/megatron-bridge-archive.jsonl --out reports/accuracy-megatron-bridge-archive.md
run ./build/stepcast pcie-lab --out reports/pcie-lab.md
run bash scripts/estimate-vs-simulate.sh 150
run bash scripts/capacity-examples.sh
run bash scripts/finetune-examples.sh
run bash scripts/schedule-examples.sh
run bash scripts/offload-examples.sh
run bash scripts/model-configs-report.sh
run bash scripts/report-example.sh
run bash scripts/probes.sh
run ./build/tests/stepcast_input_mutations ./build/stepcast --report reports/robustness.md --simulate llama8b,moe_inline,mla_path,straggler,deepspeed_pipe \
  --rows data/published-runs.jsonl --sweep tests/data/sweep/mutation-base.sweep.json tests/data/mutation-bases/*.json
echo "Reports that changed (the dates in their headers aside, review and commit):" >&2
git status --short reports/ configs/published/ >&2
