#!/usr/bin/env bash
# Regenerates reports/estimate-vs-simulate.md: how far the analytical estimate (the planner's
# fast pass) lands from the discrete-event simulation over a seeded sample of layouts of nine
# models (dense, MoE, MLA, hybrid Mamba-2, Gated DeltaNet with MoE and with dense MLPs): every parallel dimension, schedule, ZeRO stage and recompute mode the
# planner searches. Layouts the simulation refuses (they do not fit) are counted, not compared.
# Pipelined layouts are also run on the planner's cost-balanced split (--balanced-split).
# Needs a built ./build/stepcast. Usage: bash scripts/estimate-vs-simulate.sh [layouts per model]
set -euo pipefail
cd "$(dirname "$0")/.."
per_model=${1:-150}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$per_model" "$tmp" <<'EOF'
import itertools, json, os, random, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

per_model, tmp = int(sys.argv[1]), sys.argv[2]
BIN = os.environ.get("STEPCAST_BIN", "./build/stepcast")
# name: (run file, layers, GPUs, global batch, expert-parallel choices)
BASES = {
    "llama3.1-8b": ({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 64},
                     "training": {"seq_len": 8192, "global_batch_size": 256, "precision": "bf16"}}, 32, 64, 256, [None]),
    "llama3.1-70b": ({"model": "llama3.1-70b", "hardware": "h100-sxm", "cluster": {"num_gpus": 256},
                      "training": {"seq_len": 8192, "global_batch_size": 512, "precision": "bf16"}}, 80, 256, 512, [None]),
    "llama3.1-405b": ({"model": "llama3.1-405b", "hardware": "h100-sxm", "cluster": {"num_gpus": 2048},
                       "training": {"seq_len": 8192, "global_batch_size": 2048, "precision": "bf16"}}, 126, 2048, 2048, [None]),
    "mixtral-8x7b": ({"model": "mixtral-8x7b", "hardware": "h100-sxm", "cluster": {"num_gpus": 128},
                      "training": {"seq_len": 4096, "global_batch_size": 512, "precision": "bf16"}}, 32, 128, 512, [1, 2, 4, 8]),
    "qwen3-30b-a3b": ({"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "cluster": {"num_gpus": 64},
                       "training": {"seq_len": 4096, "global_batch_size": 512, "precision": "bf16"}}, 48, 64, 512, [1, 4, 8, 16]),
    "deepseek-v3": ({"model": "deepseek-v3", "hardware": "h800", "cluster": {"num_gpus": 2048},
                     "training": {"seq_len": 4096, "global_batch_size": 4096, "precision": "fp8"}}, 61, 2048, 4096, [8, 16, 32, 64]),
    "nemotron-h-56b": ({"model": "nemotron-h-56b", "hardware": "h100-sxm", "cluster": {"num_gpus": 128},
                        "training": {"seq_len": 8192, "global_batch_size": 384, "precision": "fp8"}}, 118, 128, 384, [None]),
    "qwen3-next-80b-a3b": ({"model": "qwen3-next-80b-a3b", "hardware": "h100-sxm", "cluster": {"num_gpus": 64},
                            "training": {"seq_len": 4096, "global_batch_size": 512, "precision": "bf16"}}, 48, 64, 512, [4, 8, 16, 32]),
    "qwen3.5-27b": ({"model": "qwen3.5-27b", "hardware": "h100-sxm", "cluster": {"num_gpus": 64},
                     "training": {"seq_len": 8192, "global_batch_size": 256, "precision": "bf16"}}, 64, 64, 256, [None]),
}
# Models that refuse context parallelism (none of those sampled).
NO_CP = set()

def end_split(L, pp, vpp):
    """First/last stage layers when L does not divide over pp * vpp: the most balanced split
    whose ends are no longer than the middle stages ("bad" when there is none)."""
    if L % (pp * vpp) == 0:
        return None
    best = None
    for f in range(vpp, L, vpp):
        for l in (f, f - vpp, f + vpp):
            rest = L - f - l
            if l <= 0 or (pp == 2 and rest != 0) or (pp > 2 and (rest <= 0 or rest % ((pp - 2) * vpp))):
                continue
            mid = rest // (pp - 2) if pp > 2 else max(f, l)
            if f > mid or l > mid:
                continue
            score = (mid - f) + (mid - l)
            if best is None or score < best[0]:
                best = (score, f, l)
    return "bad" if best is None else (best[1], best[2])

