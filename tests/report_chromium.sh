#!/usr/bin/env bash
# Renders a plan report and opens it in headless Chromium: the page must load without console
# errors and contain every plot (ranked layouts, Pareto front with its front, time breakdown,
# memory ledger, timeline); a screenshot is written next to it.
# Usage: report_chromium.sh STEPCAST OUTDIR
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: Chromium is not installed (Debian package chromium; scripts/setup.sh installs it)"
  exit 0
fi
"$bin" plan --model llama3.1-8b --hardware h100-sxm --gpus 32 --seq 4096 --batch 128 --top 3 --rows 30 --json >"$out/plan.json"
"$bin" report "$out/plan.json" --html "$out/report.html" --md "$out/report.md" --csv "$out/report.csv" >/dev/null
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0)
"$browser" "${flags[@]}" --dump-dom "file://$out/report.html" >"$out/dom.html" 2>"$out/chromium.log"
"$browser" "${flags[@]}" --window-size=1280,2600 --screenshot="$out/report.png" "file://$out/report.html" >/dev/null 2>>"$out/chromium.log"
fail=0
for id in ranked pareto breakdown ledger timeline; do
  if ! grep -q "<svg id=\"$id\"" "$out/dom.html"; then echo "FAIL: plot '$id' missing from the rendered page"; fail=1; fi
done
grep -q 'class="front-point"' "$out/dom.html" || { echo "FAIL: Pareto front points missing"; fail=1; }
if grep -E "CONSOLE|Uncaught" "$out/chromium.log"; then echo "FAIL: console messages while rendering"; fail=1; fi
[ -s "$out/report.png" ] || { echo "FAIL: no screenshot"; fail=1; }
[ "$fail" -eq 0 ] && echo "report rendered in Chromium with all plots, no console errors; screenshot $out/report.png"
exit "$fail"
