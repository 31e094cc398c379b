#!/usr/bin/env bash
# Hybrid sharding executes: `stepcast validate` runs configs/validate/dp4-hsdp.json (FSDP over
# dp 4 in 2 replicas of 2) and ep2-moe-hsdp.json (ZeRO-1 over dp 4 in 2 replicas, experts over
# ep 2, so the routed experts' shards are all-reduced across their replicas too) on 4 MPI
# ranks, each rank's allocations reaching the ledger's peak within 5% (--max-memory-error) and
# the replicas' all-reduces run (the data-parallel time is measured). On a 2-core machine the 4 ranks share cores, so step time is reported, not judged
# (validate_cpu.sh judges it on 2 ranks).
# Usage: validate_hsdp.sh STEPCAST SOURCE_DIR OUT_DIR
set -euo pipefail
bin=$1
src=$2
out=$3
mkdir -p "$out"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpirun -n 4 "$bin" validate "$src/configs/validate/dp4-hsdp.json" "$src/configs/validate/ep2-moe-hsdp.json" --steps 2 --warmup 1 --max-memory-error 0.05 --json --timeout 120 \
  >"$out/hsdp.json" 2>"$out/hsdp.err" || { echo "FAIL: validate exited with an error"; cat "$out/hsdp.err"; exit 1; }
python3 - "$out/hsdp.json" <<'PY'
import json, sys
for plan in json.load(open(sys.argv[1]))["plans"]:
    assert plan["layout"]["dp_replicate"] == 2, plan["layout"]
    dp = {p["phase"]: p for p in plan["phases"]}["data-parallel communication"]
    assert dp["measured_s"] > 0, "no data-parallel communication measured"
    print(f"{plan['run'].split('/')[-1]}: step {plan['measured']['step_time_s'] * 1e3:.1f} ms measured, {plan['predicted']['step_time_s'] * 1e3:.1f} ms predicted "
          f"({plan['drift_adjusted']['step_time_error'] * 100:+.1f}% at the machine's current speed); data-parallel communication "
          f"{dp['measured_s'] * 1e3:.1f} ms measured; worst rank's peak memory {plan['memory_worst_error'] * 100:.1f}% off")
PY
echo "hybrid sharding validated"