def layouts(name, rng):
    base, L, N, gbs, eps = BASES[name]
    dims = list(itertools.product([1, 2, 4, 8], [1, 2, 4, 8, 16], ["1f1b", "gpipe", "zb-h1", "interleaved", "zbv", "dualpipev"], [1, 2],
                                  ["0", "1", "3", "fsdp", "hsdp"], ["none", "selective", "full"], [1, 2, 4], eps))
    rng.shuffle(dims)
    out = []
    for tp, pp, sched, mbs, zero, rc, cp, ep in dims:
        vpp = 2 if sched in ("interleaved", "zbv", "dualpipev") else 1
        if cp > 1 and name in NO_CP:
            continue
        if pp == 1 and sched in ("interleaved", "zb-h1", "gpipe", "zbv", "dualpipev"):
            continue
        if N % (tp * pp * cp):
            continue
        dp = N // (tp * pp * cp)
        if gbs % (dp * mbs):
            continue
        m = gbs // (dp * mbs)
        if (sched == "interleaved" and m % pp) or (sched == "dualpipev" and m < 2 * pp):
            continue
        if ep is not None and (dp * cp) % ep:
            continue
        split = end_split(L, pp, vpp) if pp > 1 else None
        if split == "bad" or (pp == 1 and L % vpp):
            continue
        # Hybrid sharding: each node's data-parallel ranks shard, the nodes replicate.
        replicas = 1
        if zero == "hsdp":
            in_node = 8 // (tp * cp) if 8 % (tp * cp) == 0 else 0
            if not in_node or dp % in_node or dp // in_node < 2 or (ep is not None and (tp * dp * cp // ep) % (dp // in_node)):
                continue
            replicas = dp // in_node
        par = {"tp": tp, "pp": pp, "cp": cp, "micro_batch_size": mbs, "schedule": sched, "recompute": rc}
        if vpp > 1:
            par["vpp"] = vpp
        if zero in ("fsdp", "hsdp"):
            par["fsdp"] = True
        else:
            par["zero_stage"] = int(zero)
        if tp > 1:
            par["sp"] = True
        if ep is not None:
            par["ep"] = ep
        if split:
            par["first_stage_layers"], par["last_stage_layers"] = split
        if replicas > 1:
            par["dp_replicate"] = replicas
        run = dict(base, parallel=par)
        out.append((name, run))
        if len(out) >= per_model:
            break
    return out

def step(cmd, path, *extra):
    p = subprocess.run([BIN, cmd, path, "--json", *extra], capture_output=True, text=True)
    return json.loads(p.stdout)["step_time_s"] if p.returncode == 0 else None

def one(job):
    i, (name, run) = job
    path = os.path.join(tmp, f"run{i}.json")
    with open(path, "w") as f:
        json.dump(run, f)
    e = step("estimate", path, "--allow-oom")
    if e is None:
        return name, run, None, None, None, None
    s = step("simulate", path)
    # The same layout on the planner's cost-balanced split (pipelined layouts that simulate).
    eb = sb = None
    if s is not None and run["parallel"]["pp"] > 1:
        eb = step("estimate", path, "--allow-oom", "--balanced-split")
        sb = step("simulate", path, "--balanced-split") if eb is not None else None
    return name, run, e, s, eb, sb

rng = random.Random(2026)
jobs = [j for name in BASES for j in layouts(name, rng)]
with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
    res = list(ex.map(one, enumerate(jobs)))

def layout(par):
    s = f"tp{par['tp']} pp{par['pp']} cp{par['cp']}"
    if "ep" in par: s += f" ep{par['ep']}"
    if "vpp" in par: s += f" v{par['vpp']}"
    s += f" mbs{par['micro_batch_size']} {par['schedule']} " + ("fsdp" if par.get("fsdp") else f"zero{par['zero_stage']}") + (f"x{par['dp_replicate']}" if "dp_replicate" in par else "") + f" rc-{par['recompute']}"
    return s

