"""Environment presets.

The preset (the wrapper chain) follows from the Gymnasium id, as Stable-Baselines3 users
expect:

* ``atari``: ``*NoFrameskip-v4`` ids get SB3's ``AtariWrapper`` (no-op reset, frame skip 4
  with max-pooling, episodic life, fire reset, 84x84 grey) and a 4-frame stack on the last
  axis, exactly what ``make_atari_env`` + ``VecFrameStack(4)`` produce;
* ``classic`` (CartPole, Acrobot, MountainCar, Pendulum, ...) and ``mujoco`` (``*-v5``):
  the env as registered;
* ``sa_dqn`` (``SADQN/GAME-v0``): SA-DQN's own Atari frames (one grey 84×84 frame, its crop,
  its restricted actions: :mod:`rlgauntlet.envs.sa_dqn`), for the released SA-DQN agents;
* ``dmc`` (``dm_control/DOMAIN-TASK-v0``, the DeepMind Control Suite through shimmy, extra
  ``[dmc]``): the observation dict flattened in the space's key order by
  :class:`FlattenDictObservation`, which records where each key lies (``observation_layout``);
* ``none``: the env as registered, whatever its id.

Every env made here has an ``observation_layout`` (a dict from a name to the flat indices of
that observation part, see :func:`observation_layout`), so that a target state can name a
coordinate (``height``, ``position[1]``) instead of a position that may move.

Evaluation envs report the *real* episode: the raw game score summed over all lives, and
an episode ends only when the game is over (as SB3's ``Monitor`` and ``evaluate_policy``
count it), even though the agent sees a life loss as a terminal step.

Example:
    >>> env = make_env("CartPole-v1")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape
    (4,)
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rlgauntlet.errors import UserError

Preset = Literal["atari", "classic", "mujoco", "dmc", "minatar", "sa_dqn", "none"]
PRESETS: tuple[str, ...] = ("atari", "classic", "mujoco", "dmc", "minatar", "sa_dqn", "none")
DMC_PREFIX = "dm_control/"

CLASSIC_IDS = {
    "CartPole-v0",
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
}
MUJOCO_PREFIXES = (
    "Hopper",
    "Walker2d",
    "HalfCheetah",
    "Ant",
    "Humanoid",
    "HumanoidStandup",
    "Swimmer",
    "Reacher",
    "InvertedPendulum",
    "InvertedDoublePendulum",
    "Pusher",
    "AntContactForces",
)
#: Gymnasium's Ant-v4 with the contact forces in its observation (111 numbers, as gym's Ant-v2,
#: on which the SA-PPO / ATLA / PA-ATLA Ant agents were trained); registered by this package
ANT_CONTACT_FORCES = "AntContactForces-v4"
#: gym's -v2 tasks as MuJoCo 1.5 simulated them (``HopperMuJoCo15-v4`` ...), on which the released
#: agents were trained: ``envs.mujoco15``; the id's task word ends with this
MUJOCO15 = "MuJoCo15"
#: older task versions this package runs on purpose, made without Gymnasium's "out of date"
#: warning (one per env made, dozens per gauntlet): Walker2d-v4 keeps gym's Walker2d-v2 foot
#: frictions, which the published Walker2d agents need (docs/decisions.md)
CHOSEN_OLD_VERSIONS = frozenset({"Walker2d-v4"})
#: MuJoCo warnings about Gymnasium's own model files that a user can do nothing about, printed
#: by MuJoCo's C library once per env made (HalfCheetah's ``settotalmass``: thousands of lines
#: in a gauntlet); the attribute still applies, so the physics is unchanged
GYMNASIUM_MODEL_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)

ATARI_FRAME_STACK = 4

_ale_registered = False


def _register_ale() -> None:
    global _ale_registered
    if not _ale_registered:
        import ale_py

        gym.register_envs(ale_py)
        _ale_registered = True


def mujoco_task(env_id: str) -> str:
    """The MuJoCo task an id runs, without its version: ``Hopper-v5`` → ``Hopper``;
    ``AntContactForces-v4`` → ``Ant`` (the same task, observed with its contact forces),
    ``HopperMuJoCo15-v4`` → ``Hopper`` (the same task, as MuJoCo 1.5 simulated it).

    Example:
        >>> mujoco_task("AntContactForces-v4"), mujoco_task("Walker2d-v4"), mujoco_task("HumanoidMuJoCo15-v4")
        ('Ant', 'Walker2d', 'Humanoid')
    """
    base = env_id.rpartition("/")[2].split("-")[0].removesuffix(MUJOCO15)
    return "Ant" if base == ANT_CONTACT_FORCES.split("-")[0] else base


def mujoco15_form(env_id: str) -> str | None:
    """The id of ``env_id``'s task as MuJoCo 1.5 simulated gym's -v2 of it (``envs.mujoco15``), or
    None for a task without one.

    Example:
        >>> mujoco15_form("Hopper-v5"), mujoco15_form("AntContactForces-v4"), mujoco15_form("CartPole-v1")
        ('HopperMuJoCo15-v4', 'AntMuJoCo15-v4', None)
    """
    task = mujoco_task(env_id)
    form = f"{task}{MUJOCO15}-v4"
    return form if task in ("Hopper", "Walker2d", "HalfCheetah", "Ant", "Humanoid") else None


def resolve_preset(env_id: str, override: str | None = None) -> Preset:
    """Return the preset name implied by ``env_id`` (or ``override`` when given)."""
    if override is not None:
        if override not in PRESETS:
            raise UserError(
                f"unknown preset {override!r}; choose one of: {', '.join(PRESETS)}"
            )
        return override  # type: ignore[return-value]
    if env_id.endswith("NoFrameskip-v4"):
        return "atari"
    if env_id.startswith(DMC_PREFIX):
        return "dmc"
    if env_id.startswith("MinAtar/"):
        return "minatar"
    if env_id.startswith("SADQN/"):
        return "sa_dqn"
    if env_id in CLASSIC_IDS:
        return "classic"
    if env_id.split("-")[0] in MUJOCO_PREFIXES or mujoco_task(env_id) in MUJOCO_PREFIXES:
        return "mujoco"
    return "none"


class RealEpisodeInfo(gym.Wrapper):
    """Innermost wrapper: reports whether the *game* ended and its raw (unclipped) return.

    Adds ``info["real_done"]`` and ``info["raw_return"]`` on every step, so the rollout
    engine can tell a life loss (terminal for the agent) from the end of the game.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.raw_return = 0.0

    def reset(self, **kwargs: Any):
        self.raw_return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.raw_return += float(reward)
        info = dict(info)
        info["real_done"] = bool(terminated or truncated)
        info["raw_return"] = self.raw_return
        return obs, reward, terminated, truncated, info


