#!/usr/bin/env bash
# Throughput of two commits side by side: each repetition runs every workload once per commit,
# alternating (before, after), so that both sides see the same machine and the same load; the
# figures to read are the ratios.
#
#   bash benchmarks/throughput_ab.sh BEFORE AFTER [REPS] [WORKLOADS]
#   bash benchmarks/throughput_ab.sh 18affc1 HEAD 3 cartpole-1,cartpole-8,update,breakout
#
# Each commit is checked out into a temporary git worktree and imported through PYTHONPATH with
# this checkout's interpreter ($PYTHON, default .venv/bin/python); each side runs its own
# benchmarks/throughput.py (--worker zoo:NAME --quick), one child process per run. Prints one JSON
# line per run, then the medians and their ratio per workload.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: throughput_ab.sh BEFORE AFTER [REPS] [WORKLOADS]}
after=${2:?usage: throughput_ab.sh BEFORE AFTER [REPS] [WORKLOADS]}
reps=${3:-3}
workloads=${4:-cartpole-1,cartpole-8,update,breakout}
python=${PYTHON:-$PWD/.venv/bin/python}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" 2>/dev/null; git worktree remove --force "$tmp/after" 2>/dev/null; rm -rf "$tmp"' EXIT
git worktree add --detach --quiet "$tmp/before" "$before"
git worktree add --detach --quiet "$tmp/after" "$after"
out=$tmp/runs.jsonl
for rep in $(seq 1 "$reps"); do
  for w in ${workloads//,/ }; do
    for side in before after; do
      tree=$tmp/$side
      result=$(cd "$tmp" && PYTHONPATH=$tree "$python" "$tree/benchmarks/throughput.py" \
        --worker "zoo:$w" --quick 2>"$tmp/$side.$w.err" | tail -n 1) || result=null
      echo "{\"rep\": $rep, \"workload\": \"$w\", \"side\": \"$side\", \"result\": ${result:-null}}" | tee -a "$out"
    done
  done
done
"$python" - "$out" <<'PY'
import collections, json, statistics, sys

runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    row = json.loads(line)
    result = row["result"] or {}
    rate = result.get("env_steps_per_s") or result.get("updates_per_s")
    if rate:
        runs[row["workload"]][row["side"]].append(rate)
print("| workload | before (median) | after (median) | after ÷ before |")
print("| --- | ---: | ---: | ---: |")
for name, sides in runs.items():
    if sides["before"] and sides["after"]:
        b, a = statistics.median(sides["before"]), statistics.median(sides["after"])
        print(f"| {name} | {b:,.1f} | {a:,.1f} | {a / b:.2f} |")
PY
