#!/usr/bin/env bash
# Regenerates the golden simulation outputs the tests compare against (tests/data/golden/).
# Run after a deliberate model change and commit the diff with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
for f in configs/examples/*.json; do
  stem=$(basename "$f" .json)
  ./build/stepcast simulate "$f" --json --allow-oom > "tests/data/golden/$stem.simulate.json.tmp"
  python3 - "$stem" <<'PY'
import json, sys
stem = sys.argv[1]
d = json.load(open(f"tests/data/golden/{stem}.simulate.json.tmp"))
keep = {k: d[k] for k in ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "peak_memory_bytes",
                          "memory_timeline_peak_bytes", "pipeline_time_s")}
keep["breakdown"] = d["breakdown"]
json.dump(keep, open(f"tests/data/golden/{stem}.simulate.json", "w"), indent=2, sort_keys=True)
PY
  rm "tests/data/golden/$stem.simulate.json.tmp"
done
ls tests/data/golden
