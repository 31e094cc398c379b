#!/usr/bin/env bash
# An interrupted `stepcast validate` resumes: three plans on 2 MPI ranks, killed once the first
# plan's result is journalled (beside --out); validating again without --resume is refused
# (naming --resume); with --resume the finished plan is taken from the journal, the others are
# executed, the results hold all three plans with the journalled measurement unchanged, and
# the journal is removed.
# Usage: validate_resume.sh STEPCAST SOURCE_DIR OUT_DIR
set -euo pipefail
source "$(dirname "$0")/lib/interrupt.sh"
bin=$1
src=$2
out=$3
rm -rf "$out"
mkdir -p "$out"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
plans=("$src/configs/validate/dp2.json" "$src/configs/validate/tp2.json" "$src/configs/validate/pp2-1f1b.json")
results="$out/results.json"
journal="$results.journal"
# validate launches mpirun itself (exec: the pid is mpirun's, which takes the signal to the ranks).
"$bin" validate "${plans[@]}" --steps 2 --warmup 1 --out "$results" >/dev/null 2>"$out/first.err" &
interrupt $! "$journal" 2 "$out/first.err" validation
[[ ! -f $results ]] || { echo "FAIL: the interrupted run wrote its results"; exit 1; }
finished=$(( $(wc -l <"$journal") - 1 ))
(( finished >= 1 && finished < 3 )) || { echo "FAIL: $finished plans journalled (expected 1 or 2)"; exit 1; }
cp "$journal" "$out/journal.saved"
echo "interrupted with $finished plan(s) journalled"

if "$bin" validate "${plans[@]}" --steps 2 --warmup 1 --out "$results" >/dev/null 2>"$out/refused.err"; then
  echo "FAIL: an existing journal was overwritten without --resume"; exit 1
fi
grep -q -- "--resume" "$out/refused.err" || { echo "FAIL: the refusal does not name --resume:"; cat "$out/refused.err"; exit 1; }

"$bin" validate "${plans[@]}" --steps 2 --warmup 1 --out "$results" --resume >/dev/null 2>"$out/resume.err" ||
  { echo "FAIL: the resumed validation failed"; cat "$out/resume.err"; exit 1; }
grep -q "resuming: $finished plan runs finished" "$out/resume.err" || { echo "FAIL: the resumed run does not report $finished finished plans"; cat "$out/resume.err"; exit 1; }
[[ ! -e $journal ]] || { echo "FAIL: the journal was left after the results were written"; exit 1; }
python3 - "$results" "$out/journal.saved" <<'PY'
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
assert len(plans) == 3, f"{len(plans)} plans in the results"
assert [p["run"].split("/")[-1] for p in plans] == ["dp2.json", "tp2.json", "pp2-1f1b.json"], [p["run"] for p in plans]
lines = open(sys.argv[2]).read().splitlines()[1:]
for i, line in enumerate(lines):
    # The journal holds each plan's measurement (one round): the results compare exactly it.
    assert json.loads(line)["value"]["step_s"] == plans[i]["measured"]["steps_s"], f"plan {i} differs from its journalled measurement"
print(f"resumed: {len(lines)} plan(s) from the journal, {3 - len(lines)} executed; results hold all 3")
PY
# A damaged journal (a trace event of a category that does not exist) is refused with exit 2,
# naming the journal, the plan and the field, before anything is measured.
python3 - "$out/journal.saved" "$journal" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
entry = json.loads(lines[1])
entry["value"]["ranks"][0]["trace"][0][3] = 99
open(sys.argv[2], "w").write(lines[0] + "\n" + json.dumps(entry) + "\n")
PY
set +e
"$bin" validate "${plans[@]}" --steps 2 --warmup 1 --out "$results" --resume >/dev/null 2>"$out/damaged.err"
rc=$?
set -e
(( rc == 2 )) || { echo "FAIL: a damaged journal gave exit $rc, not 2"; cat "$out/damaged.err"; exit 1; }
grep -q "results.json.journal: .*dp2.json: a trace event's category is 99" "$out/damaged.err" ||
  { echo "FAIL: the refusal of a damaged journal does not name the journal, plan and field:"; cat "$out/damaged.err"; exit 1; }
echo "resumed validation complete"
