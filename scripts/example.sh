#!/usr/bin/env bash
# Sets up, builds and runs the built-in example: the memory ledger, the analytical estimate and
# the discrete-event simulation (with a Perfetto trace) of Llama 3.1 8B on 8 H100s
# (configs/examples/llama3.1-8b-h100x8.json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
./build/stepcast memory configs/examples/llama3.1-8b-h100x8.json
./build/stepcast estimate configs/examples/llama3.1-8b-h100x8.json
./build/stepcast simulate configs/examples/llama3.1-8b-h100x8.json --trace build/example-trace.json
echo "trace written to build/example-trace.json (open it in https://ui.perfetto.dev)"
