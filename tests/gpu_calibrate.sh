#!/usr/bin/env bash
# GPU test: `stepcast calibrate --backend cuda` on every visible GPU (mpirun, one process per
# GPU) writes a profile. Skipped (exit 77) where no GPU or no CUDA backend is present.
set -euo pipefail
bin=$1
out=$2
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU visible"
  exit 77
fi
if ! "$bin" --version | grep -q "backends:.*cuda"; then
  echo "SKIP: this build has no CUDA backend ($("$bin" --version))"
  exit 77
fi
n=$(nvidia-smi -L | wc -l)
mkdir -p "$out"
rm -f "$out/gpu-profile.json.journal"  # a fresh calibration (an interrupted earlier run's journal would be refused)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$n" -gt 1 ] && command -v mpirun >/dev/null; then
  mpirun -n "$n" "$bin" calibrate --backend cuda --out "$out/gpu-profile.json" --report "$out/gpu-calibration.md"
else
  "$bin" calibrate --backend cuda --out "$out/gpu-profile.json" --report "$out/gpu-calibration.md"
fi
grep "Held-out within" "$out/gpu-calibration.md"
