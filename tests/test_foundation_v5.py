"""Foundation v5: one owner for the agent grammar, the device that reaches every worker, a plan
nobody mutates, and the moved modules' old names still importable (with a warning)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.victims.agent_ref import AGENT_FORMS, AGENT_SOURCES, agent_of_description, parse_agent

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rlgauntlet"


# -- the grammar -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, source, name, algorithm, path", [
    ("zoo:cartpole-dqn", "zoo", "cartpole-dqn", None, None),
    ("published:ppo-hopper", "published", "ppo-hopper", None, None),
    ("sb3:runs/a.zip", "sb3", "runs/a.zip", None, "runs/a.zip"),
    ("sb3:runs/a.zip:PPO", "sb3", "runs/a.zip", "ppo", "runs/a.zip"),
    ("sb3:C:/agents/a.zip", "sb3", "C:/agents/a.zip", None, "C:/agents/a.zip"),  # a colon that names no algorithm
    ("sb3:runs/a.zip:tree", "sb3", "runs/a.zip:tree", None, "runs/a.zip:tree"),
    ("torchscript:a.pt:ppo", "torchscript", "a.pt:ppo", None, "a.pt:ppo"),  # only sb3 names an algorithm
    ("pg:models/x.model", "pg", "models/x.model", None, "models/x.model"),
])
def test_the_grammar_splits_each_form(text, source, name, algorithm, path):
    ref = parse_agent(text)
    assert (ref.source, ref.name, ref.algorithm) == (source, name, algorithm)
    assert (str(ref.path) if ref.path else None) == (str(Path(path)) if path else None)
    assert str(ref) == text
    assert AgentSpec(agent=text).source == source


@pytest.mark.parametrize("text, message", [
    ("mystery", "has no source prefix"),
    ("hub:org/agent", "unknown agent source 'hub'"),
    ("zoo:", "names no name after zoo:; give zoo:NAME \\(`rlgauntlet zoo list` names them\\)$"),
    ("sb3:  ", "names no path after sb3:; give sb3:PATH$"),
    ("published:", "`rlgauntlet published list` names them"),
])
def test_the_grammar_refuses_with_the_accepted_forms(text, message):
    with pytest.raises(UserError, match=message) as caught:
        parse_agent(text)
    assert "\n" not in str(caught.value)
    if "source" in message:
        assert AGENT_FORMS in str(caught.value)


def test_every_source_of_the_grammar_is_one_the_resolver_loads():
    """A source the grammar accepts but load_victim does not handle would reach its assertion."""
    resolver = (SRC / "victims" / "resolver.py").read_text()
    for source in AGENT_SOURCES:
        assert f'source == "{source}"' in resolver or f'"{source}"' in resolver, source


def test_a_run_record_names_the_agent_that_made_it():
    assert agent_of_description({"source": "zoo", "name": "pong-dqn"}) == "zoo:pong-dqn"
    assert agent_of_description({"source": "pg", "path": "releases/x.model", "name": "ppo-hopper",
                                 "published": "huanzhang12/ATLA_robust_RL"}) == "published:ppo-hopper"
    assert agent_of_description({"source": "pg", "path": "releases/x.model"}) == "pg:releases/x.model"
    assert agent_of_description({"source": "torch"}) is None


def test_no_module_splits_an_agent_name_by_hand():
    """``source:rest`` is parsed by victims/agent_ref.py alone: a hand split of an agent spec (the
    five copies this replaced) would drift from it."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "agent_ref.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("partition", "split", "startswith")
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in (":", "zoo:", "sb3:", "pg:", "published:", "torchscript:")):
                text = ast.unparse(node.func.value)
                if "agent" in text or text.endswith("spec.agent"):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def test_the_help_texts_read_the_one_list_of_forms():
    from rlgauntlet.cli.common import agent_help

    assert AGENT_FORMS in agent_help("zoo:cartpole-dqn")
    assert AgentSpec.model_fields["agent"].description == AGENT_FORMS
    copies = [path.relative_to(SRC) for path in SRC.rglob("*.py")  # no module lists the forms on its own
              if path.name != "agent_ref.py" and "PATH.zip[:ALGO] | torchscript:PATH" in path.read_text()]
    assert copies == []


# -- the spec travels whole -------------------------------------------------------------------

def test_an_agent_spec_is_frozen_and_hashable_with_every_option():
    spec = AgentSpec(agent="zoo:cartpole-dqn", device="cuda", precision="float64")
    other = AgentSpec(agent="zoo:cartpole-dqn", device="cpu", precision="float64")
    assert hash(spec) == hash(AgentSpec(agent="zoo:cartpole-dqn", device="cuda", precision="float64"))
    assert spec != other  # the device is part of what a worker receives
    with pytest.raises(Exception):
        spec.device = "cpu"


def test_a_sweep_entry_travels_as_its_plain_spec():
    from rlgauntlet.experiments.sweep import AgentEntry

    entry = AgentEntry(agent="zoo:cartpole-dqn", device="cpu", threats=["uniform_noise:eps=0.1"])
    plain = entry.load_spec()
    assert type(plain) is AgentSpec and plain.device == "cpu" and plain.agent == "zoo:cartpole-dqn"
    hash(plain)


class _Stop(Exception):
    pass


