#!/bin/bash
# One GPU call: BBF (preset:bbf, Schwarzer et al. 2023, https://arxiv.org/abs/2305.19452) on
# Atari 100k, SEEDS seeds of GAME as parallel processes sharing the one GPU (each with an equal
# share of its memory), each for STEPS agent steps (100000 = the whole run) or until DEADLINE_S.
# Prints, per seed, the env steps/s and updates/s from its first training record after the
# replay's warm-up to its last (compile excluded), and the projected wall time of one whole
# 100,000-step run at that rate; keeps logs, machine facts and metrics in $OUT.
# usage: bash benchmarks/gpu/bbf_atari100k.sh STEPS DEADLINE_S [SEEDS] [GAME] [-- zoo train args]
#   (after make_site.sh; on a machine without it, PY=.venv/bin/python runs the same script on the
#   CPU, e.g. with `-- --set network.torso.width=1` for a smoke test)
set -u
STEPS=$1; LIMIT=$2; SEEDS=${3:-4}; GAME=${4:-Breakout-v5}
shift $(( $# < 4 ? $# : 4 )); [ "${1:-}" = "--" ] && shift
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export XLA_PYTHON_CLIENT_MEM_FRACTION=$(python3 -c "print(round(0.9 / $SEEDS, 3))")
PY=${PY:-python3}
R=$(mktemp -d)
{ date -u; nvidia-smi -L 2>&1; nproc; free -g | head -2
  $PY -c "import jax,envpool;print(jax.__version__, envpool.__version__, jax.devices())"; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
left=$(( T0 + LIMIT - $(date +%s) ))
for seed in $(seq 0 $(( SEEDS - 1 ))); do
  timeout "$left" $PY -m zoo.cli train preset:bbf --env "$GAME" --steps "$STEPS" --seed "$seed" \
    --run-dir "$R/seed$seed" --eval-every $((STEPS * 10)) --eval-episodes 1 \
    --checkpoint-every $((STEPS * 10)) --progress off "$@" \
    > "$OUT/seed$seed.log" 2>&1 &
done
wait
echo "$SEEDS seed(s) of $GAME after $(( $(date +%s) - T0 ))s"
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv 2>&1 | tail -1
for seed in $(seq 0 $(( SEEDS - 1 ))); do
  cp "$R/seed$seed/metrics.jsonl" "$OUT/seed$seed-metrics.jsonl" 2>/dev/null
  $PY - "$R/seed$seed" "$seed" <<'EOF'
import sys
from pathlib import Path
from zoo.runs.metrics import read_jsonl, windowed_rate
run, seed = Path(sys.argv[1]), sys.argv[2]
path = run / "metrics.jsonl"
records = read_jsonl(path) if path.is_file() else []
# from the first record with updates (the replay's warm-up and the update's compile behind it)
warm_up = min((r["env_steps"] for r in records if r.get("updates")), default=0)
try:
    steps, updates = windowed_rate(records, start=warm_up)
    hours = 100_000 / steps / 3600  # the warm-up steps, faster, counted at the same rate
    print(f"seed {seed}: {steps:,.1f} env steps/s, {updates:,.1f} updates/s; "
          f"a 100k-step run: {hours:.2f} h at this rate (evaluation not included)")
except ValueError as e:
    print(f"seed {seed}: no rate ({e})")
EOF
done
rm -rf "$R"
