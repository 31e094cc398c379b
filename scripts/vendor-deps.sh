#!/usr/bin/env bash
# Copies the header-only dependencies (nlohmann/json, CLI11, Eigen) from this machine's Debian
# packages into build-deps/ (ignored by git), so they can be carried to a machine without
# Debian packages (the lent GPU machine) and found there with -DSTEPCAST_DEPS_DIR=build-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf build-deps
mkdir -p build-deps
cp -r /usr/include/nlohmann build-deps/
cp -r /usr/include/CLI build-deps/
mkdir -p build-deps/eigen3
cp -r /usr/include/eigen3/Eigen build-deps/eigen3/
du -sh build-deps