class NewGameOnSeededReset(gym.Wrapper):
    """A seeded ``reset`` always starts a new game, also after a life loss.

    SB3's ``EpisodicLifeEnv`` turns every reset that follows a lost life into a no-op step
    so that the game goes on (the engine's soft reset relies on that). When an outer time
    limit cuts an episode after a life loss, or in mid-game, the engine's next reset is
    seeded and starts episode ``k + 1``; without this wrapper that reset would silently
    continue the old game, with its score and without the new seed.
    """

    def __init__(self, env: gym.Env) -> None:
        from stable_baselines3.common.atari_wrappers import EpisodicLifeEnv

        super().__init__(env)
        self._episodic_life = None
        layer = env
        while isinstance(layer, gym.Wrapper):
            if isinstance(layer, EpisodicLifeEnv):
                self._episodic_life = layer
            layer = layer.env

    def reset(self, **kwargs: Any):
        if kwargs.get("seed") is not None and self._episodic_life is not None:
            self._episodic_life.was_real_done = True
        return self.env.reset(**kwargs)


class LastAxisFrameStack(gym.ObservationWrapper):
    """Stack the last ``n`` frames on the channel (last) axis, zero-filled after a reset.

    Matches SB3's ``VecFrameStack(n)`` for a single env: after every reset (including the
    soft reset after a life loss) the stack is zeros with the new frame in the last slot.
    """

    def __init__(self, env: gym.Env, n: int) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.n = n
        low = np.repeat(space.low, n, axis=-1)
        high = np.repeat(space.high, n, axis=-1)
        self.observation_space = gym.spaces.Box(low=low, high=high, dtype=space.dtype)
        self._stack = np.zeros(self.observation_space.shape, dtype=space.dtype)
        self._channels = space.shape[-1]

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._stack[...] = 0
        return self.observation(obs), info

    def observation(self, observation):
        self._stack = np.roll(self._stack, shift=-self._channels, axis=-1)
        self._stack[..., -self._channels :] = observation
        return self._stack.copy()


