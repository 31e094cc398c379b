#!/usr/bin/env bash
# `stepcast calibrate --backend cpu` on 2 MPI ranks writes a profile and a report with the
# held-out comparison; a run file using that profile ({"path": ...}) then simulates.
# Usage: calibrate_cpu.sh STEPCAST OUTDIR
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if command -v mpirun >/dev/null; then
  mpirun -n 2 "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null
else
  "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null
fi
grep "Held-out within 10%" "$out/calibration.md"
cat >"$out/run.json" <<JSON
{"model": {"name": "tiny", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 4, "intermediate_size": 1024,
           "vocab_size": 1024, "hidden_act": "silu"},
 "hardware": {"path": "cpu-profile.json"},
 "cluster": {"num_gpus": 2},
 "training": {"seq_len": 256, "global_batch_size": 8, "precision": "fp32"},
 "parallel": {"dp": 2}}
JSON
"$bin" simulate "$out/run.json" | grep "step time"
echo "simulated with the measured profile"
