#!/usr/bin/env bash
# stepcast validate's failure handling: plans the executor cannot run or that do not fit are
# refused before any process is launched; a rank that hangs or dies ends the run within the
# timeout with a message naming the rank; a wrong process count is named.
# Usage: validate_failures.sh STEPCAST SOURCE_DIR OUT_DIR
set -uo pipefail
bin=$1
src=$2
out=$3
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail() { echo "FAIL: $*"; exit 1; }
expect() {  # expect CODE PATTERN -- command...
  local code=$1 pattern=$2
  shift 3
  local got
  "$@" >"$out/stdout" 2>"$out/stderr"
  got=$?
  [ "$got" = "$code" ] || fail "$* exited $got, expected $code: $(cat "$out/stderr")"
  grep -q -- "$pattern" "$out/stderr" || fail "$* did not say '$pattern': $(cat "$out/stderr")"
  echo "ok: $pattern"
}
tiny=$(cd "$src/configs/validate" && pwd)
# Context parallelism without load balancing is not executed (the unbalanced last rank's
# attention is not run): refused before launch, naming the field.
cat >"$out/cp2.json" <<JSON
{"model": {"path": "$tiny/gpt-tiny.json"}, "hardware": "cpu", "cluster": {"num_gpus": 2},
 "training": {"seq_len": 256, "global_batch_size": 8, "precision": "fp32", "attention": "unfused"},
 "parallel": {"cp": 2, "cp_load_balance": false, "micro_batch_size": 2}}
JSON
expect 2 "cannot execute parallel.cp_load_balance false" -- "$bin" validate "$out/cp2.json"
grep -q launching "$out/stderr" && fail "the cp plan was launched"
# A model that does not fit the CPU profile's memory: exit code 3 before launch.
cat >"$out/big.json" <<JSON
{"model": "llama3.1-70b", "hardware": "cpu", "cluster": {"num_gpus": 2},
 "training": {"seq_len": 256, "global_batch_size": 8, "precision": "fp32", "attention": "unfused"},
 "parallel": {"dp": 2, "micro_batch_size": 1}}
JSON
expect 3 "does not fit" -- "$bin" validate "$out/big.json"
# Fused attention cannot run on the CPU backend.
sed 's/"attention": "unfused"/"attention": "flash"/' "$tiny/dp2.json" >"$out/flash.json"
sed -i "s#\"gpt-tiny.json\"#\"$tiny/gpt-tiny.json\"#" "$out/flash.json"
expect 2 "training.attention" -- "$bin" validate "$out/flash.json"
# The CUDA backend on a machine without a GPU (or a build without CUDA): refused before launch.
sed 's/"precision": "fp32"/"precision": "bf16"/' "$tiny/dp2.json" >"$out/bf16.json"
sed -i "s#\"gpt-tiny.json\"#\"$tiny/gpt-tiny.json\"#" "$out/bf16.json"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  expect 2 "GPU is visible\|no CUDA backend" -- "$bin" validate "$out/bf16.json" --backend cuda
  grep -q launching "$out/stderr" && fail "a GPU plan was launched without a GPU"
fi
# A process count that does not match the plan.
expect 2 "mpirun -n 2" -- mpirun -n 1 "$bin" validate "$tiny/dp2.json"
# A rank that hangs (its watchdog names it and the phase) or dies (mpirun names it): the run
# ends within the timeout with a non-zero exit.
fault() {  # fault KIND PATTERN
  local start code took
  start=$(date +%s)
  STEPCAST_VALIDATE_FAULT=$1:1 "$bin" validate "$tiny/tp2.json" --steps 1 --warmup 0 --timeout 5 >"$out/stdout" 2>"$out/stderr"
  code=$?
  took=$(( $(date +%s) - start ))
  [ "$code" != 0 ] || fail "a rank that should $1 did not end the run"
  grep -qi "$2" "$out/stderr" || fail "no message naming the rank ($1): $(cat "$out/stderr")"
  [ "$took" -lt 60 ] || fail "ending the run ($1) took ${took}s"
  echo "ok: $1 ended the run in ${took}s: $(grep -i "$2" "$out/stderr" | head -1)"
}
fault hang "rank 1 made no progress"
fault die "rank 1"
echo "failure handling ok"
