#!/usr/bin/env bash
# The validation loop on CPUs, as CI runs it: calibrate this machine on 2 MPI ranks, then
# execute seventeen small plans (dp 2; tp 2; pp 2 with 1F1B, ZB-H1, ZB-V and DualPipeV; ZeRO-1; FSDP with and
# without resharding after forward; a mixture of experts over ep 2; ring context parallelism over cp 2; multi-head latent attention;
# full recompute; sequence parallel; LoRA fine-tuning under DDP, FSDP and TP) with real Eigen GEMMs and MPI collectives and compare each measured step
# with the simulation using the profile just measured.
#
# Tolerances (from the validation issue, enforced by stepcast's own gates):
#   - median absolute step-time error over the seventeen plans <= 15%, every plan <= 30%. Two
#     single-threaded processes share the machine's two virtual cores with the OS and mpirun;
#     on the development machine one core's GEMM rate dropped from 37 to 31 GFLOP/s for tens
#     of seconds at a time while the other held, and the slowest rank sets a synchronous step's
#     pace. Over repeated runs the median error was 3-14% and the largest 7-22%; within a plan
#     the steps spread by 1-5% (first measured step up to 30% slower).
#   - peak memory within 10% of the ledger on every rank: the executor's caching allocator
#     measures live bytes exactly, so this bounds the ledger's closed forms (activations per
#     layer, micro-batches in flight, ZeRO sharding, working sets, logits, bucket buffer).
# The machine may change speed between the calibration and a plan: validate times a reference
# GEMM before each plan. When a gate fails and that drift exceeded 10%, the profile no longer
# describes the machine, so the test calibrates and validates again (saying so), up to three
# attempts in all. On a shared virtual machine the reference GEMM has been seen to drift 21-48%
# within one run, in either direction, and two consecutive attempts to fail that way.
# Usage: validate_cpu.sh STEPCAST SOURCE_DIR OUT_DIR
set -euo pipefail
bin=$1
src=$2
out=$3
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v mpirun >/dev/null || { echo "mpirun not found: scripts/setup.sh installs OpenMPI" >&2; exit 1; }
plans=()
for p in dp2 tp2 pp2-1f1b pp2-zb-h1 pp2-zbv pp2-dualpipev dp2-zero1 dp2-fsdp dp2-fsdp-noreshard ep2-moe cp2-ring dp2-mla dp2-recompute-full tp2-sp dp2-lora dp2-fsdp-lora tp2-lora; do plans+=("$src/configs/validate/$p.json"); done
attempt() {
  rm -f "$out/cpu-profile.json.journal" "$out/validation.json.journal"  # each attempt calibrates and validates afresh
  mpirun -n 2 "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null
  "$bin" validate "${plans[@]}" --profile "$out/cpu-profile.json" --steps 5 --warmup 1 \
    --out "$out/validation.json" --report "$out/validation.md" \
    --max-median-error 0.15 --max-error 0.30 --max-memory-error 0.10 >"$out/validate.out" 2>"$out/validate.err"
}
for try in 1 2 3; do
  attempt && break
  tail -n 9 "$out/validate.out"
  cat "$out/validate.err" | grep -v "^validate: " || true
  drift=$(sed -n 's/.*"max_abs_reference_drift": \([0-9.e+-]*\).*/\1/p' "$out/validation.json")
  if [ "$try" -lt 3 ] && awk -v d="$drift" 'BEGIN { exit !(d > 0.10) }'; then
    echo "the machine's speed drifted $drift from the calibrated profile (reference GEMM): calibrating and validating again"
  else
    exit 1
  fi
done
tail -n 9 "$out/validate.out"
echo "validated within tolerance"