#: named parts of the flat observation of Gymnasium envs (indices into the observation vector),
#: from each env's documentation; dm_control envs get theirs from their observation dict
NAMED_OBSERVATIONS: dict[str, dict[str, list[int]]] = {
    # [cart position, pole angle, cart velocity, pole angular velocity]
    "InvertedPendulum": {"position": [0], "angle": [1], "velocity": [2], "angular_velocity": [3]},
    # [torso z, torso angle, 6 joint angles, 9 velocities] (the x position is excluded)
    "Walker2d": {"height": [0], "angle": [1], "joints": list(range(2, 8)), "velocity": list(range(8, 17))},
    "Hopper": {"height": [0], "angle": [1], "joints": list(range(2, 5)), "velocity": list(range(5, 11))},
    # [cos θ, sin θ, θ̇]
    "Pendulum": {"cos": [0], "sin": [1], "angular_velocity": [2]},
    # [cart position, cart velocity, pole angle, pole angular velocity]
    "CartPole": {"position": [0], "velocity": [1], "angle": [2], "angular_velocity": [3]},
}


class FlattenDictObservation(gym.ObservationWrapper):
    """Flatten a ``Dict`` observation into one float vector, keys in the space's order.

    Scalars take one entry, arrays their flattened size. ``observation_layout`` maps each key
    to its indices, e.g. dm_control walker: ``{"height": [0], "orientations": [1..14], ...}``.

    Example:
        >>> space = gym.spaces.Dict({"b": gym.spaces.Box(-1, 1, (2,)), "a": gym.spaces.Box(-1, 1, ())})
        >>> class Env(gym.Env):
        ...     observation_space, action_space = space, gym.spaces.Discrete(2)
        ...     def reset(self, seed=None, options=None): return {"a": 0.5, "b": np.array([1., 2.])}, {}
        >>> env = FlattenDictObservation(Env())
        >>> env.reset()[0], env.observation_layout
        (array([0.5, 1. , 2. ]), {'a': [0], 'b': [1, 2]})
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise UserError(f"{env.spec.id if env.spec else 'this env'} has no dict observation to flatten")
        self.keys = list(space.spaces)
        self.observation_layout: dict[str, list[int]] = {}
        start, low, high = 0, [], []
        for key in self.keys:
            sub = space.spaces[key]
            size = int(np.prod(sub.shape))
            self.observation_layout[key] = list(range(start, start + size))
            low.append(np.broadcast_to(sub.low, sub.shape).reshape(-1))
            high.append(np.broadcast_to(sub.high, sub.shape).reshape(-1))
            start += size
        self.observation_space = gym.spaces.Box(np.concatenate(low), np.concatenate(high), dtype=np.float64)

    def observation(self, observation):
        return np.concatenate([np.asarray(observation[k], dtype=np.float64).reshape(-1) for k in self.keys])


def observation_layout(env: gym.Env) -> dict[str, list[int]]:
    """Named parts of ``env``'s flat observation: key → indices (empty when none are known)."""
    layout = getattr(env, "observation_layout", None)
    if layout is None and hasattr(env, "get_wrapper_attr"):
        try:
            layout = env.get_wrapper_attr("observation_layout")
        except AttributeError:
            layout = None
    if layout is not None:
        return dict(layout)
    env_id = env.spec.id if env.spec is not None else ""
    return dict(NAMED_OBSERVATIONS.get(env_id.split("-")[0].removesuffix(MUJOCO15), {}))


def _register_dmc() -> None:
    import warnings

    try:
        with warnings.catch_warnings():  # dm_control probes an X display for rendering, which we never use
            warnings.simplefilter("ignore")
            import shimmy
    except ImportError:
        raise UserError("dm_control envs need the [dmc] extra: pip install 'rlgauntlet[dmc]'") from None
    gym.register_envs(shimmy)


