"""The shipped presets: each validates and builds, each paper value checked in a source file is
pinned here, each overridden field names its source, and recalled values are marked as such.

``PUBLISHED`` is the table of the published values checked in a source file ([V]), one row per
value with the file it was checked in, converted to zoo's units (transitions; learner updates for
``target_update_period`` and β). A later edit of a preset that silently changes one of them fails
here. ``RECALLED`` lists the values recalled from a paper and not checked in a source file ([R]),
which a preset must tag [R] in ``reference.sources``.
Spec-level only (no JAX compiles): networks are built under ``eqx.filter_eval_shape``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
import yaml

import zoo
from zoo import spec as spec_lib
from zoo.envs import get_protocol

DQN_ZOO = "deepmind/dqn_zoo@f87bb1f1 dqn_zoo"
DOPAMINE_DQN = "google/dopamine dopamine/jax/agents/dqn/configs/dqn.gin"
RR = "JohanSamir/revisiting_rainbow revisiting_rainbow/Configs"
FQF = "microsoft/FQF@0980bde dopamine/agents/fqf"
BTR = "VIPTankz/BeyondTheRainbowICML"
BTR_MAIN, BTR_AGENT = f"{BTR}@0e08f8b main.py", f"{BTR}@67ce0fd Agent.py"
BTR_NETWORKS, BTR_PER = f"{BTR}@5ee23db networks.py", f"{BTR}@5ee23db PER.py"

#: preset -> {dotted field path of the resolved algorithm: (published value, where it was checked)}
PUBLISHED: dict[str, dict[str, tuple[Any, str]]] = {
    "dqn_nature": {
        "optimizer.kind": ("rmsprop", f"{DQN_ZOO}/dqn/run_atari.py optax.rmsprop"),
        "optimizer.learning_rate.value": (2.5e-4, f"{DQN_ZOO}/dqn/run_atari.py learning_rate"),
        "optimizer.decay": (0.95, f"{DQN_ZOO}/dqn/run_atari.py decay=0.95"),
        "optimizer.eps": (0.01 / 32**2, f"{DQN_ZOO}/dqn/run_atari.py optimizer_epsilon"),
        "optimizer.centered": (True, f"{DQN_ZOO}/dqn/run_atari.py centered=True"),
        "loss.td.kind": ("huber", f"{DQN_ZOO}/dqn/agent.py clip_gradient(±1/32) + l2, mean"),
        "loss.td.delta": (1.0, f"{DQN_ZOO}/dqn/agent.py grad_error_bound 1/32 of the mean"),
        "loss.bootstrap.kind": ("max", f"{DQN_ZOO}/dqn/agent.py rlax.q_learning"),
        "loss.discount": (0.99, f"{DQN_ZOO}/dqn/run_atari.py additional_discount"),
        "replay.capacity": (1_000_000, f"{DQN_ZOO}/dqn/run_atari.py replay_capacity"),
        "replay.min_size": (50_000, f"{DQN_ZOO}/dqn/run_atari.py 0.05 of the capacity"),
        "replay.batch_size": (32, f"{DQN_ZOO}/dqn/run_atari.py batch_size"),
        "schedule.update_period": (4, f"{DQN_ZOO}/dqn/run_atari.py learn_period 16 frames"),
        "schedule.target_update_period": (2_500, f"{DQN_ZOO}/dqn/run_atari.py 4e4 frames"),
        "schedule.epsilon.start": (1.0, f"{DQN_ZOO}/dqn/run_atari.py epsilon begin value"),
        "schedule.epsilon.end": (0.1, f"{DQN_ZOO}/dqn/run_atari.py epsilon end value"),
        "schedule.epsilon.steps": (1_000_000, f"{DQN_ZOO}/dqn/run_atari.py 0.02 x 200M frames"),
        "schedule.epsilon.begin": (50_000, f"{DQN_ZOO}/dqn/run_atari.py begin_t 200k frames"),
        "schedule.eval_epsilon": (0.05, f"{DQN_ZOO}/dqn/run_atari.py eval_exploration_epsilon"),
        "network.hidden": ([512], f"{DQN_ZOO}/networks.py fc 512"),
        "network.torso.kind": ("nature_cnn", f"{DQN_ZOO}/networks.py Nature CNN"),
        "network.torso.padding": ("VALID", f"{DQN_ZOO}/networks.py hk.Conv2D(padding='VALID')"),
        "network.init": ("default", f"{DQN_ZOO}/networks.py U(±1/√fan_in) w and b"),
    },
    "dqn_adam_mse": {
        "optimizer.kind": ("adam", DOPAMINE_DQN),
        "optimizer.learning_rate.value": (6.25e-5, DOPAMINE_DQN),
        "optimizer.eps": (1.5e-4, DOPAMINE_DQN),
        "loss.td.kind": ("squared", "dopamine/jax/agents/dqn/dqn_agent.py loss_type='mse'"),
        "loss.td.scale": (1.0, "dopamine/jax/losses.py mse_loss = (t − q)**2"),
        "loss.discount": (0.99, DOPAMINE_DQN),
        "loss.n_step": (1, DOPAMINE_DQN),
        "replay.capacity": (1_000_000, DOPAMINE_DQN),
        "replay.min_size": (20_000, DOPAMINE_DQN),
        "replay.batch_size": (32, DOPAMINE_DQN),
        "schedule.update_period": (4, DOPAMINE_DQN),
        "schedule.target_update_period": (2_000, f"{DOPAMINE_DQN} 8000 agent steps"),
        "schedule.epsilon.end": (0.01, DOPAMINE_DQN),
        "schedule.epsilon.steps": (250_000, DOPAMINE_DQN),
        "schedule.epsilon.begin": (20_000, "dopamine dqn_agent.py linearly_decaying_epsilon"),
        "schedule.eval_epsilon": (0.001, DOPAMINE_DQN),
        "network.torso.padding": ("SAME", "dopamine/jax/networks.py nn.Conv, Flax's default"),
        "network.init": ("glorot_uniform", "dopamine/jax/networks.py xavier_uniform"),
    },
    "double_dqn_tuned": {
        "loss.bootstrap.kind": ("double", f"{DQN_ZOO}/double_q/agent.py double_q_learning"),
        "loss.td.kind": ("huber", f"{DQN_ZOO}/double_q/agent.py clip_gradient + l2"),
        "optimizer.kind": ("rmsprop", f"{DQN_ZOO}/double_q/run_atari.py"),
        "optimizer.learning_rate.value": (2.5e-4, f"{DQN_ZOO}/double_q/run_atari.py"),
        "optimizer.eps": (0.01 / 32**2, f"{DQN_ZOO}/double_q/run_atari.py"),
        "optimizer.centered": (True, f"{DQN_ZOO}/double_q/run_atari.py"),
        "schedule.target_update_period": (7_500, f"{DQN_ZOO}/double_q/run_atari.py 1.2e5 frames"),
        "schedule.epsilon.end": (0.01, f"{DQN_ZOO}/double_q/run_atari.py"),
        "schedule.eval_epsilon": (0.01, f"{DQN_ZOO}/double_q/run_atari.py"),
        "replay.min_size": (50_000, f"{DQN_ZOO}/double_q/run_atari.py"),
    },
    "prioritized_ddqn": {
        "loss.bootstrap.kind": ("double", f"{DQN_ZOO}/prioritized/agent.py"),
        "optimizer.learning_rate.value": (2.5e-4 / 4, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "optimizer.eps": ((0.01 / 32**2) / 16, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "replay.kind": ("prioritized", f"{DQN_ZOO}/prioritized/run_atari.py"),
        "replay.priority_exponent": (0.6, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "loss.importance_exponent.start": (0.4, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "loss.importance_exponent.end": (1.0, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "loss.importance_exponent.steps": (
            (50_000_000 - 50_000) // 4,
            f"{DQN_ZOO}/prioritized/run_atari.py begin_t 5e4, end_t 200 x 250k transitions",
        ),
        "schedule.target_update_period": (7_500, f"{DQN_ZOO}/prioritized/run_atari.py"),
        "schedule.epsilon.end": (0.01, f"{DQN_ZOO}/prioritized/run_atari.py"),
    },
    "c51": {
        "network.head.num_atoms": (51, f"{DQN_ZOO}/c51/run_atari.py num_atoms"),
        "network.head.v_min": (-10.0, f"{DQN_ZOO}/c51/run_atari.py vmax"),
        "network.head.v_max": (10.0, f"{DQN_ZOO}/c51/run_atari.py vmax"),
        "optimizer.kind": ("adam", f"{DQN_ZOO}/c51/run_atari.py optax.adam"),
        "optimizer.learning_rate.value": (2.5e-4, f"{DQN_ZOO}/c51/run_atari.py"),
        "optimizer.eps": (0.01 / 32, f"{DQN_ZOO}/c51/run_atari.py"),
        "optimizer.max_grad_norm": (10.0, f"{DQN_ZOO}/c51/run_atari.py max_global_grad_norm"),
        "schedule.target_update_period": (2_500, f"{DQN_ZOO}/c51/run_atari.py 4e4 frames"),
        "schedule.epsilon.end": (0.01, f"{DQN_ZOO}/c51/run_atari.py"),
        "schedule.eval_epsilon": (0.001, f"{DQN_ZOO}/c51/run_atari.py"),
        "replay.min_size": (50_000, f"{DQN_ZOO}/c51/run_atari.py"),
    },
    "qr_dqn": {
        "network.head.num_quantiles": (201, f"{DQN_ZOO}/qrdqn/run_atari.py num_quantiles"),
        "loss.td.delta": (1.0, f"{DQN_ZOO}/qrdqn/run_atari.py huber_param"),
        "optimizer.learning_rate.value": (5e-5, f"{DQN_ZOO}/qrdqn/run_atari.py"),
        "optimizer.eps": (0.01 / 32, f"{DQN_ZOO}/qrdqn/run_atari.py"),
        "optimizer.max_grad_norm": (10.0, f"{DQN_ZOO}/qrdqn/run_atari.py"),
        "schedule.target_update_period": (2_500, f"{DQN_ZOO}/qrdqn/run_atari.py"),
        "schedule.eval_epsilon": (0.001, f"{DQN_ZOO}/qrdqn/run_atari.py"),
    },
    "rainbow": {
        "loss.n_step": (3, f"{DQN_ZOO}/rainbow/run_atari.py n_steps"),
        "loss.bootstrap.kind": ("double", f"{DQN_ZOO}/rainbow/agent.py"),
        "replay.min_size": (20_000, f"{DQN_ZOO}/rainbow/run_atari.py 0.02 of 1e6"),
        "replay.priority_exponent": (0.5, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "loss.importance_exponent.start": (0.4, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "loss.importance_exponent.steps": (
            (50_000_000 - 20_000) // 4,
            f"{DQN_ZOO}/rainbow/run_atari.py",
        ),
        "schedule.target_update_period": (2_000, f"{DQN_ZOO}/rainbow/run_atari.py 3.2e4 frames"),
        "optimizer.learning_rate.value": (2.5e-4 / 4, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "optimizer.eps": (0.005 / 32, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "optimizer.max_grad_norm": (10.0, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "network.noisy": (True, f"{DQN_ZOO}/networks.py rainbow_atari_network"),
        "network.noisy_sigma0": (0.1, f"{DQN_ZOO}/rainbow/run_atari.py noisy_weight_init"),
        "network.dueling": (True, f"{DQN_ZOO}/networks.py rainbow_atari_network"),
        "network.head.num_atoms": (51, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "network.head.v_max": (10.0, f"{DQN_ZOO}/rainbow/run_atari.py"),
        "schedule.epsilon.value": (0.0, f"{DQN_ZOO}/rainbow/run_atari.py (no ε flags)"),
        "schedule.eval_epsilon": (0.0, f"{DQN_ZOO}/rainbow/run_atari.py eval actor ε 0"),
    },
    "mdqn": {
        "loss.temperature": (0.03, "google-research munchausen_rl/train.py tau"),
        "loss.munchausen.alpha": (0.9, "google-research munchausen_rl/train.py alpha"),
        "loss.munchausen.clip_min": (-1.0, "google-research munchausen_rl/train.py clip"),
        "optimizer.learning_rate.value": (5e-5, "munchausen_rl/configs/atari.gin"),
        "optimizer.eps": (3.125e-4, "munchausen_rl/configs/atari.gin"),
        "replay.min_size": (20_000, "munchausen_rl/configs/atari.gin (Dopamine base)"),
        "schedule.target_update_period": (2_000, "munchausen_rl/configs/atari.gin 8k steps"),
        "schedule.epsilon.end": (0.01, "munchausen_rl/configs/atari.gin"),
        "schedule.eval_epsilon": (0.001, "munchausen_rl/configs/atari.gin"),
        "network.torso.padding": ("SAME", "dopamine TF atari_lib.py Conv2D(padding='same')"),
        "network.init": ("glorot_uniform", "dopamine TF atari_lib.py Keras default"),
    },
    "r2d2": {
        "loss.discount": (0.997, "google-deepmind/acme acme/agents/jax/r2d2/config.py"),
        "loss.n_step": (5, "acme r2d2/config.py bootstrap_n"),
        "loss.value_transform.kind": ("signed_hyperbolic", "acme r2d2/config.py tx_pair"),
        "loss.value_transform.eps": (1e-3, "rlax SIGNED_HYPERBOLIC_PAIR"),
        "loss.reward_clip": (None, "acme r2d2/config.py clip_rewards False"),
        "loss.importance_exponent.value": (0.6, "acme r2d2/config.py"),
        "loss.priority.eta": (0.9, "acme r2d2/config.py max_priority_weight"),
        "replay.priority_exponent": (0.9, "acme r2d2/config.py"),
        "replay.batch_size": (64, "acme r2d2/config.py"),
        "replay.sequence.burn_in": (40, "acme r2d2/config.py burn_in_length"),
        "replay.sequence.trace_length": (80, "acme r2d2/config.py"),
        "replay.sequence.period": (40, "acme r2d2/config.py sequence_period"),
        "schedule.target_update_period": (2_500, "acme r2d2/config.py"),
        "schedule.eval_epsilon": (0.0, "acme r2d2/config.py evaluation_epsilon"),
        "network.core.size": (512, "acme jax/networks/atari.py R2D2AtariNetwork hk.LSTM(512)"),
        "network.hidden": ([512], "acme jax/networks/atari.py DuellingMLP([512])"),
        "network.dueling": (True, "acme jax/networks/atari.py DuellingMLP"),
        "network.torso.padding": ("SAME", "acme tf/networks/atari.py snt.Conv2D default"),
        "network.init": ("truncated_normal", "sonnet conv.py/linear.py TruncatedNormal(1/√fan_in)"),
    },
    "der": {
        "loss.n_step": (10, "google/dopamine dopamine/labs/atari_100k/configs/DER.gin"),
        "loss.discount": (0.99, "DER.gin gamma"),
        "replay.min_size": (1_600, "DER.gin min_replay_history"),
        "replay.batch_size": (32, "DER.gin"),
        "schedule.update_period": (1, "DER.gin update_period"),
        "schedule.target_update_period": (2_000, "DER.gin target_update_period"),
        "schedule.epsilon.value": (0.01, "full_rainbow_agent.py identity_epsilon when noisy"),
        "schedule.eval_epsilon": (0.001, "DER.gin epsilon_eval"),
        "loss.importance_exponent.value": (0.5, "full_rainbow_agent.py 1/sqrt(probs)"),
        "optimizer.max_grad_norm": (None, "dopamine jax dqn_agent.py create_optimizer"),
        "network.hidden": ([512], "dopamine/jax/networks.py FullRainbowNetwork 512"),
        "network.shared_hidden": (True, "dopamine/jax/networks.py FullRainbowNetwork"),
        "network.torso.padding": ("SAME", "dopamine/jax/networks.py nn.Conv, Flax's default"),
        "network.init": ("glorot_uniform", "dopamine/jax/networks.py xavier_uniform"),
        "optimizer.learning_rate.value": (1e-4, "DER.gin"),
        "optimizer.eps": (1.5e-4, "DER.gin"),
        "network.noisy": (True, "DER.gin noisy"),
        "network.dueling": (True, "DER.gin dueling"),
        "loss.bootstrap.kind": ("double", "DER.gin double_dqn"),
        "network.head.num_atoms": (51, "DER.gin"),
        "network.head.v_max": (10.0, "DER.gin vmax"),
        "replay.kind": ("prioritized", "DER.gin replay_scheme"),
    },
    "dqn_minatar": {
        "network.torso.kind": ("minatar_cnn", f"{RR}/../networks_new.py net_conf 'minatar'"),
        "network.torso.channels": (16, f"{RR}/../networks_new.py nn.Conv(features=16)"),
        "network.torso.kernel_size": (3, f"{RR}/../networks_new.py kernel_size (3, 3)"),
        "network.torso.init": ("glorot_uniform", f"{RR}/dqn_<game>.gin variance_scaling"),
        "network.hidden": ([], f"{RR}/dqn_<game>.gin hidden_layer = 0"),
        "loss.td.kind": ("squared", f"{RR}/dqn_<game>.gin mse_inf = True"),
        "loss.td.scale": (1.0, "revisiting_rainbow dqn_agent_new.py mse_loss (no ½)"),
        "loss.n_step": (1, f"{RR}/dqn_<game>.gin update_horizon"),
        "optimizer.learning_rate.value": (2.5e-4, f"{RR}/dqn_<game>.gin"),
        "optimizer.eps": (3.125e-4, f"{RR}/dqn_<game>.gin"),
        "replay.capacity": (100_000, f"{RR}/dqn_<game>.gin"),
        "replay.min_size": (1_000, f"{RR}/dqn_<game>.gin"),
        "schedule.update_period": (4, f"{RR}/dqn_<game>.gin"),
        "schedule.target_update_period": (250, f"{RR}/dqn_<game>.gin 1000 agent steps"),
        "schedule.epsilon.end": (0.01, "dopamine jax dqn_agent.py epsilon_train"),
        "schedule.epsilon.steps": (250_000, "dopamine jax dqn_agent.py epsilon_decay_period"),
    },
    "c51_minatar": {
        "network.torso.kind": ("minatar_cnn", f"{RR}/../networks_new.py net_conf 'minatar'"),
        "network.head.num_atoms": (51, "rainbow_extend c51_<game>.gin (md 2d)"),
        "network.head.v_max": (100.0, "rainbow_extend c51_<game>.gin vmax (md 2d)"),
        "optimizer.learning_rate.value": (1e-4, "rainbow_extend c51_<game>.gin (md 2d)"),
        "optimizer.eps": (3.125e-4, "rainbow_extend c51_<game>.gin (md 2d)"),
        "loss.n_step": (1, "rainbow_extend c51_<game>.gin (md 2d)"),
        "replay.kind": ("uniform", "rainbow_extend c51_<game>.gin (md 2d)"),
        "schedule.target_update_period": (250, f"{RR}/*_<game>.gin 1000 agent steps"),
    },
    "qr_dqn_minatar": {
        "network.head.num_quantiles": (51, f"{RR}/quantile_<game>.gin num_atoms"),
        "loss.td.delta": (1.0, f"{RR}/quantile_<game>.gin kappa"),
        "loss.n_step": (1, f"{RR}/quantile_<game>.gin update_horizon"),
        "loss.bootstrap.kind": ("max", f"{RR}/quantile_<game>.gin double_dqn False"),
        "optimizer.learning_rate.value": (1e-4, f"{RR}/quantile_<game>.gin"),
        "optimizer.eps": (3.125e-4, f"{RR}/quantile_<game>.gin"),
    },
    "rainbow_minatar": {
        "network.head.v_max": (100.0, f"{RR}/rainbow_<game>.gin vmax"),
        "network.noisy": (True, f"{RR}/rainbow_<game>.gin noisy"),
        "network.dueling": (True, f"{RR}/rainbow_<game>.gin dueling"),
        "network.noisy_sigma0": (0.1, "revisiting_rainbow networks_new.py sigma_init"),
        "loss.n_step": (3, f"{RR}/rainbow_<game>.gin update_horizon"),
        "loss.bootstrap.kind": ("double", f"{RR}/rainbow_<game>.gin double_dqn"),
        "replay.kind": ("prioritized", f"{RR}/rainbow_<game>.gin replay_scheme"),
        "replay.priority_exponent": (0.5, "revisiting_rainbow rainbow_agent_new.py sqrt(loss)"),
        "loss.importance_exponent.value": (0.5, "rainbow_agent_new.py 1/sqrt(probs)"),
        "optimizer.learning_rate.value": (1e-4, f"{RR}/rainbow_<game>.gin"),
    },
    "fqf": {
        "network.head.num_fractions": (32, f"{FQF}/configs/fqf.gin num_tau_samples"),
        "network.head.num_cosines": (64, f"{FQF}/fqf_agent.py quantile_embedding_dim"),
        "network.head.entropy_coef": (1e-6, f"{FQF}/fqf_agent.py fqf_ent 0.001 x 0.001"),
        "loss.td.delta": (1.0, f"{FQF}/configs/fqf.gin kappa"),
        "loss.n_step": (1, f"{FQF}/configs/fqf.gin update_horizon"),
        "optimizer.kind": ("adam", f"{FQF}/configs/fqf.gin AdamOptimizer"),
        "optimizer.learning_rate.value": (5e-5, f"{FQF}/configs/fqf.gin learning_rate"),
        "optimizer.eps": (3.125e-4, f"{FQF}/configs/fqf.gin epsilon"),
        "optimizer.groups.0.params": ("head.fraction", f"{FQF}/fqf_agent.py 'fqf' scope"),
        "optimizer.groups.0.optimizer.kind": ("rmsprop", f"{FQF}/fqf_agent.py optimizer1"),
        "optimizer.groups.0.optimizer.learning_rate.value": (
            5e-5 * 1e-6,
            f"{FQF}/fqf_agent.py 0.00005 x fqf_factor",
        ),
        "optimizer.groups.0.optimizer.decay": (0.95, f"{FQF}/fqf_agent.py decay"),
        "optimizer.groups.0.optimizer.centered": (True, f"{FQF}/fqf_agent.py centered"),
        "optimizer.groups.0.optimizer.eps": (1e-5 / 32**2, f"{FQF}/fqf_agent.py eps / 32²"),
        "replay.capacity": (1_000_000, f"{FQF}/configs/fqf.gin replay_capacity"),
        "replay.min_size": (50_000, f"{FQF}/configs/fqf.gin min_replay_history"),
        "replay.batch_size": (32, f"{FQF}/configs/fqf.gin batch_size"),
        "schedule.update_period": (4, f"{FQF}/configs/fqf.gin update_period"),
        "schedule.target_update_period": (2_500, f"{FQF}/configs/fqf.gin 10000 steps"),
        "schedule.epsilon.end": (0.01, f"{FQF}/configs/fqf.gin epsilon_train"),
        "schedule.epsilon.steps": (1_000_000, f"{FQF}/configs/fqf.gin epsilon_decay_period"),
        "schedule.eval_epsilon": (0.001, f"{FQF}/configs/fqf.gin epsilon_eval"),
    },
    "btr": {
        "network.torso.kind": ("impala_cnn", f"{BTR_MAIN} impala 1"),
        "network.torso.channels": ([16, 32, 32], f"{BTR_NETWORKS} ImpalaCNNLargeIQN 16, 32, 32"),
        "network.torso.width": (2, f"{BTR_MAIN} model_size"),
        "network.torso.pool": ([6, 6], f"{BTR_MAIN} maxpool 1, maxpool_size 6"),
        "network.torso.spectral_norm": (True, f"{BTR_MAIN} spectral 1"),
        "network.hidden": ([512], f"{BTR_MAIN} linear_size"),
        "network.dueling": (True, f"{BTR_MAIN} dueling 1"),
        "network.noisy": (True, f"{BTR_MAIN} noisy 1"),
        "network.noisy_sigma0": (0.5, f"{BTR_NETWORKS} FactorizedNoisyLinear sigma_0"),
        "network.init": ("default", f"{BTR_NETWORKS} PyTorch's default init"),
        "network.head.kind": ("iqn", f"{BTR_MAIN} iqn 1"),
        "network.head.num_cosines": (64, f"{BTR_MAIN} ncos"),
        "network.head.num_samples": (8, f"{BTR_MAIN} taus"),
        "network.head.num_target_samples": (8, f"{BTR_MAIN} taus (the target net's pass)"),
        "network.head.num_policy_samples": (8, f"{BTR_MAIN} taus (qvals: their mean)"),
        "loss.bootstrap.kind": ("soft", f"{BTR_AGENT} learn_call π = softmax(q_t_n/τ)"),
        "loss.temperature": (0.03, f"{BTR_AGENT} entropy_tau"),
        "loss.munchausen.alpha": (0.9, f"{BTR_AGENT} munch_alpha"),
        "loss.munchausen.clip_min": (-1.0, f"{BTR_AGENT} lo"),
        "loss.munchausen.policy": ("online", f"{BTR_AGENT} self.net.qvals(states)"),
        "loss.td.kind": ("huber", f"{BTR_AGENT} calculate_huber_loss"),
        "loss.td.delta": (1.0, f"{BTR_AGENT} calculate_huber_loss(td_error, 1.0)"),
        "loss.discount": (0.997, f"{BTR_MAIN} discount"),
        "loss.n_step": (3, f"{BTR_AGENT} n"),
        "loss.importance_exponent.value": (0.2, f"{BTR_PER} weights (capacity·probs)^-alpha"),
        "replay.kind": ("prioritized", f"{BTR_MAIN} per 1"),
        "replay.capacity": (1_048_576, f"{BTR_AGENT} max_mem_size"),
        "replay.min_size": (200_000, f"{BTR_AGENT} min_sampling_size"),
        "replay.batch_size": (256, f"{BTR_MAIN} bs"),
        "replay.priority_exponent": (0.2, f"{BTR_AGENT} per_alpha"),
        "optimizer.kind": ("adam", f"{BTR_AGENT} optim.Adam"),
        "optimizer.learning_rate.value": (1e-4, f"{BTR_MAIN} lr"),
        "optimizer.eps": (0.005 / 256, f"{BTR_AGENT} eps=0.005/batch_size"),
        "optimizer.max_grad_norm": (10.0, f"{BTR_AGENT} grad_clip"),
        "schedule.update_period": (64, f"{BTR_MAIN} envs 64, one learn() per vector step, rr 1"),
        "schedule.target_update_period": (500, f"{BTR_MAIN} c"),
        "schedule.epsilon.kind": ("exponential", f"{BTR_AGENT} EpsilonGreedy.update_eps"),
        "schedule.epsilon.asymptote": (True, f"{BTR_AGENT} eps − (eps − eps_final)/steps"),
        "schedule.epsilon.start": (1.0, f"{BTR_AGENT} eps_start"),
        "schedule.epsilon.end": (0.01, f"{BTR_AGENT} eps_final"),
        "schedule.epsilon.steps": (2_000_000, f"{BTR_AGENT} eps_steps"),
        "schedule.epsilon.rate": (
            math.exp(2e6 * math.log1p(-1 / 2e6)),  # (1 − 1/2e6)^2e6 without rounding 1 − 1/2e6
            f"{BTR_AGENT} (1 − 1/eps_steps) per transition",
        ),
        "schedule.epsilon_off_after": (25_000_000, f"{BTR_AGENT} total_frames / 2, eps_disable"),
        "schedule.eval_epsilon": (0.01, f"{BTR_AGENT} choose_eval_action 0.01"),
    },
    "mdqn_minatar": {
        "loss.temperature": (0.03, f"{RR}/dqn_<game>.gin tau"),
        "loss.munchausen.alpha": (0.9, f"{RR}/dqn_<game>.gin alpha"),
        "loss.munchausen.clip_min": (-1.0, f"{RR}/dqn_<game>.gin clip_value_min"),
        "loss.td.kind": ("squared", f"{RR}/dqn_<game>.gin mse_inf"),
        "optimizer.learning_rate.value": (2.5e-4, f"{RR}/dqn_<game>.gin"),
    },
}

#: preset -> fields whose published value is recalled from the paper, not checked ([R]).
RECALLED: dict[str, list[str]] = {
    "dqn_nature": ["budget"],
    "dqn_reg": [
        "loss.td",
        "loss.regularizer",
        "optimizer",
        "schedule.target_update_period",
        "schedule.epsilon.end",
        "schedule.eval_epsilon",
    ],
    "r2d2": ["optimizer", "network.torso", "budget"],
}

#: reference series id -> its protocol (the reference package is built on another branch).
SERIES_PROTOCOL: dict[str, str] = {
    **{
        f"published/{name}": "nature_2015"
        for name in (
            "DQN_nature_50M",
            "DQN_200M",
            "DDQN_tuned",
            "PrioDDQN_prop",
            "C51_paper",
            "QRDQN1_paper",
            "Rainbow",
        )
    },
    **{
        f"dopamine/{name}": "dopamine_2018"
        for name in ("dqn_adam_mse", "dqn", "c51", "rainbow", "quantile", "iqn")
    },
    "published/BTR": "dopamine_2018",
    "atari100k/der": "atari_100k",
    "cleanrl/dqn_cartpole": "classic",
}

#: preset -> the flatten width of its source's torso on its protocol's observation (Atari
#: [4, 84, 84], MinAtar [4, 10, 10]), read at the level of the layer: Flax's nn.Conv, Haiku's
#: hk.Conv2D, Sonnet's snt.Conv2D, Keras's Conv2D(padding='same') and slim's conv2d default to
#: SAME padding (84 → 21 → 11 → 11: 64·11·11 = 7,744); dqn_zoo passes VALID (84 → 20 → 9 → 7:
#: 3,136), as do purejaxql's convolutions.
_SAME, _VALID = 7_744, 3_136
TORSO_FEATURES: dict[str, int] = {
    # Dopamine's JAX NatureDQNNetwork / FullRainbowNetwork (no padding passed to nn.Conv)
    **dict.fromkeys(["dqn_adam_mse", "drq_eps", "der"], _SAME),
    # Dopamine TF (Keras padding='same', munchausen_rl) and microsoft/FQF (slim's default SAME)
    **dict.fromkeys(["mdqn", "m_iqn", "fqf"], _SAME),
    # acme's TF AtariTorso: snt.Conv2D's default SAME
    "r2d2": _SAME,
    # bigger_better_faster spr_networks.py RainbowCNN: padding 'SAME' (SR_SPR.gin's "cnn" read as
    # "dqn"); ImpalaCNN ×4: SAME convolutions and 3×3/2 SAME max-pools, 84 → 42 → 21 → 11, 128
    # channels: 15,488
    **dict.fromkeys(["spr", "sr_spr"], _SAME),
    "bbf": 128 * 11 * 11,
    # dqn_zoo/networks.py: padding='VALID'
    **dict.fromkeys(
        [
            "dqn_nature",
            "double_dqn_tuned",
            "prioritized_ddqn",
            "c51",
            "qr_dqn",
            "rainbow",
            "iqn",
        ],
        _VALID,
    ),
    # purejaxql/pqn_atari.py: padding="VALID"; pqn_minatar.py: Conv(16, 3×3, VALID) on 10×10
    "pqn_atari": _VALID,
    "pqn_minatar": 16 * 8 * 8,
    # revisiting_rainbow networks_new.py: nn.Conv(16, (3, 3)), Flax's SAME on 10×10
    **dict.fromkeys(
        [
            "dqn_minatar",
            "c51_minatar",
            "qr_dqn_minatar",
            "rainbow_minatar",
            "mdqn_minatar",
        ],
        16 * 10 * 10,
    ),
    "dqn_reg": _VALID,
    "iqn_minatar": 16 * 10 * 10,
    "munchausen_qr_dqn_minatar": 16 * 10 * 10,
    # BTR's ImpalaCNNLargeIQN: 64 channels, AdaptiveMaxPool2d((6, 6))
    "btr": 64 * 6 * 6,
}

PAPER_PRESETS = [
    "dqn_nature",
    "dqn_adam_mse",
    "double_dqn_tuned",
    "prioritized_ddqn",
    "c51",
    "qr_dqn",
    "rainbow",
    "mdqn",
    "dqn_reg",
    "r2d2",
    "der",
    "fqf",
    "btr",
    "dqn_minatar",
    "c51_minatar",
    "qr_dqn_minatar",
    "rainbow_minatar",
    "mdqn_minatar",
]
TAGS = ("[V]", "[R]", "[3P]")


def _get(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = model[int(part)] if part.isdigit() else getattr(model, part)
    return model


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of the leaves of a nested override mapping (``kind`` counts as a leaf)."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path + ".")
        else:
            yield path


def _sourced(path: str, sources: Mapping[str, str]) -> str | None:
    """The source of ``path`` or of the closest enclosing field."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        found = sources.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


