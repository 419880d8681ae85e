"""The rollout engine: N envs side by side, one batched victim call and one batched threat
call per step, one record per finished episode.

Episode ``k`` always starts from env seed ``seed + k`` and draws its threat noise, schedule
and sampled actions from its own generators (``common.seeding``), so per-episode results do
not depend on ``n_envs``. Envs step in a plain loop (as Gymnasium's ``SyncVectorEnv`` does);
everything the victim and the threat compute is one batched tensor op over the active envs.

The engine knows threats only through ``threats.base.Threat``: an observation threat changes
the network input before the victim acts, an action threat the action before ``env.step``,
a world threat the env for a whole episode. A threat's per-episode state (its memory) is
made when the episode starts and dropped when it ends.

Example:
    >>> from rlgauntlet.envs import make_env                      # doctest: +SKIP
    >>> records = evaluate_episodes(lambda: make_env("CartPole-v1"), victim,
    ...                             threat=None, episodes=range(10), seed=0, n_envs=4)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import gymnasium as gym
import numpy as np
import torch

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.errors import UserError
from rlgauntlet.metrics.perceptual import PERCEPTUAL_EVERY, PerceptualMeter  # noqa: F401 (re-exported)
from rlgauntlet.threats.base import Memory, Threat
from rlgauntlet.victims.base import PolicyOutput, Victim, no_uncertainty_error

CONTINUOUS_ACTION_TOL = 1e-6


@dataclass
class EpisodeRecord:
    """What one episode measured.

    ``linf_sum``/``l2_sum`` add the per-step norm of (x' − x) over perturbed steps, in the
    victim's budget space; ``action_changes`` counts, among the ``action_checks`` perturbed
    steps whose clean action was computed (every one by default, every k-th step of the
    episode with ``action_change_every=k``), those whose action differs from the action on
    the clean input of the same step. For image inputs, perturbed steps whose index is a
    multiple of the meter's ``every`` (``PERCEPTUAL_EVERY`` = 10 by default) also add their
    SSIM (11×11 Gaussian window, averaged over the frames of the stack), mean squared error and, when the
    evaluation has LPIPS weights, LPIPS to ``ssim_sum``/``mse_sum``/``lpips_sum``
    (``perceptual_steps`` counts them). When the evaluation asks an uncertainty-aware agent
    for its score (OOD detection), every step adds it to ``uncertainty_sum`` and
    ``uncertainty_max`` (``uncertainty_steps`` counts them) and, if asked, to
    ``uncertainty_series`` (one score per step, in order).
    """

    episode: int
    seed: int
    episode_return: float
    length: int
    perturbed_steps: int = 0
    action_checks: int = 0
    action_changes: int = 0
    linf_sum: float = 0.0
    linf_max: float = 0.0
    l2_sum: float = 0.0
    ssim_sum: float = 0.0
    mse_sum: float = 0.0
    lpips_sum: float = 0.0
    perceptual_steps: int = 0
    wall_seconds: float = 0.0
    world: dict | None = None
    uncertainty_sum: float = 0.0
    uncertainty_max: float = 0.0
    uncertainty_steps: int = 0
    uncertainty_series: list[float] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class _Slot:
    """One env and the episode it is running (with the threat's state for that episode)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.obs = None
        self.record: EpisodeRecord | None = None
        self.generators: dict[str, torch.Generator] = {}
        self.started = 0.0
        self.threat_state = None
        self.victim_state = None  # a recurrent victim's state in this episode
        self.world_changed = False

    def start(self, episode: int, seed: int, threat: Threat | None, victim: Victim | None = None) -> None:
        self.record = EpisodeRecord(episode=episode, seed=seed + episode, episode_return=0.0, length=0)
        self.victim_state = victim.initial_state() if victim is not None and victim.recurrent else None
        self.generators = {s: episode_generator(seed, episode, s) for s in ("threat", "schedule", "policy", "uncertainty")}
        self.threat_state = threat.new_state() if threat is not None else None
        if threat is not None and threat.place == "world":
            self.world_changed = bool(threat.schedule.mask(BatchRNG([self.generators["schedule"]]))[0])
            if self.world_changed:
                self.record.world = threat.enter_world(self.env)
        self.started = time.perf_counter()
        self.obs, _ = self.env.reset(seed=seed + episode)

    def finish(self, threat: Threat | None) -> EpisodeRecord:
        rec = self.record
        rec.wall_seconds = time.perf_counter() - self.started
        if self.world_changed:
            threat.exit_world(self.env)
            rec.perturbed_steps = rec.length
            self.world_changed = False
        self.record, self.threat_state = None, None
        return rec


def _actions_differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype in (torch.int64, torch.int32):
        return a != b
    return (a - b).abs().reshape(a.shape[0], -1).amax(dim=1) > CONTINUOUS_ACTION_TOL


def evaluate_episodes(
    env_fn: Callable[[], gym.Env],
    victim: Victim,
    threat: Threat | None,
    episodes: Iterable[int],
    seed: int,
    n_envs: int = 1,
    deterministic: bool = True,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    on_step: Callable[[int], None] | None = None,
    perceptual: PerceptualMeter | None = None,
    action_change_every: int = 1,
    on_inputs: Callable[[torch.Tensor], bool] | None = None,
    uncertainty: str | None = None,
    uncertainty_series: bool = False,
    on_transition: Callable[[int, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> list[EpisodeRecord]:
    """Run the given episode indices and return their records (in order of completion).

    Args:
        env_fn: makes one env (with its preset wrappers).
        victim: the agent under test.
        threat: the threat (observation, action or world), or None for clean runs.
        episodes: episode indices ``k`` to run; episode ``k`` uses env seed ``seed + k``.
        seed: evaluation seed.
        n_envs: envs stepped side by side (results do not depend on it).
        deterministic: act greedily (default, as SB3's ``evaluate_policy``) or sample.
        on_episode: called with each record as soon as its episode ends (e.g. to store it).
        on_step: called with the number of agent steps taken in each batched step.
        perceptual: the perceptual meter for image inputs (default: SSIM and MSE).
        action_change_every: compare with the clean action on every k-th step only (an
            estimate of the rate that saves one network call per perturbed row).
        on_inputs: called with the clean network inputs (B, *input_shape) of every batched
            step (rows in slot order) before anything acts on them; returning True stops the
            run there, unfinished episodes left out (e.g. to collect visited states).
        uncertainty: score every step with the victim's own uncertainty on the input it acts on
            (``victim.uncertainty``, reduced over actions by ``mean`` or ``max``); None: no score.
        uncertainty_series: keep every step's score in ``EpisodeRecord.uncertainty_series``.
        on_transition: called after every env step with (episode, observation, executed action,
            next observation), e.g. to collect data for a dynamics model.
    """
    queue = iter(episodes)  # consumed lazily: an endless count works (e.g. to collect states)
    first = list(itertools.islice(queue, max(1, n_envs)))
    if not first:
        return []
    if threat is not None:
        threat.check_victim(victim)
    if uncertainty is not None:
        from rlgauntlet.victims.uncertainty import REDUCTIONS

        if uncertainty not in REDUCTIONS:
            raise UserError(f"unknown uncertainty reduction {uncertainty!r}; choose one of: {', '.join(REDUCTIONS)}")
        if victim.uncertainty_method is None:
            raise no_uncertainty_error(victim)
    scoring = None if uncertainty is None else (uncertainty, uncertainty_series)
    slots = [_Slot(env_fn()) for _ in first]
    done: list[EpisodeRecord] = []
    discrete = isinstance(victim.action_space, gym.spaces.Discrete)
    meter = perceptual or PerceptualMeter()
    try:
        if threat is not None:
            threat.check_env(slots[0].env, getattr(slots[0].env.spec, "id", "this env"))
        for slot, episode in zip(slots, first):
            slot.start(episode, seed, threat, victim)
        while any(s.record is not None for s in slots):
            active = [s for s in slots if s.record is not None]
            actions = _batched_actions(active, victim, threat, deterministic, discrete, meter, action_change_every,
                                       on_inputs, scoring)
            if actions is None:
                break
            if on_step is not None:
                on_step(len(active))
            for slot, action in zip(active, actions):
                obs, reward, terminated, truncated, info = slot.env.step(action)
                if on_transition is not None:
                    on_transition(slot.record.episode, slot.obs, action, obs)
                rec = slot.record
                rec.length += 1
                # the raw game score from make_env's envs; plain envs: the sum of rewards
                rec.episode_return = float(info["raw_return"]) if "raw_return" in info else rec.episode_return + float(reward)
                if terminated or truncated:
                    # a time limit always ends the episode; a termination ends it unless it
                    # was only a life lost (SB3's EpisodicLifeEnv)
                    if truncated or info.get("real_done", True):
                        done.append(slot.finish(threat))
                        if on_episode is not None:
                            on_episode(done[-1])
                        episode = next(queue, None)
                        if episode is not None:
                            slot.start(episode, seed, threat, victim)
                        continue
                    obs, _ = slot.env.reset()  # life lost: the game goes on (SB3 EpisodicLifeEnv)
                slot.obs = obs
    finally:
        for slot in slots:
            if slot.world_changed:
                threat.exit_world(slot.env)
            slot.env.close()
    return done


def _memory(active: list[_Slot], device) -> Memory:
    return Memory([s.threat_state for s in active],
                  torch.tensor([s.record.length for s in active], device=device),
                  [s.env for s in active], [s.obs for s in active], [s.record.episode for s in active])


@torch.no_grad()
def _batched_actions(
    active: list[_Slot], victim: Victim, threat: Threat | None, deterministic: bool, discrete: bool,
    meter: PerceptualMeter, action_change_every: int, on_inputs=None, scoring: tuple[str, bool] | None = None,
) -> list | None:
    """One batched step: preprocess, perturb the input, act, perturb the action, record what was
    applied. None when ``on_inputs`` asked to stop."""
    obs = np.stack([s.obs for s in active])
    x = victim.preprocess(obs)
    if obs.dtype.kind not in "biu" and not _all_finite(x):  # integer frames cannot hold NaN
        bad = [s.record.episode for s, ok in zip(active, torch.isfinite(x).reshape(len(active), -1).all(1)) if not ok]
        if np.isfinite(obs).all():
            broken = ("the state filter stored in its release file is broken (NaN, inf or zero spread): the file is "
                      "damaged; give an intact copy of the release" if victim.description.get("source") == "pg" else
                      "its VecNormalize statistics are broken (NaN, inf or negative variance); give the statistics "
                      "file saved with the agent")
            raise UserError(f"the agent's preprocessing made finite observations non-finite in episode(s) {bad}: "
                            f"{broken} (finished episodes are kept)")
        if threat is not None and threat.place == "world":
            raise UserError(f"under {threat.spec} the env's observations became non-finite (NaN or inf) in episode(s) "
                            f"{bad}: the changed parameter leaves its physics undefined; choose another value "
                            "(finished episodes are kept)")
        raise UserError(
            f"the env returned non-finite observations (NaN or inf) in episode(s) {bad}; "
            "fix the env or its wrappers (finished episodes are kept)"
        )
    if on_inputs is not None and on_inputs(x):
        return None
    if victim.recurrent:  # every forward of this step, the threat's included, reads the episodes' states
        victim.use_state([s.victim_state for s in active])
    place = threat.place if threat is not None else None
    memory = _memory(active, x.device) if threat is not None else None
    x_in, mask = _perturb(active, victim, threat, x, memory) if place == "observation" else \
        (x, torch.zeros(x.shape[0], dtype=torch.bool, device=x.device))
    if scoring is not None:
        _score(active, victim, x_in, *scoring)
    steps = torch.tensor([s.record.length for s in active], device=x.device)
    check = mask & (steps % action_change_every == 0)  # rows whose clean action is compared
    n = x.shape[0]
    # one network call for the inputs acted on and, for checked rows, their clean inputs (a
    # recurrent victim holds one state per row: two calls)
    if victim.recurrent and check.any():
        both = _stacked(victim.forward(x_in), victim.forward(x).rows(check))
    else:
        both = victim.forward(torch.cat([x_in, x[check]]) if check.any() else x_in)
    _check_finite_output(both, threat if mask.any() else None, x_in)
    noise = None
    if not deterministic:
        rng = BatchRNG([s.generators["policy"] for s in active], x.device)
        noise = rng.uniform(()) if discrete else rng.normal(victim.action_space.shape)
    actions = victim.actions(both.rows(slice(0, n)), deterministic, noise)
    if mask.any():
        changed = torch.zeros(n, dtype=torch.bool, device=x.device)
        if check.any():
            clean = victim.actions(both.rows(slice(n, None)), deterministic, None if noise is None else noise[check])
            changed[check] = _actions_differ(actions[check], clean)
        _record(active, victim, meter, x, x_in, mask, check, changed)
    if victim.recurrent:  # the state moves on with the input the agent acted on
        for slot, state in zip(active, victim.advance_state(x_in)):
            slot.victim_state = state
    if place == "action":
        if not discrete:  # the action the victim sends is float32: attack that one, whatever the batch
            actions = actions.float().to(actions.dtype)
        actions = _perturb_actions(active, victim, threat, actions, memory)
    acts = actions.cpu().numpy()
    if discrete:
        return [int(a) for a in acts]
    return [a.astype(np.float32) for a in acts]


def _stacked(a: PolicyOutput, b: PolicyOutput) -> PolicyOutput:
    """Two policy outputs of one kind as one batch, ``a``'s rows first."""
    fields = ("q", "logits", "mean", "log_std", "action")
    return PolicyOutput(a.kind, **{f: None if getattr(a, f) is None else torch.cat([getattr(a, f), getattr(b, f)])
                                   for f in fields}, squashed=a.squashed)


def _score(active: list[_Slot], victim: Victim, x_in: torch.Tensor, reduce: str, series: bool) -> None:
    """Add each row's uncertainty score (on the input the victim acts on) to its episode."""
    rng = BatchRNG([s.generators["uncertainty"] for s in active], x_in.device)
    for slot, score in zip(active, victim.uncertainty(x_in, rng, reduce).tolist()):
        rec = slot.record
        rec.uncertainty_sum += score
        rec.uncertainty_max = max(rec.uncertainty_max, score)
        rec.uncertainty_steps += 1
        if series:
            if rec.uncertainty_series is None:
                rec.uncertainty_series = []
            rec.uncertainty_series.append(score)


def _check_finite_output(out, threat: Threat | None, x_in: torch.Tensor) -> None:
    """A network that returns inf or NaN would act on garbage: stop with the reason. A threat
    that put NaN or inf into the input is caught here too (the network passes them on), so
    its input is checked only on this failure path."""
    values = [t for t in (out.q, out.logits, out.mean, out.log_std, out.action) if t is not None]
    if all(_all_finite(t) for t in values):
        return
    if threat is not None and not _all_finite(x_in):
        raise RuntimeError(f"threat {threat.spec!r} returned a bad perturbation (NaN or inf): a bug")
    if threat is not None:
        raise UserError(f"the agent's network returned inf or NaN on inputs changed by {threat.spec}: the change is "
                        "too large for this network; use a smaller value (finished episodes are kept)")
    raise UserError("the agent's network returned inf or NaN on the env's observations; check the agent and "
                    "its --vecnormalize statistics (finished episodes are kept)")


def _threat_rngs(active: list[_Slot], device) -> tuple[BatchRNG, BatchRNG]:
    """Every row's schedule and threat streams."""
    return (BatchRNG([s.generators["schedule"] for s in active], device),
            BatchRNG([s.generators["threat"] for s in active], device))


def _perturb(active: list[_Slot], victim: Victim, threat: Threat, x: torch.Tensor, memory: Memory):
    """Apply an observation threat: (input acted on, mask of the rows it changed)."""
    schedule_rng, rng = _threat_rngs(active, x.device)
    scheduled = threat.schedule.mask(schedule_rng)
    x_in, acted = threat.apply(x, victim, rng, memory, scheduled)
    if x_in.shape != x.shape or acted.shape != scheduled.shape:  # NaN or inf: see _check_finite_output
        raise RuntimeError(f"threat {threat.spec!r} returned a bad perturbation (shape): a bug")
    return x_in.detach(), acted


def _perturb_actions(active: list[_Slot], victim: Victim, threat: Threat, actions: torch.Tensor,
                     memory: Memory) -> torch.Tensor:
    """Apply an action threat to the scheduled rows and record (executed − chosen) per row."""
    schedule_rng, rng = _threat_rngs(active, actions.device)
    mask = threat.schedule.mask(schedule_rng)
    if not mask.any():
        return actions
    chosen = actions[mask]
    executed = threat.perturb_action(chosen, victim, rng.subset(mask), memory.rows(mask))
    _check_in_action_space(threat, victim, executed, chosen)
    out = actions.clone()
    out[mask] = executed.to(actions.dtype)
    changed = _actions_differ(executed, chosen)
    if executed.dtype in (torch.int64, torch.int32):
        linf = l2 = changed.double()
    else:
        delta = (executed - chosen).double().reshape(chosen.shape[0], -1)
        linf, l2 = delta.abs().amax(dim=1), delta.norm(dim=1)
    rows = np.flatnonzero(mask.cpu().numpy())
    for j, (size_inf, size_2, change) in enumerate(zip(linf.tolist(), l2.tolist(), changed.tolist())):
        _add_applied(active[rows[j]].record, size_inf, size_2, True, change)  # every action step is checked
    return out


def _check_in_action_space(threat: Threat, victim: Victim, executed: torch.Tensor, chosen: torch.Tensor) -> None:
    space = victim.action_space
    if executed.shape != chosen.shape:
        raise RuntimeError(f"threat {threat.spec!r} returned actions of shape {tuple(executed.shape)}: a bug")
    if isinstance(space, gym.spaces.Discrete):
        ok = bool(((executed >= space.start) & (executed < space.start + space.n)).all())
    else:
        low = torch.as_tensor(space.low, dtype=executed.dtype, device=executed.device)
        high = torch.as_tensor(space.high, dtype=executed.dtype, device=executed.device)
        ok = bool(torch.isfinite(executed).all() and ((executed >= low) & (executed <= high)).all())
    if not ok:
        raise RuntimeError(f"threat {threat.spec!r} returned actions outside {space}: a bug")


def _add_applied(rec: EpisodeRecord, linf: float, l2: float, checked: bool, changed: bool) -> None:
    """Count one perturbed step of an episode and the measured size of what was applied."""
    rec.perturbed_steps += 1
    rec.action_checks += int(checked)
    rec.action_changes += int(changed)
    rec.linf_sum += linf
    rec.linf_max = max(rec.linf_max, linf)
    rec.l2_sum += l2


def _all_finite(t: torch.Tensor) -> bool:
    """True when no element is NaN or ±inf. One min/max pass (both carry NaN and the
    infinities) instead of ``isfinite(t).all()``, which is about 10× slower on a batch of frames."""
    if t.numel() == 0 or not t.is_floating_point():
        return True
    lowest, highest = torch.aminmax(t)
    return bool(torch.isfinite(lowest) & torch.isfinite(highest))


def _record(active, victim, meter, x, x_in, mask, check, changed) -> None:
    """Add the measured size (and perceptual distance) of each applied perturbation to its episode."""
    every_row = bool(mask.all())
    if not every_row:  # a boolean index copies: only when some rows were left alone
        x, x_in = x[mask], x_in[mask]
    delta = (x_in - x).reshape(x.shape[0], -1)
    linf = delta.abs().amax(dim=1)
    l2 = delta.norm(dim=1)
    if not (torch.isfinite(linf).all() and torch.isfinite(l2).all()):
        raise UserError("a perturbation is too large to measure (its norm overflows); use a smaller value")
    linf, l2 = linf.tolist(), l2.tolist()
    rows = np.flatnonzero(mask.cpu().numpy())
    perceptual = _perceptual(meter, x, x_in, [active[i].record.length for i in rows]) \
        if victim.budget_space == "pixel01" and x.ndim == 4 else {}
    checked, changed = check.tolist(), changed.tolist()
    for j, i in enumerate(rows):
        rec = active[i].record
        _add_applied(rec, linf[j], l2[j], checked[i], changed[i])
        if j in perceptual:
            values = perceptual[j]
            rec.ssim_sum += values["ssim"]
            rec.mse_sum += values["mse"]
            rec.lpips_sum += values.get("lpips", 0.0)
            rec.perceptual_steps += 1


def _perceptual(meter: PerceptualMeter, clean: torch.Tensor, perturbed: torch.Tensor,
                steps: list[int]) -> dict[int, dict[str, float]]:
    """Perceptual distances of the rows whose episode step is a multiple of ``meter.every``."""
    rows = [j for j, t in enumerate(steps) if meter.every and t % meter.every == 0]
    if not rows:
        return {}
    values = {k: v.tolist() for k, v in meter.measure(clean[rows], perturbed[rows]).items()}
    return {j: {k: float(v[n]) for k, v in values.items()} for n, j in enumerate(rows)}
