#!/usr/bin/env bash
# Regenerates the example report committed under reports/: the planner's layouts for
# llama3.1-70b on 256 h100-sxm (seq 8192, batch 256), as HTML, Markdown, CSV and a screenshot
# taken in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 256 --seq 8192 --batch 256 --rows 40 --json >reports/example-plan.json
./build/stepcast report reports/example-plan.json --html reports/example-report.html --md reports/example-report.md --csv reports/example-report.csv
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,3000 \
  --screenshot="$PWD/reports/example-report.png" "file://$PWD/reports/example-report.html" 2>/dev/null
