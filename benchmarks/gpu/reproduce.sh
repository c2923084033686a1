#!/bin/bash
# One GPU call: dqn_adam_mse on GAMES at FRAMES under its Dopamine protocol with the compiled
# loop, stopped at DEADLINE_S seconds; logs, machine facts and the run folders (without
# checkpoints) land in $OUT. Falls back to the host loop where the compiled one fails to start.
# usage: bash benchmarks/gpu/reproduce.sh FRAMES DEADLINE_S GAMES...   (after make_site.sh)
# measured 2026-11-30 on one H200: Enduro at ~690 env steps/s, 370k agent steps in 555 s
FRAMES=$1; LIMIT=$2; shift 2
T0=$(date +%s); END=$((T0 + LIMIT))
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false ZOO_PROGRESS=15s
PY=${PY:-python3}
R=/tmp/repro
{ date -u; nvidia-smi -L 2>&1; nproc; free -g | head -2
  $PY -c "import jax,envpool,rlax,pydantic,equinox,optax;print(jax.__version__, jax.devices(), equinox.__version__, optax.__version__)"; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
run() {
  g=$1; s=$(date +%s)
  timeout $((END - s)) $PY -m zoo.cli reproduce dqn_adam_mse --games $g --seeds 1 --frames $FRAMES \
    --run-dir $R/compiled --eval-episodes 1 --eval-every 100000000 --checkpoint-every 100000000 \
    --loop compiled > $OUT/$g-compiled.log 2>&1
  rc=$?; echo "$g compiled rc=$rc after $(( $(date +%s) - s ))s"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $(( $(date +%s) - s )) -lt 200 ]; then
    s=$(date +%s)
    timeout $((END - s)) $PY -m zoo.cli reproduce dqn_adam_mse --games $g --seeds 1 --frames $FRAMES \
      --run-dir $R/host --eval-episodes 1 --eval-every 100000000 --checkpoint-every 100000000 \
      --loop host > $OUT/$g-host.log 2>&1
    echo "$g host rc=$? after $(( $(date +%s) - s ))s"
  fi
}
for g in "$@"; do run $g & sleep 2; done
wait
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv 2>&1 | tail -1
cd $R && tar czf $OUT/runs.tgz --exclude=checkpoints --exclude=tb . && ls -la $OUT