@pytest.mark.unit
def test_every_paper_preset_is_shipped():
    assert set(PAPER_PRESETS) <= set(spec_lib.preset_names())
    assert set(PUBLISHED) | set(RECALLED) <= set(PAPER_PRESETS)


@pytest.mark.parametrize("name", spec_lib.preset_names())
@pytest.mark.compiled
def test_preset_validates_and_builds(name):
    preset = zoo.load_preset(name)
    algorithm = spec_lib.algorithm_for(preset)
    protocol = get_protocol(preset.env.protocol)
    assert preset.env.id, "a preset names its default environment"
    assert preset.budget is not None and preset.budget.agent_steps > 0
    if preset.budget.frames is not None:
        assert preset.budget.frames == preset.budget.agent_steps * protocol.frame_skip
    if protocol.suite == "atari":
        observation_shape: tuple[int, ...] = (protocol.stack, *protocol.frame_shape)
    elif protocol.suite == "minatar":
        observation_shape = (4, 10, 10)  # Breakout's channels; [C, 10, 10] as zoo's adapter gives
    else:
        observation_shape = (4,)
    net = eqx.filter_eval_shape(
        zoo.build_network,
        algorithm,
        observation_shape=observation_shape,
        num_actions=6,
        key=jax.random.key(0),
    )
    features = eqx.filter_eval_shape(
        lambda torso, x: torso(x), net.torso, jax.ShapeDtypeStruct(observation_shape, jnp.float32)
    )
    assert features.shape == (TORSO_FEATURES.get(name, features.shape[0]),), (
        f"{name}: the torso gives {features.shape[0]} features, its source "
        f"{TORSO_FEATURES.get(name)}"
    )
    if protocol.suite in ("atari", "minatar"):
        assert name in TORSO_FEATURES, f"{name}: add its source's flatten width to TORSO_FEATURES"


