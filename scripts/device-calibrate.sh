#!/usr/bin/env bash
# One call on the lent GPU machine (nvcc and CMake, no Debian packages): builds stepcast with
# the carried headers (scripts/vendor-deps.sh, carry build-deps), calibrates the GPU(s), then
# validates the single-GPU plans of configs/validate/h200 with the CUDA executor and the
# profile just measured; writes the profile, reports and a short table to $OUT.
#   run(command="bash scripts/device-calibrate.sh", carry=["build-deps"], timeout_s=540)
# The calibration journals every measurement to $OUT/measured-h200.json.journal as it goes, so
# a call cut short by its time limit still brings it back; copied to
# build-deps/measured-h200.json.journal (ignored, carried with build-deps), the next call
# resumes from it instead of measuring again.
set -euo pipefail
out=${OUT:-/tmp/stepcast-out}
mkdir -p "$out"
start=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSTEPCAST_DEPS_DIR="$PWD/build-deps" -DSTEPCAST_BUILD_TESTS=OFF \
  -DSTEPCAST_BUILD_BENCH=OFF -DSTEPCAST_CUDA_ARCHS=90 >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep "stepcast:" "$out/configure.log"
if ! grep -q "CUDA backends enabled" "$out/configure.log"; then
  # Say what the machine has, so the next attempt can point CMake at it.
  command -v nvcc; nvcc --version | tail -2
  ls /usr/local/cuda/lib64 2>/dev/null | grep -E "cublas|nccl" | head
  python3 -c "import nvidia, os; print(list(nvidia.__path__))" 2>&1
  exit 1
fi
cmake --build build-gpu -j "$(nproc)" --target stepcast >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "built in $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv | tee "$out/nvidia-smi.csv"
n=$(nvidia-smi -L | wc -l)
if [ "$n" -gt 1 ] && command -v mpirun >/dev/null; then
  launch=(mpirun --allow-run-as-root -n "$n")
else
  launch=()
fi
resume=()
if [ -f build-deps/measured-h200.json.journal ]; then
  cp build-deps/measured-h200.json.journal "$out/measured-h200.json.journal"
  resume=(--resume)
  echo "resuming the calibration journalled by an earlier call"
fi
"${launch[@]}" ./build-gpu/stepcast calibrate --backend cuda --budget 0.3 --time-limit 300 --out "$out/measured-h200.json" "${resume[@]}" \
  --report "$out/calibration-h200.md" --html "$out/calibration-h200.html" 2>"$out/calibrate.log" || { tail -40 "$out/calibrate.log"; exit 1; }
echo "calibrated in $(( $(date +%s) - start )) s"
grep -E "GEMM fit|copy|Held-out within|^\| (bf16|fp16|fp8|tf32|fp32) \||^\| stepcast tiled|^\| (rmsnorm|swiglu|add) |^- GEMM|^- attention" "$out/calibration-h200.md"
# Validation: single-GPU plans (micro-batch, recompute and sequence length varied on a model
# that fills the H200) executed with cuBLAS and measured against the simulation.
./build-gpu/stepcast validate configs/validate/h200/*.json --backend cuda --profile "$out/measured-h200.json" --steps 3 --warmup 1 \
  --report "$out/validation-h200.md" --out "$out/validation-h200.json" 2>"$out/validate.log" || { tail -40 "$out/validate.log"; exit 1; }
echo "validated in $(( $(date +%s) - start )) s"
grep -A8 "^| plan" "$out/validation-h200.md"
