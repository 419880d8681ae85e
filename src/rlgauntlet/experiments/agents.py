"""The one agent description every job takes, and the job context that loads it.

:class:`AgentSpec` says which agent and how to load it (source, env preset, VecNormalize
statistics, input space, output kind, precision, device, whether pickled code may run). The
CLI builds it from the same options on every command; a sweep file's agent entries are
AgentSpecs with a few sweep fields more; library callers pass a spec string, an AgentSpec or a
ready :class:`Victim`.

:func:`open_job` gives a job everything it needs, in one place: the victim (checked against
the env), the env factory and preset, the env's record for the store, the results store (owned
and closed by the context, or borrowed from the caller) and the thread policy, applied for the
whole job.

Example:
    >>> from rlgauntlet.experiments.agents import AgentSpec, open_job
    >>> with open_job(AgentSpec(agent="zoo:cartpole-ppo"), "CartPole-v1") as job:
    ...     env = job.env_fn()
    ...     int(job.victim.act(env.reset(seed=0)[0][None])[0]) in (0, 1)
    True
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlgauntlet.envs import make_env, resolve_preset
from rlgauntlet.errors import UserError
from rlgauntlet.victims import Victim, load_victim
from rlgauntlet.victims.agent_ref import AGENT_FORMS, AgentRef, parse_agent


class AgentSpec(BaseModel):
    """Which agent, and how to load it: frozen and hashable, so that the spec itself is what a
    worker receives (a cell's or an attacker task's agent), every load option and the device with it.
    ``agent`` is parsed by the one grammar (:mod:`rlgauntlet.victims.agent_ref`): :attr:`ref`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(description=AGENT_FORMS)
    preset: str | None = Field(None, description="env preset override: atari, classic, mujoco, dmc, minatar, sa_dqn, none")
    kind: str | None = Field(None, description="TorchScript output kind: q, categorical, gaussian, deterministic")
    vecnormalize: str | None = Field(None, description="SB3 VecNormalize statistics saved with the agent")
    input_space: str | None = Field(None, description="TorchScript input unit: pixel01, normalized, raw")
    precision: Literal["auto", "float32", "float64"] = "auto"
    device: str = Field("cpu", description="torch device: cpu or cuda")
    allow_pickle: bool = Field(False, description="unpickle SB3 files as SB3 does (runs code stored in them)")
    other_env: bool = Field(False, description="run an agent whose file names its task on another task whose "
                                               "spaces fit (a release is refused there otherwise)")

    @property
    def ref(self) -> AgentRef:
        """The agent name parsed (``source``, ``name``, ...); a :class:`UserError` when it is not one
        of :data:`AGENT_FORMS`."""
        return parse_agent(self.agent)

    @property
    def source(self) -> str:
        """``zoo``, ``sb3``, ``torchscript``, ``pg``, ``sadqn`` or ``published``."""
        return self.ref.source

    def catalogue_env(self) -> str | None:
        """The env a catalogue agent (``zoo:NAME``, ``published:NAME``) was made for, from its
        catalogue entry; None for an agent file (it does not say)."""
        ref = self.ref
        if ref.source == "zoo":
            from rlgauntlet.zoo import zoo_entry

            return zoo_entry(ref.name)["env"]
        if ref.source == "published":
            from rlgauntlet.published import release

            return release(ref.name)["env"]
        return None

    def load_spec(self) -> "AgentSpec":
        """This entry as a plain :class:`AgentSpec` (a sweep's or board's entry without its own
        fields such as envs, threats or method): what cells and attacker tasks carry."""
        if type(self) is AgentSpec:
            return self
        return AgentSpec(**{name: getattr(self, name) for name in AgentSpec.model_fields})

    def load_options(self) -> dict:
        """The options that change which victim is loaded (what a sweep cell carries)."""
        options = {"preset": self.preset, "kind": self.kind, "vecnormalize": self.vecnormalize,
                   "input_space": self.input_space, "precision": self.precision, "allow_pickle": self.allow_pickle}
        if self.other_env:  # only then: the cells of every other agent stay as they were
            options["other_env"] = True
        return options

    def load(self, env: str) -> tuple[Victim, str]:
        """The victim, checked against ``env`` with its preset: (victim, preset name)."""
        return load_for_env(self.agent, env, self.preset, self.device, self.kind, self.vecnormalize,
                            self.input_space, self.precision, self.allow_pickle, self.other_env)


class FileAgentSpec(AgentSpec):
    """An :class:`AgentSpec` read from a file others may write (a sweep or board file): such a
    file cannot ask to run code stored in agent files; that stays the user's own flag."""

    #: the command whose ``--allow-pickle`` the user passes instead
    command: ClassVar[str] = "rlgauntlet"

    @field_validator("allow_pickle")
    @classmethod
    def _pickle_is_the_users_choice(cls, value: bool) -> bool:
        if value:
            raise ValueError(f"running pickled code is the user's choice: pass --allow-pickle to {cls.command}")
        return value


def agent_entries(value: object) -> object:
    """A file's ``agents:`` list with each bare spec string as ``{"agent": SPEC}``."""
    if isinstance(value, list):
        return [{"agent": v} if isinstance(v, str) else v for v in value]
    return value