@pytest.mark.parametrize("name", PAPER_PRESETS)
@pytest.mark.unit
def test_paper_preset_names_its_paper_protocol_and_games(name):
    preset = zoo.load_preset(name)
    assert preset.reference.paper and "http" in preset.reference.paper
    assert preset.env.games and preset.env.id in preset.env.games
    assert preset.budget is not None and preset.budget.frames is not None


def _departures(preset: str, table: Mapping[str, tuple[Any, str]]) -> list[str]:
    """Rows of ``table`` whose value the preset (a name or a path) no longer has."""
    algorithm = spec_lib.algorithm_for(zoo.load_preset(preset))
    wrong = []
    for path, (value, source) in table.items():
        got = _get(algorithm, path)
        same = got == pytest.approx(value, rel=1e-12) if isinstance(value, float) else got == value
        if not same:
            wrong.append(f"{path}: preset {got!r}, published {value!r} ({source})")
    return wrong


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.unit
def test_published_values_checked_in_a_source_file(name):
    wrong = _departures(name, PUBLISHED[name])
    assert not wrong, f"{name} departs from its paper's checked values:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", PAPER_PRESETS)
@pytest.mark.unit
def test_every_overridden_field_names_its_source(name):
    preset = zoo.load_preset(name)
    sources = preset.reference.sources
    missing = [p for p in _leaves(preset.overrides) if _sourced(p, sources) is None]
    assert not missing, f"{name}: no reference.sources entry for {missing}"
    untagged = {k: v for k, v in sources.items() if not v.startswith(TAGS)}
    assert not untagged, f"{name}: sources must start with one of {TAGS}: {untagged}"