def _register_family(env_id: str) -> None:
    """Register the ids of ``env_id``'s family (ALE, dm_control, MinAtar) with Gymnasium."""
    if env_id.endswith("-v4") or env_id.startswith("ALE/"):
        _register_ale()
    if env_id.startswith(DMC_PREFIX):
        _register_dmc()
    if env_id.startswith("MinAtar/"):
        from rlgauntlet.envs.minatar import register_minatar

        register_minatar()
    if env_id.startswith("SADQN/"):
        from rlgauntlet.envs.sa_dqn import register_sa_dqn

        register_sa_dqn()
    if env_id == ANT_CONTACT_FORCES and env_id not in gym.registry:
        gym.register(ANT_CONTACT_FORCES, entry_point="gymnasium.envs.mujoco.ant_v4:AntEnv", max_episode_steps=1000,
                     reward_threshold=6000.0, kwargs={"use_contact_forces": True})
    if MUJOCO15 in env_id and env_id not in gym.registry:
        from rlgauntlet.envs.mujoco15 import MUJOCO15_ENVS

        for name, cls in MUJOCO15_ENVS.items():
            gym.register(name, entry_point=f"{cls.__module__}:{cls.__name__}", max_episode_steps=1000)


def mujoco_warning(message: str) -> None:
    """Print a MuJoCo warning as MuJoCo's own default does (``WARNING: ...`` on stderr): where
    the filter of :func:`_mujoco_warnings_filtered` sends the warnings it keeps when no handler
    was installed before it."""
    print(f"WARNING: {message}", file=sys.stderr)


@contextlib.contextmanager
def _mujoco_warnings_filtered() -> Iterator[None]:
    """MuJoCo's warnings about Gymnasium's model files dropped for the block; any other goes to
    the handler in place before (the caller's own, or :func:`mujoco_warning`), which is restored
    after (a no-op where MuJoCo is not installed)."""
    try:
        import mujoco
    except ImportError:
        yield
        return
    previous = mujoco.get_mju_user_warning()

    def handler(message: str) -> None:
        if not message.startswith(GYMNASIUM_MODEL_WARNINGS):
            (previous or mujoco_warning)(message)

    mujoco.set_mju_user_warning(handler)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def _quiet_make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make``, without the "out of date" warning for the versions chosen on purpose, nor
    MuJoCo's about Gymnasium's own model files."""
    with warnings.catch_warnings(), _mujoco_warnings_filtered():
        if env_id in CHOSEN_OLD_VERSIONS:
            warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
        return gym.make(env_id, **kwargs)


def _make_registered(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` as SB3's ``make_vec_env`` calls it for an id (render mode ``rgb_array``
    where the env takes one), after registering the id's family: a ``SubprocVecEnv`` worker
    starts without this process's registrations, so it must make them itself."""
    _register_family(env_id)
    try:
        return _quiet_make(env_id, **{"render_mode": "rgb_array", **kwargs})
    except TypeError:
        return _quiet_make(env_id, **kwargs)


