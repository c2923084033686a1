"""One process of a two-process jax.distributed data-parallel training run (gloo on CPU).

``python -m tests.workers.distributed PORT PROCESS_ID`` trains 3 updates of a small prioritised
DQN; each process feeds its half of the same global batches and prints a JSON line with a
checksum of its parameters, which must agree across processes and with one process on the whole
batch (``PROCESS_ID = single``).
"""

from __future__ import annotations

import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import zoo  # noqa: E402
from tests.test_catalogue import ACTIONS, OBS, random_batch, small_spec  # noqa: E402
from zoo.learner import DataParallelLearner, Learner  # noqa: E402


def checksum(module) -> list[float]:
    leaves = jax.tree.leaves(eqx.filter(module, eqx.is_inexact_array))
    return [float(jnp.sum(x)) for x in leaves]


def main() -> None:
    port, who = sys.argv[1], sys.argv[2]
    if who != "single":  # before anything starts the XLA backend
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=int(who)
        )
    spec = small_spec("prioritized_ddqn")
    net = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.PRNGKey(0)
    )
    batches = [random_batch(spec, net, step) for step in range(3)]
    if who == "single":
        learner = Learner(spec)
        state = learner.init(net, jax.random.PRNGKey(1))
        for batch in batches:
            state, _ = eqx.filter_jit(learner.update)(state, batch)
        print(json.dumps({"who": who, "checksum": checksum(state.online)}))
        return
    process_id = int(who)
    assert jax.process_count() == 2 and jax.device_count() == 2, jax.devices()
    learner = DataParallelLearner(spec)
    state = learner.init(net, jax.random.PRNGKey(1))
    half = spec.replay.batch_size // 2
    for batch in batches:
        mine = jax.tree.map(lambda x: x[process_id * half : (process_id + 1) * half], batch)
        state, aux = learner.update(state, mine)
    state = learner.unreplicate(state)
    print(
        json.dumps(
            {
                "who": who,
                "checksum": checksum(state.online),
                "updates": int(state.updates),
                "priorities": aux.priorities.shape[0],
            }
        )
    )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