@pytest.mark.parametrize("name", sorted(RECALLED))
@pytest.mark.unit
def test_recalled_values_are_tagged_recalled(name):
    sources = zoo.load_preset(name).reference.sources
    for path in RECALLED[name]:
        source = _sourced(path, sources)
        assert source is not None and "[R]" in source, f"{name}: {path} must be tagged [R]"


@pytest.mark.parametrize("name", spec_lib.preset_names())
@pytest.mark.unit
def test_reference_series_share_the_preset_protocol(name):
    preset = zoo.load_preset(name)
    for series in preset.reference.series:
        assert series in SERIES_PROTOCOL, f"{name}: unknown reference series {series!r}"
        assert SERIES_PROTOCOL[series] == preset.env.protocol, (
            f"{name} runs under {preset.env.protocol} but lists {series} "
            f"({SERIES_PROTOCOL[series]})"
        )


@pytest.mark.unit
def test_a_changed_paper_value_is_caught(tmp_path):
    # The table is compared with the resolved spec, so an edit anywhere in the extends chain shows.
    text = (spec_lib.presets_dir() / "dqn_nature.yaml").read_text(encoding="utf-8")
    edited = tmp_path / "dqn_nature.yaml"
    edited.write_text(text.replace("target_update_period: 2500", "target_update_period: 2000"))
    wrong = _departures(str(edited), PUBLISHED["dqn_nature"])
    assert len(wrong) == 1 and wrong[0].startswith("schedule.target_update_period: preset 2000")


@pytest.mark.run
def test_minatar_preset_trains_end_to_end(tmp_path):
    # The preset drives a real run: MinAtar through gymnasium, the minatar_cnn torso, the preset's
    # protocol; a tiny budget (the replay starts learning after 64 transitions).
    pytest.importorskip("minatar")
    result = zoo.train(
        "dqn_minatar",
        env="MinAtar/Breakout-v1",
        total_env_steps=400,
        overrides={"replay.min_size": 64, "schedule.epsilon.steps": 200},
        run_dir=tmp_path / "run",
        eval_every=400,
        eval_episodes=2,
        progress=False,
    )
    assert result.env_steps == 400 and result.updates == (400 - 64) // 4
    settings = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())
    assert settings["preset"] == "dqn_minatar" and settings["protocol"] == "minatar"
    spec = zoo.load_algorithm(tmp_path / "run" / "spec.yaml")
    assert spec.network.torso.kind == "minatar_cnn" and spec.network.hidden == []
