#!/usr/bin/env bash
# An interrupted `stepcast calibrate` resumes: a CPU calibration on 2 MPI ranks is killed once
# its journal holds 60 measurements; calibrating again without --resume is refused (naming
# --resume, the journal left whole); with --resume every recorded measurement is reused (the
# progress and the profile's sources say how many), the rest is measured, the profile is
# written and the journal removed.
# Usage: calibrate_resume.sh STEPCAST OUTDIR
set -euo pipefail
source "$(dirname "$0")/lib/interrupt.sh"
bin=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
launch=()
if command -v mpirun >/dev/null; then launch=(mpirun -n 2); fi
profile="$out/profile.json"
journal="$profile.journal"
calibrate() { "${launch[@]}" "$bin" calibrate --backend cpu --out "$profile" --budget 0.02 "$@"; }

# Started directly (not through the function, whose subshell would take the signal instead).
"${launch[@]}" "$bin" calibrate --backend cpu --out "$profile" --budget 0.02 >/dev/null 2>"$out/first.err" &
interrupt $! "$journal" 61 "$out/first.err" calibration
[[ ! -f $profile ]] || { echo "FAIL: the interrupted run wrote a profile"; exit 1; }
# Complete entries (a line cut by the kill is not one): every line after the header that ends in a newline.
recorded=$(( $(wc -l <"$journal") - 1 ))
echo "interrupted with $recorded measurements journalled"

if calibrate >/dev/null 2>"$out/refused.err"; then echo "FAIL: an existing journal was overwritten without --resume"; exit 1; fi
grep -q -- "--resume" "$out/refused.err" || { echo "FAIL: the refusal does not name --resume:"; cat "$out/refused.err"; exit 1; }
(( $(wc -l <"$journal") - 1 == recorded )) || { echo "FAIL: the refused run changed the journal"; exit 1; }

calibrate --resume --report "$out/calibration.md" >/dev/null 2>"$out/resume.err" || { echo "FAIL: the resumed calibration failed"; cat "$out/resume.err"; exit 1; }
grep -q "resuming: $recorded measurements recorded" "$out/resume.err" || { echo "FAIL: the resumed run does not report $recorded recorded measurements"; head -3 "$out/resume.err"; exit 1; }
[[ -f $profile ]] || { echo "FAIL: no profile after resuming"; exit 1; }
[[ ! -e $journal ]] || { echo "FAIL: the journal was left after the profile was written"; exit 1; }
line=$(grep -o "resumed: $recorded of [0-9]* measurements" "$profile") || { echo "FAIL: the profile does not say $recorded measurements were reused"; exit 1; }
echo "$line"
# The resumed profile is a profile (every field checked as a run file's {"path": ...} reads it).
"$bin" hardware "$profile" >/dev/null || { echo "FAIL: the resumed profile does not load"; exit 1; }
echo "resumed calibration complete"
