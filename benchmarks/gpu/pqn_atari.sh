#!/bin/bash
# One GPU call: pqn_atari (128 envpool environments, Gallici et al. 2024) on GAME for STEPS agent
# steps with the compiled loop, then the host loop, each stopped at its share of DEADLINE_S; prints
# each loop's env steps/s from its first training record to its last (compile excluded) and keeps
# logs, machine facts and metrics in $OUT.
# usage: bash benchmarks/gpu/pqn_atari.sh STEPS DEADLINE_S [GAME]   (after make_site.sh; on a
# machine without it, PY=.venv/bin/python runs the same script on the CPU)
STEPS=$1; LIMIT=$2; GAME=${3:-Pong-v5}
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
R=$(mktemp -d)
{ date -u; nvidia-smi -L 2>&1; nproc; free -g | head -2
  $PY -c "import jax,envpool;print(jax.__version__, envpool.__version__, jax.devices())"; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
for loop in compiled host; do
  s=$(date +%s); left=$(( T0 + LIMIT - s ))
  [ $loop = compiled ] && left=$(( left / 2 ))
  timeout "$left" $PY -m zoo.cli train pqn_atari --env "$GAME" --steps "$STEPS" --loop $loop \
    --run-dir "$R/$loop" --eval-every $((STEPS * 10)) --eval-episodes 1 \
    --checkpoint-every $((STEPS * 10)) --progress off \
    > "$OUT/$loop.log" 2>&1
  echo "$loop rc=$? after $(( $(date +%s) - s ))s"
  cp "$R/$loop/metrics.jsonl" "$OUT/$loop-metrics.jsonl" 2>/dev/null
  $PY - "$R/$loop/metrics.jsonl" "$loop" <<'EOF'
import sys
from pathlib import Path
from zoo.runs.metrics import read_jsonl, windowed_rate
path, loop = Path(sys.argv[1]), sys.argv[2]
try:  # from the first training record (compile and warm-up behind it) to the last
    rate, _ = windowed_rate(read_jsonl(path) if path.is_file() else [])
    print(f"{loop}: {rate:,.0f} env steps/s")
except ValueError as e:
    print(f"{loop}: no rate ({e})")
EOF
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv 2>&1 | tail -1
rm -rf "$R"
