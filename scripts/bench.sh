#!/usr/bin/env bash
# Runs the benchmarks and writes reports/performance.md (command, machine, date, results).
# Each benchmark runs in its own process so the all-ranks peak RSS is that run's own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=reports/performance.md
tmp=$(mktemp -d)
for f in BM_EngineEvents BM_Llama405bSymmetric BM_Llama405bAllRanks BM_DeepseekV3Symmetric; do
  ./build/stepcast_bench --benchmark_filter="^${f}(/|$)" --benchmark_format=console >"$tmp/$f.txt" 2>&1
done
# Best wall time, in seconds, of N runs of a command (the CLI end to end).
best_of() {
  local n=$1 best=999999 s e i
  shift
  for ((i = 0; i < n; i++)); do
    s=$(date +%s.%N)
    "$@" >/dev/null
    e=$(date +%s.%N)
    best=$(python3 -c "print(min($best, $e - $s))")
  done
  echo "$best"
}
# Planner wall time (best of 3); start-up, a command whose work takes milliseconds (best of 5).
plan_time() { printf '%.2f s' "$(best_of 3 "$@")"; }
start_ms() { printf '%.0f ms' "$(python3 -c "print($(best_of 5 "$@") * 1e3)")"; }
version_cmd="./build/stepcast --version"
memory_cmd="./build/stepcast memory configs/examples/llama3.1-8b-h100x8.json"
version_ms=$(start_ms $version_cmd)
memory_ms=$(start_ms $memory_cmd)
plan70_cmd="./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 1024 --seq 8192 --batch 1024"
plan405_cmd="./build/stepcast plan --model llama3.1-405b --hardware h100-sxm --gpus 16384 --seq 8192 --batch 2048"
# The same 70B search with CPU offload tried on the sharded layouts (about twice the layouts).
planoff_cmd="./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 1024 --seq 8192 --batch 1024 --offload"
# The same 70B search kept to torchtitan, each layout costed as torchtitan runs it (its exported
# config imported back, per layout).
plantt_cmd="./build/stepcast plan --model llama3.1-70b --hardware h100-sxm --gpus 1024 --seq 8192 --batch 1024 --framework torchtitan"
# An MoE search (expert parallelism multiplies the space) with the process's peak memory.
planmoe_cmd="./build/stepcast plan --model qwen3-30b-a3b --hardware h100-sxm --gpus 256 --seq 4096 --batch 1024"
peak_rss_gib() {
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print("%.2f GiB" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1048576))' "$@"
}
plan70=$(plan_time $plan70_cmd)
plan405=$(plan_time $plan405_cmd)
planoff=$(plan_time $planoff_cmd)
planoff_head=$($planoff_cmd | sed -n 1p)
plantt=$(plan_time $plantt_cmd)
plantt_head=$($plantt_cmd | sed -n 1p)
plan70_head=$($plan70_cmd | sed -n 1p)  # sed reads to the end: no SIGPIPE under pipefail
plan405_head=$($plan405_cmd | sed -n 1p)
planmoe=$(plan_time $planmoe_cmd)
planmoe_rss=$(peak_rss_gib $planmoe_cmd)
planmoe_head=$($planmoe_cmd | sed -n 1p)
# One run of a long search: wall time, the process's peak RSS and the first line of its
# output, tab-separated.
one_run() {
  python3 -c 'import resource, subprocess, sys, time
t = time.monotonic()
out = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, check=True, text=True).stdout
wall = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1048576
print("%.1f s\t%.2f GiB\t%s" % (wall, rss, out.splitlines()[0]))' "$@"
}
# The largest MoE search: DeepSeek-V3 on 2,048 H800s in fp8 (about two million layouts), run
# once (about half a minute here).
plands_cmd="./build/stepcast plan --model deepseek-v3 --hardware h800 --gpus 2048 --seq 4096 --batch 4096 --precision fp8"
IFS=$'\t' read -r plands plands_rss plands_head < <(one_run $plands_cmd)
# The same model on 16,384 H800s: the data-parallel groups reach 1,024 ranks.
plands16k_cmd="./build/stepcast plan --model deepseek-v3 --hardware h800 --gpus 16384 --seq 4096 --batch 16384 --precision fp8"
IFS=$'\t' read -r plands16k plands16k_rss plands16k_head < <(one_run $plands16k_cmd)
{
  echo "# stepcast performance"
  echo
  echo "Regenerate with \`bash scripts/bench.sh\` (Google Benchmark, bench/engine_bench.cpp)."
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- machine: $(nproc) CPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- build: $(grep CMAKE_BUILD_TYPE:STRING build/CMakeCache.txt | cut -d= -f2), $(c++ --version | head -1)"
  echo
  echo "Targets (issue 3): llama3.1-405b on 16,384 h100-sxm (tp 8, pp 16 with first and last stages"
  echo "one layer short, dp 128, seq 8192, global batch 2048, mbs 1, 1F1B) with symmetry < 0.5 s; the"
  echo "same step with every rank simulated (one-rank slowdown scenario) < 30 s and < 8 GiB."
  echo "Issue 4: deepseek-v3 on 2,048 h800 (pp 16, ep 64, dp 128, tp 1) with symmetry < 2 s."
  echo "Issue 5: \`stepcast plan\` for llama3.1-70b on 1,024 h100-sxm (seq 8192, batch 1024) < 5 s;"
  echo "llama3.1-405b on 16,384 h100-sxm searching the full space < 10 s (this machine: $(nproc) cores)."
  echo
  echo "This shared 2-core VM changes speed by up to 3x for minutes at a time (on 2026-12-04 the same"
  echo "binary timed the 405B symmetric step at 1.7 ms and at 4.6-5.5 ms); compare figures from one run."
  echo
  echo "## Start-up (CLI wall time, best of 5)"
  echo
  echo "\`stepcast\` links no CUDA library (the CUDA backends are \`stepcast-cuda\`, which it starts for"
  echo "\`--backend cuda\`); linked in, cuBLASLt's static initialisation cost every command about 0.34 s."
  echo
  echo "- \`$version_cmd\`: $version_ms"
  echo "- \`$memory_cmd\`: $memory_ms"
  echo
  echo "## Planner (CLI wall time, best of 3)"
  echo
  echo "- \`$plan70_cmd\`: $plan70 ($plan70_head)"
  echo "- \`$plan405_cmd\`: $plan405 ($plan405_head)"
  echo "- \`$planoff_cmd\`: $planoff ($planoff_head)"
  echo "- \`$plantt_cmd\`: $plantt ($plantt_head)"
  echo "- \`$planmoe_cmd\`: $planmoe, peak RSS $planmoe_rss ($planmoe_head)"
  echo "- \`$plands_cmd\`: $plands (one run), peak RSS $plands_rss ($plands_head)"
  echo "- \`$plands16k_cmd\`: $plands16k (one run), peak RSS $plands16k_rss ($plands16k_head)"
  echo
  for f in BM_EngineEvents BM_Llama405bSymmetric BM_Llama405bAllRanks BM_DeepseekV3Symmetric; do
    echo "## $f"
    echo
    echo '```'
    grep -E "^(Benchmark|BM_|-)" "$tmp/$f.txt" || cat "$tmp/$f.txt"
    echo '```'
    echo
  done
  sym_ms=$(awk '/^BM_Llama405bSymmetric/ {print $2, $3}' "$tmp/BM_Llama405bSymmetric.txt")
  all_s=$(awk '/^BM_Llama405bAllRanks/ {print $2, $3}' "$tmp/BM_Llama405bAllRanks.txt")
  all_rss=$(grep -o 'peak_rss_GiB=[0-9.]*' "$tmp/BM_Llama405bAllRanks.txt" | cut -d= -f2)
  eps=$(grep -o 'events_per_s=[0-9.]*[kMG]*' "$tmp/BM_EngineEvents.txt" | cut -d= -f2)
  ds_ms=$(awk '/^BM_DeepseekV3Symmetric/ {print $2, $3}' "$tmp/BM_DeepseekV3Symmetric.txt")
  echo "## Summary"
  echo
  echo "| measure | result | target |"
  echo "|---|---|---|"
  echo "| engine throughput | ${eps} events/s | - |"
  echo "| 405B step on 16,384 GPUs, symmetric | ${sym_ms} | < 0.5 s |"
  echo "| same step, every rank simulated (one slow rank) | ${all_s} | < 30 s |"
  echo "| its peak memory (process RSS) | ${all_rss} GiB | < 8 GiB |"
  echo "| deepseek-v3 step on 2,048 h800 (pp 16, ep 64, dp 128), symmetric | ${ds_ms} | < 2 s (issue 4) |"
  echo "| plan llama3.1-70b on 1,024 GPUs (enumerate, estimate, simulate the top 5 and up to 10 more) | ${plan70} | < 5 s (issue 5) |"
  echo "| plan llama3.1-405b on 16,384 GPUs (full space) | ${plan405} | < 10 s (issue 5) |"
  echo "| plan llama3.1-70b on 1,024 GPUs with --offload | ${planoff} | - |"
  echo "| plan qwen3-30b-a3b on 256 GPUs (MoE: ep, etp and selective recompute searched too) | ${planmoe}, ${planmoe_rss} peak RSS | - |"
  echo "| plan deepseek-v3 on 2,048 h800 in fp8 (the largest MoE space here) | ${plands}, ${plands_rss} peak RSS | - |"
  echo "| plan deepseek-v3 on 16,384 h800 in fp8 | ${plands16k}, ${plands16k_rss} peak RSS | - |"
} >"$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$tmp"
cat "$out"