def check_env_id(env_id: str) -> None:
    """Refuse an env id Gymnasium does not know (after registering its family), without making
    the env: the one-line error every command gives for a bad ``--env``."""
    _register_family(env_id)
    try:
        gym.spec(env_id)
    except (gym.error.Error, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UserError(
            f"cannot make env {env_id!r} ({reason}); give a registered Gymnasium id such as "
            "CartPole-v1, Pendulum-v1, Hopper-v5, PongNoFrameskip-v4 or dm_control/walker-stand-v0"
        ) from None


def _gym_make(env_id: str, **kwargs: Any) -> gym.Env:
    _register_family(env_id)
    if env_id.startswith("MinAtar/"):
        from rlgauntlet.envs.minatar import MAX_EPISODE_STEPS

        kwargs.setdefault("max_episode_steps", MAX_EPISODE_STEPS)
    try:
        return _quiet_make(env_id, **kwargs)
    except (gym.error.Error, ImportError, AttributeError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UserError(
            f"cannot make env {env_id!r} ({reason}); give a registered Gymnasium id such as "
            "CartPole-v1, Pendulum-v1, Hopper-v5, PongNoFrameskip-v4 or dm_control/walker-stand-v0"
        ) from None


def make_env(env_id: str, preset: str | None = None,
             under: Callable[[gym.Env], gym.Env] | None = None) -> gym.Env:
    """Make one evaluation env with the wrappers of its preset.

    Args:
        env_id: Gymnasium id, e.g. ``"CartPole-v1"`` or ``"PongNoFrameskip-v4"``.
        preset: override the preset implied by the id (``atari``, ``classic``, ``mujoco``, ``none``).
        under: a wrapper put on the registered env beneath the preset's wrappers (an Atari game's
            screen changed before the frame skip, grey conversion and resize see it).

    Returns:
        A Gymnasium env whose ``info`` carries ``real_done`` and ``raw_return``.
    """
    kind = resolve_preset(env_id, preset)
    if env_id.startswith("SADQN/") and kind != "sa_dqn":
        raise UserError(f"{env_id} is SA-DQN's own Atari frames already (its wrappers are the id's); drop "
                        f"--preset {kind}")
    env = RealEpisodeInfo(_gym_make(env_id))
    if under is not None:
        env = under(env)
    if kind == "atari":
        from stable_baselines3.common.atari_wrappers import AtariWrapper

        if not hasattr(env.unwrapped, "ale"):
            env.close()
            raise UserError(f"--preset atari needs an Atari (ale-py) env, and {env_id} is not one; "
                            "drop --preset or give e.g. PongNoFrameskip-v4")
        env = NewGameOnSeededReset(AtariWrapper(env, terminal_on_life_loss=True, clip_reward=False))
        env = LastAxisFrameStack(env, ATARI_FRAME_STACK)
    elif kind == "dmc":
        env = FlattenDictObservation(env)
    elif kind == "minatar":
        from rlgauntlet.envs.minatar import MinAtarImage

        if not env_id.startswith("MinAtar/"):
            env.close()
            raise UserError(f"--preset minatar needs a MinAtar env, and {env_id} is not one; "
                            "drop --preset or give e.g. MinAtar/Breakout-v1")
        env = MinAtarImage(env)
    elif kind == "sa_dqn" and not env_id.startswith("SADQN/"):
        env.close()
        raise UserError(f"--preset sa_dqn is SA-DQN's own Atari frames, made by its ids (SADQN/Pong-v0, ...), and "
                        f"{env_id} is not one; drop --preset and give e.g. SADQN/Pong-v0")
    return env


def make_train_vec_env(env_id: str, n_envs: int, seed: int, preset: str | None = None, subproc: bool = False):
    """Make SB3's standard training ``VecEnv`` for ``env_id``.

    Atari: ``make_atari_env`` + ``VecFrameStack(4)``; others: ``make_vec_env``. ``subproc``
    steps the envs in worker processes (SB3's ``SubprocVecEnv``): the same envs, seeds and
    wrappers, for machines with cores to spare.
    """
    from stable_baselines3.common.atari_wrappers import AtariWrapper
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    subproc = subproc and n_envs > 1
    # our make, never SB3's gym.make of the id: the same env, with the family registered and the
    # warnings of _quiet_make filtered, in this process or a worker
    source = functools.partial(_make_registered, env_id)
    kind = resolve_preset(env_id, preset)
    _register_family(env_id)
    wrapper: Callable | None = None  # what SB3 puts around each env's Monitor (make_atari_env's AtariWrapper, ...)
    env_kwargs = None
    if kind == "atari":
        wrapper = AtariWrapper
    elif kind == "dmc":
        wrapper = FlattenDictObservation
    elif kind == "minatar":
        from rlgauntlet.envs.minatar import MAX_EPISODE_STEPS, MinAtarImage

        wrapper, env_kwargs = MinAtarImage, {"max_episode_steps": MAX_EPISODE_STEPS}
    vec: dict[str, Any] = {}
    if subproc:  # each worker's env answers for its own state (an exact resume's snapshots)
        vec = {"vec_env_cls": SubprocVecEnv, "wrapper_class": functools.partial(_in_worker, wrapper)}
    elif wrapper is not None:
        vec = {"wrapper_class": wrapper}
    venv = make_vec_env(source, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs, **vec)
    return VecFrameStack(venv, ATARI_FRAME_STACK) if kind == "atari" else venv


def _in_worker(wrapper: Callable | None, env: gym.Env, **kwargs: Any) -> gym.Env:
    """A worker process's env: ``wrapper`` (if any) around it, then the layer through which the
    parent takes and puts back its snapshot (:class:`~rlgauntlet.envs.snapshot.WorkerSnapshots`)."""
    from rlgauntlet.envs.snapshot import WorkerSnapshots

    return WorkerSnapshots(wrapper(env, **kwargs) if wrapper is not None else env)
