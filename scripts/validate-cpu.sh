#!/usr/bin/env bash
# Regenerates the CPU validation evidence: calibrates this machine on 2 MPI ranks
# (configs/hardware/measured/cpu-2proc-example.json, reports/calibration-cpu.{md,html}; the
# built-in "cpu" profile is a copy of it), then executes the nineteen validation plans with that
# profile and writes reports/validation.md (+ .json and the measured and simulated traces of
# the last plan, and validation.html: predicted against measured per plan and phase).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
profile=configs/hardware/measured/cpu-2proc-example.json
rm -f $profile.journal  # a fresh calibration
mpirun -n 2 ./build/stepcast calibrate --backend cpu --out $profile --report reports/calibration-cpu.md --html reports/calibration-cpu.html >/dev/null
python3 - "$profile" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["name"] = "cpu"
j["description"] = ("The local CPU with one process per simulated GPU (stepcast validate --backend cpu): an example measured by "
                    "`mpirun -n 2 stepcast calibrate --backend cpu` on a 2-core AMD EPYC machine (scripts/validate-cpu.sh). "
                    "Measure your own machine with calibrate and pass the profile with --profile.")
with open("configs/hardware/cpu.json", "w") as f:
    json.dump(j, f, indent=2)
    f.write("\n")
PY
rm -f reports/validation.json.journal  # a fresh validation
./build/stepcast validate configs/validate/{dp2,tp2,pp2-gpipe,pp2-1f1b,pp2-interleaved,pp2-zb-h1,pp2-zbv,pp2-dualpipev,dp2-zero1,dp2-fsdp,dp2-fsdp-noreshard,ep2-moe,cp2-ring,dp2-mla,dp2-recompute-full,tp2-sp,dp2-lora,dp2-fsdp-lora,tp2-lora}.json --profile $profile \
  --rounds 3 --steps 2 --warmup 1 --report reports/validation.md --out reports/validation.json \
  --trace reports/validation-trace-measured.json --sim-trace reports/validation-trace-simulated.json
./build/stepcast report reports/validation.json --html reports/validation.html
