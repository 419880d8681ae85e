"""benchmarks/robust_hopper.py's own logic: which agent a row takes, and the table's summaries."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
robust_hopper = pytest.importorskip("robust_hopper")


def test_avg_is_the_mean_of_the_five_attacks_and_worst_their_minimum():
    columns = {"natural": {"mean": 3000.0}, "random": {"mean": 2000.0}, "maxdiff": {"mean": 1500.0},
               "robust_sarsa": {"mean": 1000.0}, "sarl": {"mean": 900.0}, "paad": {"mean": 600.0}}
    summary = robust_hopper.summarise(columns)
    # Table 3's Avg leaves Natural out: (2000 + 1500 + 1000 + 900 + 600) / 5; Table 6's: RS, SA-RL, PA-AD
    assert summary == {"avg": pytest.approx(1200.0), "avg_learned": pytest.approx(2500.0 / 3), "worst": 600.0,
                       "worst_attack": "paad"}
    # the extra push column changes neither Avg nor the paper's worst (which picks the median seed)
    stronger = robust_hopper.summarise({**columns, "push": {"mean": 400.0}})
    assert {k: stronger[k] for k in summary} == summary
    assert stronger["worst_all"] == 400.0 and stronger["worst_all_attack"] == "push"
    weaker = robust_hopper.summarise({**columns, "push": {"mean": 900.0}})
    assert weaker["worst_all"] == 600.0 and weaker["worst_all_attack"] == "paad"


def _run(folder: Path, finished: bool, atla: bool) -> None:
    agent = folder / "checkpoint" / ("agent" if atla else "")
    agent.mkdir(parents=True)
    (agent / "model.zip").write_bytes(b"zip")
    (agent / "vecnormalize.pkl").write_bytes(b"stats")
    progress = {"agent_steps": 4096} if atla else {"num_timesteps": 4096}
    (folder / "checkpoint" / "progress.json").write_text(json.dumps({**progress, "finished": finished}))


def test_a_runs_cost_comes_from_its_progress():
    # a plain run: 100 steps at 50/s, then 300 more at 100/s: 5 s in all
    plain = {"num_timesteps": 400, "history": [{"steps": 100, "steps_per_second": 50.0},
                                               {"steps": 400, "steps_per_second": 100.0}]}
    assert robust_hopper.training_cost(plain) == {"agent_steps": 400, "train_seconds": 5.0,
                                                  "agent_steps_per_second": 80.0}
    alternating = {"agent_steps": 1000, "adversary_steps": 1000, "train_seconds": 4.0, "history": []}
    assert robust_hopper.training_cost(alternating) == {"agent_steps": 1000, "train_seconds": 4.0,
                                                        "agent_steps_per_second": 250.0, "adversary_steps": 1000}


def test_the_median_seed_is_the_one_with_the_median_worst_column():
    seeds = {"0": {"worst": 900.0}, "1": {"worst": 300.0}, "2": {"worst": 1500.0}, "3": {"natural": 3000.0}}
    assert robust_hopper.median_seed(seeds) == "0"  # 300 < 900 < 1500; seed 3 is not evaluated yet
    assert robust_hopper.median_seed({"0": {"worst": 900.0}, "1": {"worst": 300.0}}) == "1"  # the lower middle


def test_a_row_takes_the_finished_run_and_refuses_an_unfinished_one_unless_asked(tmp_path):
    spec, found = robust_hopper.resolve_agent("sa-ppo", tmp_path, allow_unfinished=False)
    assert spec is None and "rlgauntlet train --preset hopper-sa-ppo --no-register" in found["missing"]
    spec, found = robust_hopper.resolve_agent("sa-ppo", tmp_path, allow_unfinished=False, seed=2)
    assert spec is None and f"--seed 2 --run-dir {tmp_path / 'hopper-sa-ppo-seed2'}" in found["missing"]
    _run(tmp_path / "hopper-pa-atla-ppo", finished=False, atla=True)
    spec, found = robust_hopper.resolve_agent("pa-atla-ppo", tmp_path, allow_unfinished=False)
    assert spec is None and "not finished (4096 agent steps)" in found["missing"]
    spec, found = robust_hopper.resolve_agent("pa-atla-ppo", tmp_path, allow_unfinished=True)
    agent = tmp_path / "hopper-pa-atla-ppo" / "checkpoint" / "agent"
    assert spec.agent == f"sb3:{agent / 'model.zip'}" and spec.vecnormalize == str(agent / "vecnormalize.pkl")
    _run(tmp_path / "hopper-sa-ppo", finished=True, atla=False)
    spec, found = robust_hopper.resolve_agent("sa-ppo", tmp_path, allow_unfinished=False)
    assert spec.agent.endswith("hopper-sa-ppo/checkpoint/model.zip") and found["agent_steps"] == 4096
    _run(tmp_path / "hopper-sa-ppo-seed1", finished=True, atla=False)
    spec, found = robust_hopper.resolve_agent("sa-ppo", tmp_path, allow_unfinished=False, seed=1)
    assert spec.agent.endswith("hopper-sa-ppo-seed1/checkpoint/model.zip") and found["seed"] == 1


def test_the_vanilla_row_is_the_zoo_agent(tmp_path):
    spec, found = robust_hopper.resolve_agent("vanilla", tmp_path, allow_unfinished=False)
    assert spec.agent == "zoo:hopper-ppo" and found["source"] == "zoo"


def test_register_puts_the_median_seed_into_the_zoo_with_every_seeds_numbers(tmp_path, monkeypatch):
    import argparse

    import rlgauntlet.training.register as register_module
    from rlgauntlet.errors import UserError

    calls = []

    def fake_register(name, checkpoint, command=None, extra=None):
        calls.append({"name": name, "checkpoint": checkpoint, "command": command, "extra": extra})
        return {"sha256": "f" * 64}

    monkeypatch.setattr(register_module, "register_zoo_agent", fake_register)
    monkeypatch.setattr(robust_hopper, "load_manifest", lambda: {})

    def seed_record(seed: int, worst: float) -> dict:
        run = tmp_path / ("hopper-sa-ppo" if seed == 0 else f"hopper-sa-ppo-seed{seed}")
        return {"agent": f"sb3:{run / 'checkpoint' / 'model.zip'}", "run": str(run), "agent_steps": 2_000_000,
                "sha256": str(seed) * 64, "avg": worst + 500, "avg_learned": worst + 200, "worst": worst,
                "worst_attack": "paad", "columns": {"natural": {"mean": 3000.0}, "paad": {"mean": worst}}}

    seeds = {str(s): seed_record(s, w) for s, w in ((0, 1900.0), (1, 800.0), (2, 1200.0))}
    rows = {"sa-ppo": {"seeds": seeds, "median_seed": int(robust_hopper.median_seed(seeds))}}
    robust_hopper.register(rows, argparse.Namespace(seeds=[0, 1, 2]))
    [call] = calls
    assert call["name"] == "hopper-sa-ppo" and rows["sa-ppo"]["median_seed"] == 2  # 800 < 1200 < 1900
    assert call["checkpoint"] == tmp_path / "hopper-sa-ppo-seed2" / "checkpoint"
    assert "--seed 2" in call["command"] and "--no-register" in call["command"]
    robustness = call["extra"]["robustness"]
    assert robustness["selected_seed"] == 2 and set(robustness["seeds"]) == {"0", "1", "2"}
    assert robustness["seeds"]["1"]["worst"] == 800.0 and rows["sa-ppo"]["zoo"]["name"] == "hopper-sa-ppo"
    calls.clear()

    def below_target(name, checkpoint, command=None, extra=None):
        raise UserError(f"{name} scores 2600.0 over 20 episodes, below its target 2800.0")

    monkeypatch.setattr(register_module, "register_zoo_agent", below_target)
    robust_hopper.register(rows, argparse.Namespace(seeds=[0, 1, 2]))
    assert "below its target 2800" in rows["sa-ppo"]["zoo"]["refused"]  # said in the table, no crash
    monkeypatch.setattr(register_module, "register_zoo_agent", fake_register)
    fewer = {"sa-ppo": {"seeds": {"0": seeds["0"]}, "median_seed": 0}}
    robust_hopper.register(fewer, argparse.Namespace(seeds=[0]))
    assert calls == []  # one seed is not a median: nothing registered

    # already in the zoo: never replaced; its numbers are refreshed only while it is the median seed
    refreshed = []
    monkeypatch.setattr(robust_hopper, "update_zoo_metadata", lambda name, fields: refreshed.append((name, fields)))
    monkeypatch.setattr(robust_hopper, "load_manifest",
                        lambda: {"hopper-sa-ppo": {"sha256": "z" * 64, "source_sha256": "2" * 64}})
    robust_hopper.register(rows, argparse.Namespace(seeds=[0, 1, 2]))
    [(name, fields)] = refreshed
    assert calls == [] and name == "hopper-sa-ppo" and fields["robustness"]["seeds"]["0"]["worst"] == 1900.0
    assert rows["sa-ppo"]["zoo"] == {"name": "hopper-sa-ppo", "sha256": "z" * 64, "numbers": "refreshed"}
    seeds["0"]["worst"] = 1000.0  # seed 0 is now the median (800 < 1000 < 1200)
    rows["sa-ppo"]["median_seed"] = int(robust_hopper.median_seed(seeds))
    refreshed.clear()
    robust_hopper.register(rows, argparse.Namespace(seeds=[0, 1, 2]))
    assert refreshed == [] and calls == []
    assert rows["sa-ppo"]["zoo"]["zoo_seed"] == "2" and "median seed is now 0" in rows["sa-ppo"]["zoo"]["note"]


def test_a_zoo_entry_s_identity_is_never_replaced(tmp_path):
    from rlgauntlet.zoo import load_manifest, update_zoo_metadata, write_manifest

    write_manifest({"a": {"sha256": "s", "file": "a.zip", "robustness": {"worst": 1}}}, tmp_path)
    with pytest.raises(ValueError, match="sha256 identify the agent"):
        update_zoo_metadata("a", {"sha256": "t"}, tmp_path)
    update_zoo_metadata("a", {"robustness": {"worst": 2}}, tmp_path)
    assert load_manifest(tmp_path)["a"] == {"sha256": "s", "file": "a.zip", "robustness": {"worst": 2}}


def test_two_table_processes_each_add_their_agents_without_dropping_the_others(tmp_path):
    """Known answer: process A starts (reads the table), process B records seed 1, then A
    records seed 0: both seeds are in the file, the median seed is chosen over both, and no
    temporary file is left behind."""
    path = tmp_path / "robust_hopper.json"
    meta = {"benchmark": "robust_hopper", "eps": 0.075}
    columns = {name: {"mean": 0.0} for name in ("natural", *robust_hopper.ATTACKS)}
    record = lambda worst: {"columns": columns, "avg": worst, "avg_learned": worst, "worst": worst,  # noqa: E731
                            "worst_attack": "paad"}
    robust_hopper.write_record(path, meta)  # A starts
    robust_hopper.write_record(path, meta, "pa-atla-ppo", 1, record(900.0))  # B
    robust_hopper.write_record(path, meta, "pa-atla-ppo", 0, record(300.0))  # A
    robust_hopper.write_record(path, meta, "atla-ppo", 0, record(500.0))
    table = json.loads(path.read_text())
    assert set(table["rows"]["pa-atla-ppo"]["seeds"]) == {"0", "1"}
    assert table["rows"]["pa-atla-ppo"]["median_seed"] == 0 and table["rows"]["pa-atla-ppo"]["worst"] == 300.0
    assert set(table["rows"]) == {"pa-atla-ppo", "atla-ppo"} and table["eps"] == 0.075
    assert [f.name for f in tmp_path.iterdir()] == ["robust_hopper.json"]


def test_the_card_shows_each_methods_median_seed_with_exactly_its_cells():
    def seed_record(agent: str, first_run: int, worst: float, with_ids: bool = True) -> dict:
        columns = {name: {"mean": 1000.0, **({"run_id": first_run + k} if with_ids else {})}
                   for k, name in enumerate(("natural", *robust_hopper.ATTACKS))}
        return {"agent": agent, "columns": columns, "worst": worst,
                **({"strongest_run_id": first_run + 6} if with_ids else {})}

    rows = {"vanilla": {"median_seed": 0, "seeds": {"0": seed_record("zoo:hopper-ppo", 1, 540.0)}},
            "sa-ppo": {"median_seed": 2, "seeds": {
                "0": seed_record("sb3:runs/hopper-sa-ppo/checkpoint/model.zip", 10, 1940.0),
                "1": seed_record("sb3:runs/hopper-sa-ppo-seed1/checkpoint/model.zip", 20, 729.0),
                "2": seed_record("sb3:runs/hopper-sa-ppo-seed2/checkpoint/model.zip", 30, 1393.0)}},
            "atla-ppo": {"median_seed": 0, "seeds": {
                "0": seed_record("sb3:runs/hopper-atla-ppo/checkpoint/agent/model.zip", 40, 977.0, with_ids=False)}},
            "pa-atla-ppo-advlr": {"median_seed": 0, "seeds": {  # a variant run: in the JSON, not on the card
                "0": seed_record("sb3:runs/hopper-pa-atla-ppo-advlr/checkpoint/agent/model.zip", 50, 600.0)}}}
    runs, labels, stale = robust_hopper.card_selection(rows)
    # vanilla's seven runs and SA-PPO seed 2's (30..36); never seed 0's or 1's
    assert runs == {(0, r) for r in [*range(1, 8), *range(30, 37)]}
    assert labels == {"hopper-ppo": "vanilla PPO", "hopper-sa-ppo-seed2": "SA-PPO, seed 2 (median of 0, 1, 2)"}
    assert stale == ["atla-ppo"]  # measured before run ids were kept: said, not guessed
