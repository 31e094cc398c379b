#!/usr/bin/env bash
# The validation loop on CPUs, as CI runs it: calibrate this machine on 2 MPI ranks, then
# execute nineteen small plans (dp 2; tp 2; pp 2 with GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V and DualPipeV; ZeRO-1; FSDP with and
# without resharding after forward; a mixture of experts over ep 2; ring context parallelism over cp 2; multi-head latent attention;
# full recompute; sequence parallel; LoRA fine-tuning under DDP, FSDP and TP) with real Eigen GEMMs and MPI collectives and compare each measured step
# with the simulation using the profile just measured.
#
# Tolerances (from the validation issue, enforced by stepcast's own gates):
#   - median absolute step-time error over the nineteen plans <= 15%, every plan <= 30%. Two
#     single-threaded processes share the machine's two virtual cores with the OS and mpirun,
#     and the virtual machine's speed is not a constant: a 512x1024x1024 GEMM timed back to
#     back on both cores for 80 s took 88 to 212 ms in spells of seconds, and between a
#     calibration and a plan minutes later the machine has been seen 20-60% faster or slower.
#     With each plan's five steps measured in one go, repeated runs gave a median error of
#     3-17% and a largest of 7-48% (a plan that ran while the machine was twice as slow). So
#     the plans are executed in three rounds of two measured steps each (validate --rounds 3
#     --steps 2, each round every plan with its warm-up step): a plan's six steps lie minutes
#     apart, a slow spell falls on few steps of each plan, and the median sets it aside, as the
#     calibration's passes spread over its run do for the profile. Two runs so, on a quieter
#     machine: median 4.8% and 6.4%, largest 8.8% and 13.4%.
#     validate also reports the error at the machine's current speed (the calibration's
#     reference GEMM timed beside every step), but the gates judge the raw error: on this
#     machine the reference GEMM does not track the steps' speed closely enough to judge by
#     (five runs: median 2.9-34% at the current speed against 7.9-15.2% raw).
#   - peak memory within 10% of the ledger on every rank: the executor's caching allocator
#     measures live bytes exactly, so this bounds the ledger's closed forms (activations per
#     layer, micro-batches in flight, ZeRO sharding, working sets, logits, bucket buffer).
# A calibration taken while the machine changed speed mixes speeds in one profile (a GEMM shape
# measured in a slow spell beside one measured in a fast one), which no later scaling undoes.
# When a gate fails and the calibration's reference samples spread by more than 20% or the
# plans' drift exceeded 10%, the test calibrates and validates again (saying so), up to three
# attempts in all.
# Usage: validate_cpu.sh STEPCAST SOURCE_DIR OUT_DIR
set -euo pipefail
bin=$1
src=$2
out=$3
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v mpirun >/dev/null || { echo "mpirun not found: scripts/setup.sh installs OpenMPI" >&2; exit 1; }
plans=()
for p in dp2 tp2 pp2-gpipe pp2-1f1b pp2-interleaved pp2-zb-h1 pp2-zbv pp2-dualpipev dp2-zero1 dp2-fsdp dp2-fsdp-noreshard ep2-moe cp2-ring dp2-mla dp2-recompute-full tp2-sp dp2-lora dp2-fsdp-lora tp2-lora; do plans+=("$src/configs/validate/$p.json"); done
attempt() {
  rm -f "$out/cpu-profile.json.journal" "$out/validation.json.journal" "$out/validation.json"  # each attempt calibrates and validates afresh
  mpirun -n 2 "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null
  "$bin" validate "${plans[@]}" --profile "$out/cpu-profile.json" --rounds 3 --steps 2 --warmup 1 \
    --out "$out/validation.json" --report "$out/validation.md" \
    --max-median-error 0.15 --max-error 0.30 --max-memory-error 0.10 >"$out/validate.out" 2>"$out/validate.err"
}
for try in 1 2 3; do
  attempt && break
  tail -n 9 "$out/validate.out"
  cat "$out/validate.err" | grep -v "^validate: " || true
  # The plans' largest drift, and the spread of the calibration's reference samples.
  read -r drift spread < <(python3 - "$out/validation.json" "$out/cpu-profile.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
s = json.load(open(sys.argv[2]))["calibration"]["reference_gemm"]["samples_s"]
med = sorted(s)[len(s) // 2]
print(v["summary"]["max_abs_reference_drift"], (max(s) - min(s)) / med)
PY
)
  if [ "$try" -lt 3 ] && awk -v d="$drift" -v s="$spread" 'BEGIN { exit !(d > 0.10 || s > 0.20) }'; then
    echo "the machine changed speed (plans' drift from the calibration up to $drift, calibration's reference samples spread $spread): calibrating and validating again"
  else
    exit 1
  fi
done
tail -n 9 "$out/validate.out"
echo "validated within tolerance"
