#!/bin/bash
# Build .gpu/site: the packages zoo needs that a bare CUDA image with jax, equinox, optax, chex,
# orbax-checkpoint, numpy and pyyaml lacks, unpacked for CPython 3.12 on x86-64 and trimmed to
# fit a 64 MiB transfer (envpool without its MuJoCo/ViZDoom/... libraries, only the ROMs named).
# usage: bash benchmarks/gpu/make_site.sh [GAME_ROM ...]   (default: breakout enduro pong road_runner)
# then on the GPU machine: PYTHONPATH=$PWD/.gpu/site:$PWD python3 -m zoo.cli ...
set -euo pipefail
ROMS=${*:-breakout enduro pong road_runner}
PIP=${PIP:-python3 -m pip}
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
   --platform manylinux2014_x86_64 -d .whl"
mkdir -p .whl
for p in envpool==1.2.5 rlax==0.1.9 distrax==0.1.9 tfp-nightly dm-env dm-tree gymnasium \
    farama-notifications pydantic pydantic-core annotated-types typing-inspection tensorboardX \
    optree decorator gast; do
  $PIP download -q $P "$p"
done
rm -rf .gpu/site && mkdir -p .gpu/site
for w in .whl/*.whl; do unzip -q -o "$w" -d .gpu/site; done
cd .gpu/site
rm -f envpool/mujoco/*.so envpool/{box2d,gfootball,highway,jumanji,minigrid,pgx,procgen,toy_text,vizdoom}/*.so
rm -rf envpool/vizdoom/bin envpool/jumanji/assets tensorflow_probability/substrates/numpy
# register only the Atari and classic-control environments (the others' libraries were removed)
python3 - <<'PY'
lines = open("envpool/entry.py").read().splitlines()
keep = [l for l in lines if not l.startswith("import envpool.") or "atari" in l or "classic_control" in l]
open("envpool/entry.py", "w").write("\n".join(keep) + "\n")
PY
ASSETS=$(python3 -c "import envpool_assets, os; print(os.path.dirname(envpool_assets.__file__))")
mkdir -p envpool_assets/atari/roms
cp "$ASSETS/__init__.py" envpool_assets/
for r in $ROMS; do cp "$ASSETS/atari/roms/$r.bin" envpool_assets/atari/roms/; done
du -sh .