def as_agent_spec(agent: str | AgentSpec | Victim, **options: Any) -> AgentSpec | Victim:
    """``agent`` as an AgentSpec (a spec string with loading ``options``), or the Victim itself."""
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(agent, (AgentSpec, Victim)):
        # a library function's keyword defaults (device="cpu", ...) must not override the spec's
        changed = {k: v for k, v in given.items() if v != AgentSpec.model_fields[k].default}
        if isinstance(agent, AgentSpec) and changed:
            return agent.model_copy(update=changed)
        return agent
    if isinstance(given.get("vecnormalize"), Path):
        given["vecnormalize"] = str(given["vecnormalize"])
    try:
        return AgentSpec(agent=agent, **given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "agent"
        raise UserError(f"unknown {field.replace('_', ' ')} {first.get('input')!r}: {first['msg']} "
                        f"(--{field.replace('_', '-')})") from None


def load_for_env(agent: str | Victim, env: str, preset: str | None = None, device: str = "cpu",
                 kind: str | None = None, vecnormalize: str | Path | None = None, input_space: str | None = None,
                 precision: str = "auto", allow_pickle: bool = False, other_env: bool = False) -> tuple[Victim, str]:
    """Load ``agent`` (a spec such as ``zoo:cartpole-ppo``, or a :class:`Victim`) and check that it
    fits ``env`` with its preset: returns (victim, preset name), or raises a :class:`UserError`.
    An agent whose file names the task it was trained for (``Victim.trained_for``) is refused on
    another task unless ``other_env``: same-sized spaces are no proof of the same task."""
    check_device(device)
    env_preset = resolve_preset(env, preset)
    probe = make_env(env, env_preset)
    try:
        victim = agent if isinstance(agent, Victim) else load_victim(
            agent, probe.observation_space, probe.action_space, device=device, kind=kind,
            vecnormalize=vecnormalize, input_space=input_space, precision=precision, allow_pickle=allow_pickle)
        victim.check_env(probe.observation_space, probe.action_space, env)
        check_trained_task(victim, env, other_env)
    finally:
        probe.close()
    return victim, env_preset


def check_device(device: str) -> None:
    """Refuse a torch device this machine cannot run agents on, in one line naming the fix."""
    import torch

    try:
        torch_device = torch.device(device)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {device!r}; use --device cpu or --device cuda") from None
    if torch_device.type not in ("cpu", "cuda"):
        raise UserError(f"device {device!r} is not supported; use --device cpu or --device cuda")
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA device is available; use --device cpu")


def check_trained_task(victim: Victim, env: str, other_env: bool = False) -> None:
    """Refuse ``env`` when the agent's file names another task (see :func:`load_for_env`)."""
    from rlgauntlet.envs.presets import mujoco_task

    tasks = victim.trained_for
    task = env.rpartition("/")[2].split("-v")[0]
    if other_env or not tasks or task in tasks or mujoco_task(env) in tasks:  # HopperMuJoCo15 is Hopper
        return
    name = victim.description.get("name") or victim.description.get("path") or "the agent"
    suggested = victim.description.get("mapped_env") or f"{tasks[0]}-v5"
    raise UserError(f"{name} was trained on {tasks[0]} (its file says so) and {env} is another task whose spaces "
                    f"have the same sizes; give --env {suggested}, or pass --other-env to run it there on purpose")


class Job:
    """What a job works with (see :func:`open_job`). The store is opened on first use, so a job
    that refuses its input after loading the agent has created no file."""

    def __init__(self, victim: Victim, env_id: str, preset: str, store: Any, threads: int) -> None:
        from contextlib import ExitStack

        self.victim, self.env_id, self.preset, self.threads = victim, env_id, preset, threads
        self._store_arg, self._store, self._stack = store, None, ExitStack()

    def env_fn(self) -> Any:
        """A fresh env of the job, with its preset."""
        return make_env(self.env_id, self.preset)

    @property
    def env_info(self) -> dict:
        """The env as runs record it in the store."""
        return {"id": self.env_id, "preset": self.preset}

    @property
    def store(self) -> Any:
        """The results store (:func:`~rlgauntlet.experiments.store.store_of`: the caller's, or
        opened here, in memory when none was given), opened on first use."""
        from rlgauntlet.experiments.store import store_of

        if self._store is None:
            self._store = self._stack.enter_context(store_of(self._store_arg))
        return self._store

    def close(self) -> None:
        self._stack.close()
        self._store = None


@contextmanager
def open_job(agent: str | AgentSpec | Victim, env: str, store: Any = None, threads: int | None = None,
             preset: str | None = None) -> Iterator[Job]:
    """Load the agent for ``env``, apply the thread policy and give the store for one job.

    Args:
        agent: a spec string, an :class:`AgentSpec` or a loaded :class:`Victim`.
        env: Gymnasium id.
        store: a results store path (opened on first use and closed at the end), a
            ``ResultsStore`` (borrowed: left open), or None (an in-memory store).
        threads: torch intra-op threads (``--threads``; default the thread policy's).
        preset: the env preset, for a Victim given directly (an AgentSpec carries its own).
    """
    from rlgauntlet.common.threads import thread_policy

    spec = as_agent_spec(agent, preset=preset)
    with thread_policy(threads) as n_threads:
        if isinstance(spec, AgentSpec):
            victim, env_preset = spec.load(env)
        else:
            victim, env_preset = load_for_env(spec, env, preset)
        job = Job(victim, env, env_preset, store, n_threads)
        try:
            yield job
        finally:
            job.close()
