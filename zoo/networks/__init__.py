"""Networks: torsos, recurrent cores, dense (noisy) layers, dueling streams and value heads.

``build_network(spec, observation_shape, num_actions, key=key)`` builds the Equinox module of an
algorithm's ``network:`` block. Importing this package registers the built-in components:

- torso: ``auto``, ``mlp``, ``nature_cnn``, ``impala_cnn``, ``minatar_cnn``
  (:mod:`zoo.networks.torsos`)
- core: ``lstm`` (:mod:`zoo.networks.cores`)
- head: ``q``, ``categorical``, ``quantile`` (:mod:`zoo.networks.heads`)
- auxiliary: ``spr`` (:mod:`zoo.networks.auxiliary`)

Each module's docstring gives the factory signature a user component must follow.
"""

from zoo.networks.auxiliary import AuxiliaryLoss, SprLoss, build_auxiliary
from zoo.networks.cores import LSTM, AbstractCore, lstm_core
from zoo.networks.heads import (
    AbstractHead,
    CategoricalHead,
    QHead,
    QuantileHead,
    categorical_head,
    q_head,
    quantile_head,
)
from zoo.networks.layers import (
    MLP,
    ChannelLayerNorm,
    NoisyLinear,
    SpectralNorm,
    adaptive_max_pool,
    adaptive_pool_bins,
    linear,
    scale_noise,
    spectral_norm_sigma,
)
from zoo.networks.network import (
    DuelingStreams,
    FeedForwardNetwork,
    RecurrentNetwork,
    SingleStream,
    build_network,
    preprocess,
)
from zoo.networks.torsos import (
    ImpalaCNN,
    MinAtarCNN,
    MLPTorso,
    NatureCNN,
    auto_torso,
    impala_cnn_torso,
    minatar_cnn_torso,
    mlp_torso,
    nature_cnn_torso,
)

__all__ = [
    "LSTM",
    "MLP",
    "AbstractCore",
    "AbstractHead",
    "AuxiliaryLoss",
    "CategoricalHead",
    "ChannelLayerNorm",
    "DuelingStreams",
    "FeedForwardNetwork",
    "ImpalaCNN",
    "MLPTorso",
    "MinAtarCNN",
    "NatureCNN",
    "NoisyLinear",
    "QHead",
    "QuantileHead",
    "RecurrentNetwork",
    "SingleStream",
    "SpectralNorm",
    "SprLoss",
    "adaptive_max_pool",
    "adaptive_pool_bins",
    "auto_torso",
    "build_auxiliary",
    "build_network",
    "categorical_head",
    "impala_cnn_torso",
    "linear",
    "lstm_core",
    "minatar_cnn_torso",
    "mlp_torso",
    "nature_cnn_torso",
    "preprocess",
    "q_head",
    "quantile_head",
    "scale_noise",
    "spectral_norm_sigma",
]
