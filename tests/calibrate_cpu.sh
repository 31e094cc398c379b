#!/usr/bin/env bash
# `stepcast calibrate --backend cpu` on 2 MPI ranks writes a profile and a report with the
# held-out comparison; a run file using that profile ({"path": ...}) then simulates.
# Fails when calibration takes 2 minutes or more, or when a held-out size (not a fitted point)
# is predicted more than 10% off although the passes measuring it agreed within 10%. A held-out
# benchmark also agrees when it is within 10% with the machine held at one speed (the report's
# `within pass` column: a collective against the cost model's interpolation between its two
# fitted neighbours measured moments before and after it in the same passes, a GEMM with each
# pass's speed change taken out through the fitted shapes measured beside it): the shared
# machine's speed changes between passes, which the profile's per-size medians mix, and then the
# profile, not the model, is off there. A miss on a point whose own repeated measurements
# disagree by more than the tolerance says the machine changed speed while it was measured, and
# is reported, not failed (unless fewer than 90% of the held-out sizes agree within 10%).
# Usage: calibrate_cpu.sh STEPCAST OUTDIR
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# One calibration and its checks; prints why it failed.
calibrate_and_check() {
  start=$(date +%s)
  rm -f "$out/cpu-profile.json.journal"  # each attempt calibrates afresh (a failed one's journal would be refused)
  if command -v mpirun >/dev/null; then
    mpirun -n 2 "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null ||
      { echo "FAIL: calibrate exited with an error"; return 1; }
  else
    "$bin" calibrate --backend cpu --out "$out/cpu-profile.json" --report "$out/calibration.md" --budget 0.3 >/dev/null ||
      { echo "FAIL: calibrate exited with an error"; return 1; }
  fi
  elapsed=$(( $(date +%s) - start ))
  echo "calibration took ${elapsed} s"
  if (( elapsed >= 120 )); then echo "FAIL: calibration took ${elapsed} s (limit 120 s)"; return 1; fi
  line=$(grep "Held-out within 10%" "$out/calibration.md") || { echo "FAIL: the report has no held-out summary"; return 1; }
  echo "$line"
  within=$(sed -E 's/.*within 10%: ([0-9]+) of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.*within 10%: ([0-9]+) of ([0-9]+).*/\2/' <<<"$line")
  drift=0 noisy=0
  if [[ $line =~ outside,\ ([0-9]+)\ were\ within ]]; then drift=${BASH_REMATCH[1]}; fi
  if [[ $line =~ and\ ([0-9]+)\ of\ the\ rest ]]; then noisy=${BASH_REMATCH[1]}; fi
  agree=$(( within + drift ))
  if (( total < 40 )); then echo "FAIL: only $total held-out sizes"; return 1; fi
  if (( total - agree - noisy > 0 )); then
    echo "FAIL: $(( total - agree - noisy )) held-out sizes outside 10% with steady measurements"
    grep -E "^\| (gemm [a-z0-9]+ [0-9]|(all_|reduce|broadcast|send)[a-z_]* [0-9])" "$out/calibration.md"
    return 1
  fi
  if (( agree * 10 < total * 9 )); then
    echo "FAIL: only $agree of $total held-out sizes agree within 10%"
    grep -E "^\| (gemm [a-z0-9]+ [0-9]|(all_|reduce|broadcast|send)[a-z_]* [0-9])" "$out/calibration.md"
    return 1
  fi
  return 0
}
# The shared machine's speed can change mid-run for longer than the passes notice; further
# runs separate that from a model error, which fails every run. Up to three runs (each held to
# the 2-minute limit and the 10% rule on its own; the ctest timeout allows three).
ok=0
t0=$(date +%s)
for attempt in 1 2 3; do
  if calibrate_and_check; then ok=1; break; fi
  # Another run must fit before the ctest timeout (420 s), a run taking up to 120 s.
  if (( attempt == 3 || $(date +%s) - t0 > 280 )); then break; fi
  echo "calibration $attempt failed its checks; calibrating again"
done
(( ok )) || exit 1
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
