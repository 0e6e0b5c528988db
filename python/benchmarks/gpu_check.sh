#!/usr/bin/env bash
# One prepared device check (the bench, docs in BENCHMARKS.md "Measured steps"): with NVIDIA GPUs it runs
#   1. the profiler's CUDA path (python -m skrull.profile --device cuda --quick),
#   2. the CUDA attention paths, local and sharded, each checked against unpacked attention
#      (python/benchmarks/gpu_attention_check.py),
#   3. python -m skrull.bench at the largest DP x CP the machine has (CP 2 when it can),
# in well under 8 minutes, and writes one JSON (default gpu_check.json, or $1).
# Without CUDA it runs the same bench on the CPU at DP 1 x CP 2 and records every CUDA part
# as skipped, with the reason.
#
# usage: bash python/benchmarks/gpu_check.sh [OUT.json]   (needs the skrull package and torch)
set -uo pipefail
OUT=${1:-gpu_check.json}
PY=${PYTHON:-python}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
GPUS=$($PY -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
step() {  # step NAME COMMAND...: runs it with a 180 s limit, records rc and seconds
    local name=$1; shift
    local t0=$SECONDS
    timeout 180 "$@" >"$TMP/$name.log" 2>&1
    local rc=$?
    echo "{\"name\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" >"$TMP/$name.step"
    echo "$name: rc $rc ($((SECONDS - t0)) s)" >&2
}
if [ "$GPUS" -gt 0 ]; then
    step profile $PY -m skrull.profile --device cuda --quick --quiet --out "$TMP/profile.csv"
    step attention $PY "$(dirname "$0")/gpu_attention_check.py" --out "$TMP/attention.json"
    CP=1; [ "$GPUS" -ge 2 ] && CP=2
    DP=$((GPUS / CP))
    step bench $PY -m skrull.bench --device cuda --dp "$DP" --cp "$CP" --dataset chatqa2 \
        --max-len 16384 --batch 32 --calibrate profile+online --warmup 3 --steps 3 \
        --model qwen2.5-0.5b --quiet --format json --out "$TMP/bench.json"
else
    echo "gpu_check: no CUDA device here: skipping the profiler's CUDA path, the CUDA" \
         "attention checks and the GPU bench; running the bench on the CPU (DP 1 x CP 2)" >&2
    step bench $PY -m skrull.bench --device cpu --dp 1 --cp 2 --dataset chatqa2 --max-len 512 \
        --batch 8 --calibrate online --warmup 2 --steps 2 --quiet --format json \
        --out "$TMP/bench.json"
fi
$PY - "$TMP" "$OUT" "$GPUS" <<'PYEOF'
import glob, json, os, sys
tmp, out, gpus = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(tmp, "*.step")))]
result = {"gpus": gpus, "steps": steps,
          "skipped": [] if gpus else [
              {"name": n, "why": "no CUDA device"} for n in ("profile", "attention")]}
for name in ("attention", "bench"):
    path = os.path.join(tmp, f"{name}.json")
    if os.path.exists(path):
        result[name] = json.load(open(path))
for s in steps:
    if s["rc"] != 0:
        s["log_tail"] = open(os.path.join(tmp, s["name"] + ".log")).read()[-2000:]
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print(f"gpu_check: wrote {out} ({len(steps)} steps, "
      f"{sum(s['rc'] != 0 for s in steps)} failed)")
sys.exit(1 if any(s["rc"] != 0 for s in steps) else 0)
PYEOF
