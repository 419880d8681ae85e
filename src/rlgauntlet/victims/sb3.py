"""Stable-Baselines3 victims (DQN, PPO, A2C, SAC, TD3, DDPG; Mlp and Cnn policies).

The policy is rebuilt from the ``.zip`` (policy class, kwargs, spaces and weights), without
the algorithm object, so any SB3 algorithm whose policy is one of SB3's own loads the same
way. ``forward`` bypasses SB3's ``preprocess_obs``: its input ``x`` is already what the
network sees (pixels in [0, 1], normalised observations), so that perturbation budgets
live in that space.

Example:
    >>> victim = load_sb3("zoo/cartpole-ppo.zip")          # doctest: +SKIP
    >>> victim.act(np.zeros((2, 4), dtype=np.float32))     # doctest: +SKIP
    array([0, 0])
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from rlgauntlet.common.hashing import sha256_file  # noqa: F401 - re-exported for callers
from rlgauntlet.errors import UserError
from rlgauntlet.victims.conv_input_grad import use_fast_input_gradients
from rlgauntlet.victims.mlp_vjp import output_and_vjp, plain_mlp
from rlgauntlet.victims.agent_ref import SB3_ALGORITHMS
from rlgauntlet.victims.base import Affine, HeldStateSteps, PolicyOutput, Victim, as_tensor, choose_dtype, flatten_chain




#: algorithms whose policies are the same classes (A2C and PPO, TD3 and DDPG) form a family
_FAMILY = {"ppo": "ac", "a2c": "ac", "dqn": "dqn", "sac": "sac", "td3": "td3", "ddpg": "td3"}


def _infer_algorithm(module: str, data: dict) -> str:
    """The algorithm behind a policy class's module (its SB3 base class's, for ours) and the
    saved hyperparameters."""
    if ".dqn." in module:
        return "dqn"
    if ".sac." in module:
        return "sac"
    if ".td3." in module:
        return "ddpg" if data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0 else "td3"
    return "ppo" if "clip_range" in data else "a2c"


class VecNormalizeStats:
    """Observation normalisation of an SB3 ``VecNormalize``: clip((o-μ)/√(σ²+ε), ±c).

    Read from a file saved by ``VecNormalize.save`` (fixed statistics), or from a training
    ``VecNormalize`` with :meth:`live` (the statistics it has at each call).
    """

    def __init__(self, path: str | Path, allow_pickle: bool = False) -> None:
        from rlgauntlet.victims.sb3_files import load_data_pickle, read_vecnormalize_json

        try:
            if Path(path).suffix == ".json":  # the zoo's plain-number form
                self._source = read_vecnormalize_json(Path(path))
            else:
                self._source = load_data_pickle(Path(path), allow_pickle)
            self.mean, self.var, self.clip, self.epsilon, self.enabled  # noqa: B018 - validate the file now
            if not (np.isfinite(self.mean).all() and np.isfinite(self.var).all() and (self.var >= 0).all()
                    and np.isfinite(self.clip) and self.clip > 0 and np.isfinite(self.epsilon)):
                raise UserError(f"VecNormalize file {path} holds a non-finite mean or variance, a negative variance "
                                "or a bad clip; give the statistics file saved with the agent")
        except UserError:
            raise
        except FileNotFoundError:
            raise UserError(f"VecNormalize file {path} not found; pass the vecnormalize.pkl saved with the agent") from None
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
            raise UserError(
                f"cannot read VecNormalize statistics from {path} ({type(exc).__name__}); "
                "pass the file written by SB3's VecNormalize.save"
            ) from None
        self.path: str | None = str(path)

    @classmethod
    def live(cls, vec_normalize) -> "VecNormalizeStats":
        """Statistics read from a training ``VecNormalize`` at every call (they follow training)."""
        stats = cls.__new__(cls)
        stats._source, stats.path = vec_normalize, None
        return stats

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self._source.obs_rms.mean, dtype=np.float64)

    @property
    def var(self) -> np.ndarray:
        return np.asarray(self._source.obs_rms.var, dtype=np.float64)

    @property
    def count(self) -> float:
        return float(getattr(self._source.obs_rms, "count", 1e4))

    @property
    def clip(self) -> float:
        return float(self._source.clip_obs)

    @property
    def epsilon(self) -> float:
        return float(self._source.epsilon)

    @property
    def enabled(self) -> bool:
        return bool(self._source.norm_obs)

    def apply(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return obs
        # float64 like SB3's numpy normalisation, then the network's precision
        mean = torch.as_tensor(self.mean, device=obs.device)
        std = torch.sqrt(torch.as_tensor(self.var, device=obs.device) + self.epsilon)
        return ((obs.double() - mean) / std).clamp(-self.clip, self.clip).to(obs.dtype)


class SB3Victim(Victim):
    """A victim backed by an SB3 policy (see module docstring)."""

    def __init__(
        self,
        policy,
        algorithm: str,
        device: str | torch.device = "cpu",
        vecnormalize: VecNormalizeStats | None = None,
        description: dict | None = None,
        precision: str = "auto",
        live: bool = False,
    ) -> None:
        from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

        is_image = is_image_space(policy.observation_space) and bool(getattr(policy, "normalize_images", True))
        self.live = live
        if live:  # the trainer's own policy: used as it is, never cast, frozen or switched to eval
            self.policy = policy
            self.dtype = next(policy.parameters()).dtype
            self.device = policy.device
        else:
            self.dtype = choose_dtype(precision, is_image)
            self.policy = policy.to(device=device, dtype=self.dtype).eval()
            for p in self.policy.parameters():
                p.requires_grad_(False)  # attacks need input gradients only
            use_fast_input_gradients(self.policy)  # our own copy: strided convs get a cheaper input gradient
            self.device = torch.device(device)
        self.algorithm = algorithm
        self.observation_space = policy.observation_space
        self.action_space = policy.action_space
        self.vecnormalize = vecnormalize
        self.description = description or {"source": "sb3", "algorithm": algorithm}
        self.is_image = is_image
        self.channels_first = self.is_image and is_image_space_channels_first(self.observation_space)
        if self.is_image:
            self.budget_space = "pixel01"
        elif vecnormalize is not None and vecnormalize.enabled:
            self.budget_space = "normalized"
        else:
            self.budget_space = "raw"

        if isinstance(self.action_space, gym.spaces.Discrete):
            self.kind = "q" if algorithm == "dqn" else "categorical"
        elif isinstance(self.action_space, gym.spaces.Box):
            self.kind = "deterministic" if algorithm in ("td3", "ddpg") else "gaussian"
        else:
            raise UserError(
                f"action space {self.action_space} is not supported; rlgauntlet supports Discrete and Box actions"
            )
        if getattr(policy, "use_sde", False):
            raise UserError("gSDE policies (use_sde=True) are not supported; retrain with use_sde=False")
        if algorithm in ("td3", "ddpg"):
            low = torch.as_tensor(self.action_space.low, dtype=torch.float32)
            high = torch.as_tensor(self.action_space.high, dtype=torch.float32)
            self._unscale = Affine((high - low) / 2.0, (high + low) / 2.0).to(self.device, self.dtype)
        from rlgauntlet.victims.uncertainty import MC_SAMPLES, dropout_kind_of

        try:
            dropout = dropout_kind_of(self.layer_chain())
        except NotImplementedError:
            dropout = None
        if dropout is not None:
            self.uncertainty_method, self.dropout_p = dropout
            self.mc_samples = MC_SAMPLES
            self.description = {**self.description, "uncertainty": {"method": dropout[0], "p": dropout[1],
                                                                    "samples": MC_SAMPLES}}

    @classmethod
    def from_model(cls, model) -> "SB3Victim":
        """Wrap a live SB3 model (the object a trainer holds) as a victim, without changing it.

        The victim runs the model's own policy in its own dtype and mode, with its parameters'
        ``requires_grad`` untouched, so attacks during training (adversarial training,
        RADIAL, SA regularisers) see the current weights and ``model.learn()`` goes on as
        before. The model's ``VecNormalize`` (if any) is read at every call. Evaluation loads
        its own frozen float64 copy instead (:func:`load_sb3`).

        Example:
            >>> from stable_baselines3 import PPO                          # doctest: +SKIP
            >>> model = PPO("MlpPolicy", "CartPole-v1")                    # doctest: +SKIP
            >>> victim = SB3Victim.from_model(model)                       # doctest: +SKIP
        """
        algorithm = next((c.__name__.lower() for c in type(model).__mro__ if c.__name__.lower() in SB3_ALGORITHMS),
                         None)
        recurrent = hasattr(model.policy, "lstm_actor")  # sb3-contrib's RecurrentPPO: a PPO with an LSTM
        if recurrent:
            algorithm = "ppo"
        if algorithm is None:
            raise UserError(f"{type(model).__name__} is not a Stable-Baselines3 algorithm ({', '.join(SB3_ALGORITHMS)})")
        vec_normalize = model.get_vec_normalize_env()
        stats = VecNormalizeStats.live(vec_normalize) if vec_normalize is not None else None
        victim_class = SB3RecurrentVictim if recurrent else cls
        return victim_class(model.policy, algorithm, vecnormalize=stats, live=True,
                            description={"source": "live", "algorithm": algorithm, "class": type(model).__name__})

    # -- input ---------------------------------------------------------------------------
    def preprocess(self, obs: np.ndarray) -> torch.Tensor:
        x = as_tensor(obs, self.device)
        if self.is_image:
            if x.ndim == 4 and self.channels_first and x.shape[1:] != self.observation_space.shape:
                # env frames are channel-last, SB3 stores channel-first; copied while still uint8:
                # every later pass (network, threat, finiteness check, norms) reads it faster
                x = x.permute(0, 3, 1, 2).contiguous()
            return x.to(self.dtype) / 255.0
        x = x.reshape(x.shape[0], -1) if x.ndim > 2 else x
        if self.vecnormalize is not None:
            return self.vecnormalize.apply(x.double()).to(self.dtype)
        return x.to(self.dtype)

    # -- network -------------------------------------------------------------------------
    def _features(self, extractor: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return extractor(x)  # SB3 extractors take already-preprocessed input

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        p = self.policy
        x = x.to(self.dtype)
        if self.algorithm == "dqn":
            return PolicyOutput("q", q=p.q_net.q_net(self._features(p.q_net.features_extractor, x)))
        if self.algorithm == "sac":
            latent = p.actor.latent_pi(self._features(p.actor.features_extractor, x))
            log_std = p.actor.log_std(latent).clamp(-20.0, 2.0)
            return PolicyOutput("gaussian", mean=p.actor.mu(latent), log_std=log_std, squashed=True)
        if self.algorithm in ("td3", "ddpg"):
            action = self._unscale(p.actor.mu(self._features(p.actor.features_extractor, x)))
            return PolicyOutput("deterministic", action=action)
        latent = p.mlp_extractor.forward_actor(self._features(p.pi_features_extractor, x))
        head = p.action_net(latent)
        if self.kind == "categorical":
            return PolicyOutput("categorical", logits=head)
        return PolicyOutput("gaussian", mean=head, log_std=p.log_std.expand_as(head))

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.is_image or self.algorithm in ("td3", "ddpg"):  # convolutions; an unscaling step
            return None
        chain = self.layer_chain()
        if not plain_mlp(chain):  # dropout layers included: they are not in the handled set
            return None
        return output_and_vjp(chain, x.to(self.dtype), cotangent_of)

    def layer_chain(self) -> list[nn.Module]:
        p = self.policy
        if self.algorithm == "dqn":
            return flatten_chain(_extractor_chain(p.q_net.features_extractor), p.q_net.q_net)
        if self.algorithm == "sac":
            return flatten_chain(_extractor_chain(p.actor.features_extractor), p.actor.latent_pi, p.actor.mu)
        if self.algorithm in ("td3", "ddpg"):
            return flatten_chain(_extractor_chain(p.actor.features_extractor), p.actor.mu, self._unscale)
        return flatten_chain(_extractor_chain(p.pi_features_extractor), p.mlp_extractor.policy_net, p.action_net)

    def uncertainty(self, x: torch.Tensor, rng, reduce: str = "mean") -> torch.Tensor:
        """MC Dropout / DropConnect: the spread of ``mc_samples`` stochastic passes (see
        ``victims.uncertainty``); the masks come from ``rng``, one generator per row."""
        if self.uncertainty_method is None:
            return super().uncertainty(x, rng, reduce)
        from rlgauntlet.victims.uncertainty import mc_forward, spread_score

        x = x.to(self.dtype)
        if self.uncertainty_output == "critic":  # MC passes of the critic at the deterministic action
            critic = self._critic_network()
            samples = mc_forward(flatten_chain(critic.q_networks[0]), self._critic_input(x, self.forward_action(x)),
                                 rng, self.mc_samples)
            return spread_score(samples, reduce)
        samples = mc_forward(self.layer_chain(), x, rng, self.mc_samples)
        if self.kind == "categorical":
            samples = torch.softmax(samples, dim=-1)
        return spread_score(samples, reduce)

    def _critic_network(self):
        if self.algorithm not in ("td3", "ddpg", "sac"):
            raise UserError(f"a {self.algorithm.upper()} agent has no action-value critic; score its policy output "
                            "(--score-of policy)")
        return self.policy.critic

    def forward_action(self, x: torch.Tensor) -> torch.Tensor:
        """The deterministic action in env units, shape (B, D)."""
        return self.actions(self.forward(x))

    def _critic_input(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[features(x), action scaled to [−1, 1]]: what SB3's critics read (they store actions scaled)."""
        low = torch.as_tensor(self.action_space.low, device=x.device, dtype=x.dtype)
        high = torch.as_tensor(self.action_space.high, device=x.device, dtype=x.dtype)
        scaled = 2.0 * (action.to(x.dtype) - low) / (high - low) - 1.0
        return torch.cat([self._critic_network().features_extractor(x), scaled], dim=1)

    def critic_value(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The first critic's Q(x, action) (action in env units), shape (B, 1)."""
        return self._critic_network().q_networks[0](self._critic_input(x.to(self.dtype), action))

    @property
    def input_bounds(self) -> tuple[float, float] | None:
        if self.budget_space == "pixel01":
            return (0.0, 1.0)
        if self.budget_space == "normalized":
            return (-self.vecnormalize.clip, self.vecnormalize.clip)
        return None


class SB3RecurrentVictim(SB3Victim):
    """sb3-contrib's ``RecurrentPPO`` policy (``MlpLstmPolicy``): the features, the actor's LSTM
    from the held state, then the actor's MLP and the Gaussian (or categorical) head, as
    ``RecurrentActorCriticPolicy`` acts. Recurrent (:attr:`Victim.recurrent`): the engine holds one
    state per episode, zeros at its start as RecurrentPPO's ``episode_start`` resets it, and
    advances it with the input the agent acted on; a gradient attack perturbs one step with the
    state fixed. The critic's LSTM is not needed to act and is not run. Not a chain of layers, so
    IBP cannot bound it.

    Example:
        >>> victim = load_sb3("runs/hopper-lstm/model.zip")          # doctest: +SKIP
        >>> victim.recurrent, victim.initial_state()[0].shape         # doctest: +SKIP
        (True, torch.Size([1, 256]))
    """

    recurrent = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.is_image:
            raise UserError("recurrent SB3 agents with image input are not supported; give an MlpLstmPolicy agent")
        self._held: tuple[torch.Tensor, torch.Tensor] | None = None
        self._steps = HeldStateSteps()

    @property
    def _lstm(self) -> nn.LSTM:
        return self.policy.lstm_actor

    def initial_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, c), each (layers, hidden): zeros, as at an episode's start."""
        zeros = torch.zeros(self._lstm.num_layers, self._lstm.hidden_size, dtype=self.dtype, device=self.device)
        return zeros, zeros.clone()

    def use_state(self, rows: list) -> None:
        self._held = (torch.stack([h for h, _ in rows], dim=1), torch.stack([c for _, c in rows], dim=1))

    def _step(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if self._held is None or self._held[0].shape[1] != x.shape[0]:
            held = "none" if self._held is None else f"{self._held[0].shape[1]} rows"
            raise RuntimeError(f"a recurrent victim needs use_state() for this batch of {x.shape[0]} rows (held: {held})")
        return self._steps.step(x, self._held, lambda: self._lstm_step(x))

    def _lstm_step(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        features = self._features(self.policy.pi_features_extractor, x.to(self.dtype))
        out, state = self._lstm(features.unsqueeze(0), self._held)  # one step of every row
        return out.squeeze(0), state

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        latent, _ = self._step(x)
        head = self.policy.action_net(self.policy.mlp_extractor.forward_actor(latent))
        if self.kind == "categorical":
            return PolicyOutput("categorical", logits=head)
        return PolicyOutput("gaussian", mean=head, log_std=self.policy.log_std.expand_as(head))

    @torch.no_grad()  # a state carries no gradient: recorded, each step's graph would chain to the last
    def advance_state(self, x: torch.Tensor) -> list:
        _, (h, c) = self._step(x)
        return list(zip(h.unbind(1), c.unbind(1)))

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def layer_chain(self) -> list[nn.Module]:
        raise NotImplementedError("an LSTM policy is not a chain of layers (its state carries across steps): "
                                  "interval bounds through it are not implemented")


def _extractor_chain(extractor: nn.Module) -> nn.Module:
    from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN

    if isinstance(extractor, FlattenExtractor):
        return extractor.flatten
    from rlgauntlet.victims.minatar_cnn import MinAtarCNN

    if isinstance(extractor, (NatureCNN, MinAtarCNN)):  # conv body, then linear: the same chain
        return nn.Sequential(*flatten_chain(extractor.cnn, extractor.linear))
    raise NotImplementedError(f"no layer chain for features extractor {type(extractor).__name__}")


class _NoOptimizer:
    """Stands in for the optimizer an SB3 policy builds; evaluation never steps it."""

    def __init__(self, params, lr: float = 0.0, **kwargs) -> None:
        self.param_groups: list = []

    def state_dict(self) -> dict:
        return {}


def load_sb3(
    path: str | Path,
    algorithm: str | None = None,
    device: str = "cpu",
    vecnormalize: str | Path | None = None,
    precision: str = "auto",
    allow_pickle: bool = False,
    observation_space: gym.Space | None = None,
) -> SB3Victim:
    """Load an SB3 ``.zip`` as a victim, reading it as data (see ``victims.sb3_files``).

    Args:
        path: the ``.zip`` written by ``model.save``.
        algorithm: ``ppo``, ``a2c``, ``dqn``, ``sac``, ``td3`` or ``ddpg``; read from the zip when None.
        device: torch device.
        vecnormalize: SB3 ``VecNormalize`` statistics file, when the agent was trained with one.
        precision: ``auto`` (float64 for vector inputs, float32 for images), ``float32`` or ``float64``.
        allow_pickle: unpickle the zip's Python objects as SB3 does (needed for custom policy
            classes or activation functions); this runs code stored in the file.
        observation_space: the policy's observation space when the caller knows it from its own
            records (a learned attacker's manifest): large boxes are stored only in pickled form.
    """
    from rlgauntlet.victims import sb3_files

    path = Path(path)
    if not path.exists():
        raise UserError(f"agent file {path} not found; give the path of an SB3 .zip saved with model.save")
    if path.is_dir():
        raise UserError(f"agent file {path} is a directory; give the .zip written by SB3's model.save")
    if algorithm is not None and algorithm.lower() not in SB3_ALGORITHMS:
        raise UserError(f"unknown SB3 algorithm {algorithm!r}; choose one of: {', '.join(SB3_ALGORITHMS)}")
    if allow_pickle:
        from stable_baselines3.common.save_util import load_from_zip_file

        try:
            data, params, _ = load_from_zip_file(path, device=device, print_system_info=False)
        except (zipfile.BadZipFile, KeyError, ValueError, json.JSONDecodeError, RuntimeError) as exc:
            raise UserError(f"cannot read {path} as a Stable-Baselines3 model ({type(exc).__name__}); "
                            "give a .zip written by SB3's model.save") from None
        if data is None or "policy_class" not in data or params is None or "policy" not in params:
            raise UserError(f"{path} holds no SB3 policy; give a .zip written by SB3's model.save")
        policy_class, state = data["policy_class"], params["policy"]
        obs_space, act_space, kwargs = data["observation_space"], data["action_space"], dict(data.get("policy_kwargs") or {})
        module = policy_class.__module__
    else:
        data, state = sb3_files.read_sb3_zip(path)
        policy_class = sb3_files.policy_class(data["policy_class"], path)
        obs_space = observation_space or sb3_files.space(data.get("observation_space"), "observation space", path)
        act_space = sb3_files.space(data.get("action_space"), "action space", path)
        kwargs = sb3_files.policy_kwargs(data.get("policy_kwargs"), path)
        module = policy_class.__module__
    module = next((c.__module__ for c in policy_class.__mro__ if c.__module__.startswith("stable_baselines3.")), module)
    inferred = _infer_algorithm(module, data)
    algo = (algorithm or inferred).lower()
    if _FAMILY[algo] != _FAMILY[inferred]:
        raise UserError(f"{path} holds a {inferred.upper()} policy, not {algo.upper()}; drop the :{algorithm} suffix")
    if data.get("use_sde"):
        raise UserError("gSDE policies (use_sde=True) are not supported; retrain with use_sde=False")
    # a victim never trains: a no-op optimizer spares building Adam, whose first construction
    # imports torch's compiler stack (about 1.4 s of every command's start-up)
    kwargs = {**kwargs, "optimizer_class": _NoOptimizer, "optimizer_kwargs": {}}
    try:
        policy = policy_class(obs_space, act_space, lambda _: 0.0, **kwargs)
        # the zoo's agent files leave out target networks: they are copies of the online ones
        policy.load_state_dict(sb3_files.with_target_networks(state, list(policy.state_dict())))
    except Exception as exc:  # noqa: BLE001
        raise UserError(
            f"cannot rebuild the policy stored in {path} ({type(exc).__name__}: {exc}); "
            "is it an SB3 model with one of SB3's own policies?"
        ) from None
    stats = VecNormalizeStats(vecnormalize, allow_pickle) if vecnormalize is not None else None
    if stats is not None and stats.enabled and stats.mean.shape != tuple(obs_space.shape or ()):
        raise UserError(f"VecNormalize file {vecnormalize} normalises observations of shape {stats.mean.shape}, but "
                        f"the agent takes {tuple(obs_space.shape or ())}; give the statistics saved with this agent")
    description = {
        "source": "sb3",
        "path": str(path),
        "algorithm": algo,
        "policy_class": policy_class.__name__,
        "sha256": sha256_file(path),
    }
    if stats is not None:
        description["vecnormalize"] = {"path": stats.path, "sha256": sha256_file(stats.path)}
    victim_class = SB3RecurrentVictim if hasattr(policy, "lstm_actor") else SB3Victim
    if victim_class is SB3RecurrentVictim:
        description["recurrent"] = True
    return victim_class(policy, algo, device=device, vecnormalize=stats, description=description, precision=precision)
