#!/usr/bin/env bash
# Regenerates reports/model-configs.md: the published model-hub configs in tests/data/hf as
# stepcast reads them (parameter counts against the published ones), and a DeepSeek-V3 plan with
# and without a multi-token-prediction module. Needs a built ./build/stepcast.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./build/stepcast
out=reports/model-configs.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# Model-hub configs and multi-token prediction"
  echo
  echo "Regenerate with \`bash scripts/model-configs-report.sh\` ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)."
  echo
  echo "## Published config.json files (tests/data/hf)"
  echo
  echo "Each file is loaded as \`{\"model\": {\"path\": FILE}}\` on 512 h100-sxm with FSDP at 2,048 tokens (the shortest context of the files, OPT's learned positions); counts from \`stepcast memory --json\` (\`run.params\`, \`run.active_params\`). Published figures: tests/data/hf/README.md."
  echo
  echo "| file | exit | params (B) | active (B) | message |"
  echo "|---|---:|---:|---:|---|"
  for f in tests/data/hf/*-config.json; do
    run="$tmp/run.json"
    printf '{"model": {"path": "%s"}, "hardware": "h100-sxm", "cluster": {"num_gpus": 512}, "training": {"seq_len": 2048, "global_batch_size": 512}, "parallel": {"tp": 1, "micro_batch_size": 1, "fsdp": true, "recompute": "full"}}\n' "$PWD/$f" > "$run"
    set +e
    "$bin" memory "$run" --json > "$tmp/out.json" 2> "$tmp/err.txt"
    rc=$?
    set -e
    if [ -s "$tmp/out.json" ]; then
      read -r p a < <(python3 -c "import json; d=json.load(open('$tmp/out.json'))['run']; print('%.3f %.3f' % (d['params']/1e9, d['active_params']/1e9))")
      echo "| $(basename "$f") | $rc | $p | $a | |"
    else
      msg=$(sed -e 's/^stepcast: error: //' -e "s#$PWD/##g" "$tmp/err.txt" | head -1 | cut -c1-200)
      echo "| $(basename "$f") | $rc | - | - | $msg |"
    fi
  done
  echo
  echo "## DeepSeek-V3 on 2,048 h800: the planner's end-stage split with MTP"
  echo
  echo "\`stepcast plan RUN.json --top 3 --rows 1\` with RUN.json = deepseek-v3, h800, 2,048 GPUs, seq 4096, batch 15360, fp8, parallel {pp 16, ep 64, tp 1, schedule 1f1b} (Megatron-Core's first / last stage counts, which a V or interleaved schedule's virtual stages do not take), and \`training.mtp_layers\` as shown; then the same best layout with the split fixed at 2 first / 3 last layers (\`stepcast simulate\`)."
  echo
  echo "| mtp_layers | planner's best layout | step s | with first 2 / last 3: step s |"
  echo "|---:|---|---:|---:|"
  for mtp in 0 1; do
    run="$tmp/dsv3.json"
    printf '{"model": "deepseek-v3", "hardware": "h800", "cluster": {"num_gpus": 2048}, "training": {"seq_len": 4096, "global_batch_size": 15360, "precision": "fp8", "mtp_layers": %s}, "parallel": {"pp": 16, "ep": 64, "tp": 1, "schedule": "1f1b"}}\n' "$mtp" > "$run"
    "$bin" plan "$run" --top 3 --rows 1 --json > "$tmp/plan.json"
    python3 - "$tmp/plan.json" "$run" "$tmp/fixed.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["layouts"][0]
run = json.load(open(sys.argv[2]))
run["parallel"] = dict(plan["parallel"], first_stage_layers=2, last_stage_layers=3)
run["parallel"].pop("stage_layers", None)
json.dump(run, open(sys.argv[3], "w"))
open(sys.argv[3] + ".row", "w").write("%s|%.3f\n" % (plan["layout"], plan["step_time_s"]))
PY
    fixed=$("$bin" simulate "$tmp/fixed.json" --json | python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['step_time_s'])")
    IFS='|' read -r layout step < "$tmp/fixed.json.row"
    echo "| $mtp | $layout | $step | $fixed |"
  done
  echo
  echo "## The Megatron-Bridge archive's B200 DeepSeek-V3 \"w/ MTP\" row"
  echo
  echo "Its run file from \`stepcast accuracy --data data/megatron-bridge-archive.jsonl --emit-runs DIR\` (pp 16; the table gives no stage split, so the converter splits the remainder 2 first / 3 last), simulated with \`training.mtp_layers\` and the end stages as shown; error against the measured step."
  echo
  echo "| mtp_layers | first / last stage layers | step s | measured s | error |"
  echo "|---:|---|---:|---:|---:|"
  "$bin" accuracy --data data/megatron-bridge-archive.jsonl --emit-runs "$tmp/arch" --json > "$tmp/arch.json"
  row=mbarchive2511-dgx-b200-DeepSeekV3-wMTP-FP8-MX-256gpu
  for cfg in "0 2 3" "1 2 3" "1 4 1"; do
    set -- $cfg
    python3 - "$tmp/arch/$row.json" "$tmp/mtp.json" "$1" "$2" "$3" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
run["training"]["mtp_layers"] = int(sys.argv[3])
run["parallel"].pop("pipeline_layout", None)  # the row's own layout gives way to the end stages shown
run["parallel"]["first_stage_layers"], run["parallel"]["last_stage_layers"] = int(sys.argv[4]), int(sys.argv[5])
json.dump(run, open(sys.argv[2], "w"))
PY
    step=$("$bin" simulate "$tmp/mtp.json" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['step_time_s'])")
    python3 - "$tmp/arch.json" "$row" "$step" "$1" "$2" "$3" <<'PY'
import json, sys
rows = {r["id"]: r for r in json.load(open(sys.argv[1]))["rows"]}
meas, step = rows[sys.argv[2]]["measured_step_s"], float(sys.argv[3])
print("| %s | %s / %s | %.3f | %.3f | %+.1f%% |" % (sys.argv[4], sys.argv[5], sys.argv[6], step, meas, 100 * (step / meas - 1)))
PY
  done
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