compared = [(n, r, e, s, e / s - 1.0) for n, r, e, s, _, _ in res if e is not None and s is not None]
invalid = sum(1 for _, _, e, s, _, _ in res if e is None)
unfit = sum(1 for _, _, e, s, _, _ in res if e is not None and s is None)
# Cost-balanced splits: (model, estimate gap, simulated step against the layout's own split).
balanced = [(n, eb / sb - 1.0, sb / s - 1.0) for n, r, e, s, eb, sb in res if eb is not None and sb is not None]
balanced_unfit = sum(1 for n, r, e, s, eb, sb in res if eb is not None and sb is None)
gaps = sorted(g for *_, g in compared)
def pct(p):
    return gaps[min(len(gaps) - 1, int(p * len(gaps)))] if gaps else float("nan")
lines = []
lines.append("# Analytical estimate against the simulation")
lines.append("")
lines.append(f"Regenerate with `bash scripts/estimate-vs-simulate.sh {per_model}`: {len(jobs)} layouts ({per_model} per model, seeded), each run through `stepcast estimate --json` and `stepcast simulate --json`; gap = estimate / simulate - 1. {len(compared)} compared; {unfit} do not fit in memory (the simulation refuses them) and {invalid} are invalid (e.g. heads or experts that do not divide).")
lines.append("")
lines.append("| percentile | 1 | 5 | 25 | 50 | 75 | 95 | 99 |")
lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
lines.append("| gap | " + " | ".join(f"{pct(p) * 100:+.1f}%" for p in (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)) + " |")
lines.append("")
lines.append(f"Beyond 5%: {sum(abs(g) > 0.05 for g in gaps)}; beyond 10%: {sum(abs(g) > 0.10 for g in gaps)}.")
lines.append("")
lines.append("| model | compared | median gap | worst gap | beyond 10% | of them ZeRO-3/FSDP |")
lines.append("|---|---:|---:|---:|---:|---:|")
for name in BASES:
    rows = [x for x in compared if x[0] == name]
    g = sorted(x[4] for x in rows)
    if g:
        worst = max(g, key=abs)
        far = [x for x in rows if abs(x[4]) > 0.10]
        z3 = sum(1 for x in far if x[1]["parallel"].get("fsdp") or x[1]["parallel"].get("zero_stage") == 3)
        lines.append(f"| {name} | {len(g)} | {g[len(g) // 2] * 100:+.1f}% | {worst * 100:+.1f}% | {len(far)} | {z3} |")
lines.append("")
lines.append("The ten largest gaps:")
lines.append("")
lines.append("| model | layout | estimate s | simulate s | gap |")
lines.append("|---|---|---:|---:|---:|")
for n, r, e, s, g in sorted(compared, key=lambda x: -abs(x[4]))[:10]:
    lines.append(f"| {n} | {layout(r['parallel'])} | {e:.3f} | {s:.3f} | {g * 100:+.1f}% |")
lines.append("")
lines.append("## Cost-balanced splits")
lines.append("")
bg = sorted(b[1] for b in balanced)
ch = sorted(b[2] for b in balanced)
def pct_of(v, p):
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
lines.append(f"Every compared layout with a pipeline again with `--balanced-split` (the planner's cost-balanced split of its layers): {len(balanced)} compared, {balanced_unfit} no longer fit. The estimate against the simulation on those splits, and the simulated step against the layout's own split (negative: faster):")
lines.append("")
lines.append("| percentile | 1 | 5 | 25 | 50 | 75 | 95 | 99 |")
lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
lines.append("| estimate gap | " + " | ".join(f"{pct_of(bg, p) * 100:+.1f}%" for p in (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)) + " |")
lines.append("| step change | " + " | ".join(f"{pct_of(ch, p) * 100:+.1f}%" for p in (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)) + " |")
lines.append("")
lines.append(f"Faster than the own split by more than 0.5%: {sum(c < -0.005 for c in ch)}; slower by more than 0.5%: {sum(c > 0.005 for c in ch)}. By model (median step change, the largest gain):")
lines.append("")
lines.append("| model | compared | median step change | largest gain |")
lines.append("|---|---:|---:|---:|")
for name in BASES:
    c = sorted(b[2] for b in balanced if b[0] == name)
    if c:
        lines.append(f"| {name} | {len(c)} | {c[len(c) // 2] * 100:+.1f}% | {c[0] * 100:+.1f}% |")
with open("reports/estimate-vs-simulate.md", "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines[:9]))
EOF
