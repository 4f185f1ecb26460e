#!/usr/bin/env bash
# The two fixture suites of `kernelab eval` on the GPU, each alone and under its own limit,
# with the JSON, the progress log and a one-line-per-row summary under $OUT. Session 21: part
# e of gpu_suite.sh failed without its message reaching us; this shows the row.
#
#   bash benchmarks/experiments/eval_suites_on_gpu.sh kernelbench:300 gpumode:240
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-.}
for spec in "$@"; do
    name=${spec%%:*}; limit=${spec##*:}
    extra=(); [ "$name" = gpumode ] && extra=(--no-compile)
    start=$(date +%s)
    timeout "$limit" python3 -m kernelab.cli eval --suite "tests/fixtures/eval/$name" \
        --device cuda --seed 7 --max-time 0.2 --timeout 120 --json \
        --out "$out/eval_${name}_records.json" "${extra[@]}" \
        > "$out/eval_$name.json" 2> "$out/eval_$name.err"
    echo "== $name: exit $? after $(( $(date +%s) - start )) s"
    python3 - "$out/eval_$name.json" <<'PY'
import json, sys
try:
    suite = json.load(open(sys.argv[1]))
except Exception as error:
    sys.exit(f"no JSON: {error}")
for problem in suite.get("problems", []):
    if problem.get("setup_error"):
        print("SETUP", problem)
for row in suite["rows"]:
    timed = row.get("timings") or [{}]
    t = timed[0]
    sol = (t.get("placement") or {}).get("datasheet") or {}
    print(f"{row['problem']:8} {row['solution'].split('solutions/')[-1]:28} {row['status']:8}"
          f" sol={t.get('solution_ms')} eager={t.get('eager_ms')} comp={t.get('compiled_ms')}"
          f" x={t.get('speedup_vs_eager')} sol%={sol.get('sol_pct')} | {row['message'][:150]}")
PY
    tail -3 "$out/eval_$name.err"
done