def test_a_gauntlet_asked_for_a_device_builds_every_victim_and_director_there(monkeypatch, tmp_path):
    """``--device X`` reaches the driver's victim, every episode worker's victim and every director.
    A fake device name passes the device check (as ``cuda`` does on a GPU machine); the loads are
    recorded at the bottom (load_victim, learn_attacker) and done on the CPU, so every layer
    between the command and those two calls is the real one."""
    from rlgauntlet.experiments import agents, cells, store
    from rlgauntlet.gauntlet.plan import plan_gauntlet
    from rlgauntlet.gauntlet.run import train_attacker_task
    from rlgauntlet.training.attackers import attack_train

    victims, directors = [], []
    real_load = agents.load_victim

    def load_victim(agent, *args, device="cpu", **kwargs):
        victims.append(device)
        return real_load(agent, *args, device="cpu", **kwargs)

    def learn_attacker(victim, config, steps, run_dir, device="cpu", **kwargs):
        directors.append(device)
        raise _Stop

    monkeypatch.setattr(agents, "check_device", lambda device: None)
    monkeypatch.setattr(agents, "load_victim", load_victim)
    monkeypatch.setattr(attack_train, "learn_attacker", learn_attacker)
    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite",
                         device="fake:0")
    assert victims == ["fake:0"]  # the driver's
    with store.store_of(None) as results:
        [cell_set] = plan.cells(results, plan.heuristics[:1])[:1]
        chunks = cell_set.chunks(chunk_episodes=1)
    assert {chunk.cell.agent.device for chunk in chunks} == {"fake:0"}
    cells._VICTIMS.clear()
    cells.run_chunk(next(c for c in chunks if c.cell.spec is None and not c.cell.argmin))  # a worker's load
    cells._VICTIMS.clear()
    assert victims == ["fake:0", "fake:0"]
    directors_planned = [t for t in plan.tasks if t.method != "robust-sarsa"]
    assert directors_planned
    for task in directors_planned:
        with pytest.raises(_Stop):
            train_attacker_task(task)
    assert directors == ["fake:0"] * len(directors_planned)
    assert set(victims) == {"fake:0"}


def test_an_attacker_trained_from_a_spec_trains_where_the_spec_says(monkeypatch, tmp_path):
    """train_attacker's own device default no longer overrides the spec's device."""
    from rlgauntlet.experiments import agents
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.training.attackers import attack_train

    seen = []
    real_load = agents.load_victim
    monkeypatch.setattr(agents, "check_device", lambda device: None)
    monkeypatch.setattr(agents, "load_victim", lambda agent, *a, device="cpu", **k: real_load(agent, *a, **k))

    def learn_attacker(victim, config, steps, run_dir, device="cpu", **kwargs):
        seen.append(device)
        raise _Stop

    monkeypatch.setattr(attack_train, "learn_attacker", learn_attacker)
    with pytest.raises(_Stop):
        train_attacker(AgentSpec(agent="zoo:cartpole-dqn", device="fake:1"), "CartPole-v1", "paad", 0.1, 100,
                       tmp_path / "a")
    with pytest.raises(_Stop):
        train_attacker(AgentSpec(agent="zoo:cartpole-dqn", device="fake:1"), "CartPole-v1", "paad", 0.1, 100,
                       tmp_path / "b", device="fake:2")  # an explicit device wins
    assert seen == ["fake:1", "fake:2"]


def test_robust_sarsa_is_the_one_stage_kept_on_the_cpu_and_the_result_says_so(monkeypatch, tmp_path):
    """Robust Sarsa's Q function trains on the CPU only: asked for another device, attack-train
    refuses in one line, and the gauntlet plans that one stage on the CPU (its row says where)."""
    from rlgauntlet.experiments import agents
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    monkeypatch.setattr(agents, "check_device", lambda device: None)
    real_load = agents.load_victim
    monkeypatch.setattr(agents, "load_victim", lambda agent, *a, device="cpu", **k: real_load(agent, *a, **k))
    with pytest.raises(UserError, match="Robust Sarsa trains its Q function on the CPU") as caught:
        train_attacker(AgentSpec(agent="zoo:hopper-ppo", device="fake:0"), "Hopper-v5", "robust-sarsa", 0.075, 10,
                       tmp_path / "q")
    assert "\n" not in str(caught.value) and not (tmp_path / "q").exists()
    plan = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", level="quick", store=tmp_path / "g.sqlite", device="fake:0")
    devices = {t.method: t.agent.device for t in plan.tasks}
    assert devices["robust-sarsa"] == "cpu" and devices["paad"] == "fake:0"


@pytest.mark.parametrize("old, new, name", [
    ("rlgauntlet.experiments.plan", "rlgauntlet.experiments.evaluations", "checked_threats"),
    ("rlgauntlet.experiments.attackers", "rlgauntlet.experiments.attacker_job", "train_attacker"),
    ("rlgauntlet.experiments.ood", "rlgauntlet.experiments.ood_benchmark", "ood_scan"),
    ("rlgauntlet.training.job", "rlgauntlet.training.zoo_training", "train"),
    ("rlgauntlet.training.presets", "rlgauntlet.training.recipes", "get_preset"),
    ("rlgauntlet.metrics.ood", "rlgauntlet.metrics.detection", "auroc"),
    ("rlgauntlet.report.ood", "rlgauntlet.report.ood_plots", "plot_ood_scores"),
])
def test_a_moved_modules_old_name_warns_and_gives_the_same_objects(old, new, name):
    import importlib
    import sys

    sys.modules.pop(old, None)  # imported earlier in this process: the warning is given at import
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        module.no_such_name
