# Sourced by the resume tests: interrupt PID JOURNAL LINES ERRFILE WHAT waits (up to 2 minutes)
# until the journal holds LINES lines, then sends SIGTERM to PID (a command started in the
# background directly, so the signal reaches it and not a subshell) and waits for it; fails,
# showing ERRFILE, when WHAT ended before that, or left no journal.
interrupt() {
  local pid=$1 journal=$2 lines=$3 err=$4 what=$5
  for _ in $(seq 1 1200); do
    if [[ -f $journal ]] && (( $(wc -l <"$journal") >= lines )); then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then echo "FAIL: $what ended before it was interrupted"; cat "$err"; exit 1; fi
    sleep 0.1
  done
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  [[ -f $journal ]] || { echo "FAIL: no journal after the interruption"; exit 1; }
}
