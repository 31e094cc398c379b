#!/usr/bin/env bash
# A sweep of 240 points under `mpirun -n 2` is killed (SIGKILL to every process) once 40 points
# are recorded, then resumed; its merged output must equal an uninterrupted run's, byte for byte.
# Usage: sweep_kill_resume.sh STEPCAST SWEEP.json
set -euo pipefail
bin=$1
sweep=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not installed"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun -n 2)

"${mpi[@]}" "$bin" sweep "$sweep" --out "$work/full.jsonl" >/dev/null 2>&1
test "$(wc -l <"$work/full.jsonl")" -eq 240

setsid "${mpi[@]}" "$bin" sweep "$sweep" --out "$work/cut.jsonl" >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 1 1500); do
  n=$( (cat "$work"/cut.jsonl.part* 2>/dev/null || true) | wc -l)
  [ "$n" -ge 40 ] && break
  sleep 0.01
done
pkill -9 -f "sweep $sweep --out $work/cut.jsonl" || true
kill -9 -- "-$launcher" 2>/dev/null || true
wait "$launcher" 2>/dev/null || true

done_before=$( (cat "$work"/cut.jsonl.part* 2>/dev/null || true) | grep -c '"point"' || true)
if [ -f "$work/cut.jsonl" ] || [ "$done_before" -ge 240 ]; then
  echo "FAIL: the sweep finished before it could be killed ($done_before points); make the points heavier"
  exit 1
fi
echo "killed with $done_before of 240 points recorded"

"${mpi[@]}" "$bin" sweep "$sweep" --out "$work/cut.jsonl" --resume >/dev/null 2>&1
if cmp -s "$work/full.jsonl" "$work/cut.jsonl"; then
  echo "resumed output equals the uninterrupted run (240 points)"
else
  echo "FAIL: resumed output differs"
  diff <(head -c 2000 "$work/full.jsonl") <(head -c 2000 "$work/cut.jsonl") || true
  exit 1
fi
