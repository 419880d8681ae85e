"""What a report shows, read from one or more results stores: per (agent, env), every threat
spec's latest run of each seed (episodes of several seeds pooled into one summary), the
strongest-of rows, certification and OOD runs.

Every figure keeps a reference to its run (store file and run id), so that each number in
the report traces back to the run, its spec, seed and episodes.

Example:
    >>> from rlgauntlet.experiments.store import ResultsStore
    >>> load_groups([ResultsStore(":memory:")])
    []
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.runs import summarize
from rlgauntlet.experiments.store import ResultsStore

def threat_family(spec: str) -> str:
    """``natural``, ``adversarial``, ``learned``, ``model_based``, ``certified`` or ``other``."""
    from rlgauntlet.threats.base import THREATS
    from rlgauntlet.threats.spec import ALIASES

    name = spec.split(":")[0].strip()
    if name in ALIASES:
        return "adversarial"
    if name == "gwc":
        return "certified"
    if name not in THREATS:
        return "other"
    return THREATS[name].family  # declared by each threat (threats.base.FAMILIES)


#: folder names of our training runs between the run's name and its ``model.zip``
_CHECKPOINT_FOLDERS = {"checkpoint", "agent"}


def agent_label(agent: dict | str) -> str:
    """An agent's name in the report: its zoo name, else its file's stem; a training run's
    ``model.zip`` (``runs/NAME/checkpoint[/agent]/model.zip``) is called by its run, ``NAME``.

    >>> agent_label({"path": "runs/hopper-sa-ppo-seed1/checkpoint/agent/model.zip"})
    'hopper-sa-ppo-seed1'
    """
    if isinstance(agent, str):
        return agent
    if agent.get("name"):
        return agent["name"]
    path = Path(agent.get("path", "agent"))
    if path.stem == "model":
        run = next((parent.name for parent in path.parents if parent.name and parent.name not in _CHECKPOINT_FOLDERS),
                   None)
        if run is not None:
            return run
    return path.stem


@dataclass(frozen=True)
class RunRef:
    """Where a number comes from: the store (its position among the report's stores and file
    name) and the run id in it."""

    store: int
    store_name: str
    run_id: int

    @property
    def anchor(self) -> str:
        return f"run-{self.store}-{self.run_id}"

    @property
    def text(self) -> str:
        return f"{self.store_name}#{self.run_id}"


@dataclass
class Evaluation:
    """One threat spec's evaluation: the latest run of each seed, their episodes pooled into one
    summary (as ``rlgauntlet evaluate`` reports a run), their metas and run-level metrics."""

    refs: list[RunRef]
    metas: list[dict]
    summary: dict
    metrics: list[dict]

    @property
    def ref(self) -> RunRef:
        return self.refs[0]

    @property
    def meta(self) -> dict:
        return self.metas[0]

    @property
    def seeds(self) -> list[int]:
        return [m.get("seed", 0) for m in self.metas]

    @property
    def spec(self) -> str:
        return self.meta["spec"]

    @property
    def family(self) -> str:
        return threat_family(self.spec)

    @property
    def eps(self) -> float | None:
        value = self.meta.get("params", {}).get("eps")
        return None if value is None else float(value)

    def metric(self, name: str) -> float | None:
        """A run-level metric; over several seeds the mean of the runs' values (None unless every
        run has it)."""
        values = [m[name]["value"] for m in self.metrics if name in m and m[name]["value"] is not None]
        return float(sum(values) / len(values)) if values and len(values) == len(self.metrics) else None


@dataclass
class AgentRuns:
    """Everything the stores hold about one agent on one env."""

    label: str
    env: str
    agent: dict = field(default_factory=dict)
    preset: str | None = None
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # spec -> latest run per seed
    strongest: list[dict] = field(default_factory=list)
    certification: list[dict] = field(default_factory=list)
    ood: list[dict] = field(default_factory=list)
    runs: list[tuple[RunRef, str, dict]] = field(default_factory=list)  # every run: (ref, kind, meta)

    @property
    def clean(self) -> Evaluation | None:
        return self.evaluations.get("clean")

    @property
    def argmin(self) -> Evaluation | None:
        from rlgauntlet.metrics.impact import ARGMIN_LABEL

        return self.evaluations.get(ARGMIN_LABEL)

    def threats(self, family: str) -> list[Evaluation]:
        """Evaluations of one threat family, by spec."""
        return sorted((e for e in self.evaluations.values() if e.family == family), key=lambda e: (e.spec))

    @property
    def budget_space(self) -> str | None:
        return self.clean.meta.get("budget_space") if self.clean else None

    @property
    def is_image(self) -> bool:
        return self.budget_space == "pixel01"


def _summary(store: ResultsStore, run_id: int, meta: dict) -> dict:
    records = store.episodes(run_id)
    return summarize(records, meta.get("threat", meta["spec"]), meta["spec"], meta.get("seed", 0),
                     str(meta.get("budget_space")), store.wall_seconds(run_id))


def load_groups(stores: list[ResultsStore], agents: list[str] | None = None,
                runs: set[tuple[int, int]] | None = None, labels: dict[str, str] | None = None) -> list[AgentRuns]:
    """Per (agent, env), in order of first appearance; ``agents`` keeps only labels containing
    one of the given texts; ``runs`` keeps only these runs, as (store index, run id) pairs (a
    table that reports one chosen run per cell shows just those); ``labels`` renames agents
    (their label, see :func:`agent_label`, to the name shown)."""
    groups: dict[tuple[str, str], AgentRuns] = {}
    labels = labels or {}
    metas = [dict(store.runs()) for store in stores]  # read once: every run's meta, per store
    if runs is not None:
        held = {(index, run_id) for index, by_id in enumerate(metas) for run_id in by_id}
        for index, run_id in sorted(set(runs) - held):
            where = Path(stores[index].path).name if 0 <= index < len(stores) else f"store {index} (there is none)"
            raise UserError(f"run {run_id} is not in {where}; select runs the store holds")

    def group(agent, env: dict) -> AgentRuns | None:
        label = agent_label(agent)
        label = labels.get(label, label)
        if agents and not any(a in label for a in agents):
            return None
        key = (label, env["id"])
        if key not in groups:
            groups[key] = AgentRuns(label, env["id"], agent if isinstance(agent, dict) else {"name": agent},
                                    env.get("preset"))
        return groups[key]

    latest: dict[tuple[str, str], dict] = defaultdict(dict)  # (agent, env) -> (spec, seed) -> run
    for index, store in enumerate(stores):
        name = Path(store.path).name
        by_id = metas[index]
        kinds = {run_id: store.run_kind(run_id) for run_id in by_id}
        for run_id, meta in by_id.items():
            if runs is not None and (index, run_id) not in runs:
                continue
            ref, kind = RunRef(index, name, run_id), kinds[run_id]
            if kind == "strongest_of":
                members = meta.get("members", {})
                first = by_id.get(next(iter(members.values()), None))
                if first is None:
                    continue
                g = group(first["agent"], first["env"])
                if g is None:
                    continue
                g.runs.append((ref, kind, meta))
                winner_id = int(store.metrics(run_id)["winner_run_id"]["value"])
                winner = _summary(store, winner_id, by_id[winner_id])
                by_attack = {spec: _summary(store, rid, by_id[rid])["return_mean"] for spec, rid in members.items()
                             if rid in by_id}
                g.strongest.append({"ref": ref, "eps": meta.get("eps"), "attacks": meta["strongest_of"],
                                    "winner": meta["winner"], "winner_ref": RunRef(index, name, winner_id),
                                    "return_mean": winner["return_mean"], "return_sem": winner["return_sem"],
                                    "episodes": winner["episodes"], "seed": by_id[winner_id].get("seed"),
                                    "by_attack": by_attack})
                continue
            if kind == "gauntlet" or "agent" not in meta or "env" not in meta:  # a gauntlet run: the leaderboard's
                continue
            who = meta["agent"]
            if isinstance(who, str) and meta.get("nominal_runs"):  # an OOD run names the agent by its hash
                who = by_id.get(meta["nominal_runs"][0], {}).get("agent", who)
            g = group(who, meta["env"])
            if g is None:
                continue
            g.runs.append((ref, kind, meta))
            if kind == "ood" and "shift" in meta:
                g.ood.append({"ref": ref, "meta": meta, "metrics": store.metrics(run_id),
                              "id_runs": meta.get("nominal_runs", []), "ood_runs": meta.get("shifted_runs", []),
                              "store": store})
            elif kind == "certification":
                entry = {"ref": ref, "meta": meta, "metrics": store.metrics(run_id)}
                if "spec" in meta:  # a GWC run: episodes like any evaluation
                    entry["summary"] = _summary(store, run_id, meta)
                g.certification.append(entry)
            elif kind == "evaluation" and "spec" in meta:
                if isinstance(meta["agent"], dict) and not g.agent.get("sha256"):
                    g.agent = meta["agent"]
                records = store.episodes(run_id)
                if records:  # a later run of the same spec and seed replaces an earlier one
                    latest[(g.label, g.env)][(meta["spec"], meta.get("seed", 0))] = \
                        (ref, meta, records, store.metrics(run_id), store.wall_seconds(run_id))
    for key, runs in latest.items():
        by_spec: dict[str, list] = {}
        for (spec, _seed), run in sorted(runs.items(), key=lambda item: (item[0][0], item[0][1])):
            by_spec.setdefault(spec, []).append(run)
        for spec, seeds in by_spec.items():
            meta = seeds[0][1]
            pooled = [r for run in seeds for r in run[2]]
            summary = summarize(pooled, meta.get("threat", spec), spec, meta.get("seed", 0),
                                str(meta.get("budget_space")), sum(run[4] for run in seeds))
            groups[key].evaluations[spec] = Evaluation([run[0] for run in seeds], [run[1] for run in seeds], summary,
                                                       [run[3] for run in seeds])
    return list(groups.values())
