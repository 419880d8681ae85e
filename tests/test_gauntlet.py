"""The gauntlet: protocols, false-robustness checks, strongest-of, caching, version guard,
leaderboard statistics (known answers), and the CLI's one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from scipy import stats

from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.gauntlet import protocols as protocols_module
from rlgauntlet.experiments.agents import AgentSpec, load_for_env
from rlgauntlet.gauntlet.checks import check_false_robustness, per_step_objective
from rlgauntlet.gauntlet.protocols import PROTOCOLS, Level, Protocol, get_protocol, protocol_for
from rlgauntlet.metrics.aggregates import improvement_interval, iqm, iqm_interval, probability_of_improvement
from rlgauntlet.victims.base import PolicyOutput


def run_cli(args, env, cwd=None):
    return subprocess.run([sys.executable, "-m", "rlgauntlet.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


class Quantised(nn.Module):
    """A Q-network that rounds its input first: the gradient is exactly zero everywhere, so
    every gradient attack stays where it starts, while the policy is as good as the network."""

    def __init__(self, net: nn.Module, step: float) -> None:
        super().__init__()
        self.net, self.step = net, step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(torch.round(x / self.step) * self.step)


@pytest.fixture(scope="module")
def masked_agent(tmp_path_factory) -> Path:
    """The zoo CartPole DQN behind an input quantisation (step 0.01), as a TorchScript file."""
    victim, _ = load_for_env("zoo:cartpole-dqn", "CartPole-v1")
    module = Quantised(victim.policy.q_net, 0.01).float().eval()
    path = tmp_path_factory.mktemp("masked") / "masked-dqn.pt"
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, 4)), str(path))
    return path


# --- protocols --------------------------------------------------------------------------------

def test_every_protocol_is_versioned_and_its_attacks_parse():
    from rlgauntlet.threats import parse_threat

    for p in PROTOCOLS.values():
        assert p.version >= 1 and p.headline_eps in p.eps_grid
        assert set(p.levels) == set(protocols_module.LEVELS)
        for specs in p.heuristics.values():
            for spec in specs:
                for eps in p.eps_grid:
                    parse_threat(f"{spec}{',' if ':' in spec else ':'}eps={eps}")
        for level in p.levels.values():
            assert level.learned_at in ("headline", "grid") and level.shifts in ("reduced", "full")
    assert protocol_for("CartPole-v1").name == "classic"
    assert protocol_for("Hopper-v5").name == "mujoco"
    assert protocol_for("PongNoFrameskip-v4").name == "pixel"
    assert protocol_for("MinAtar/Breakout-v1").name == "pixel"


def test_protocol_shift_grids_are_the_papers():
    """CartPole's full grid is paper 002's Table 1: 5 parameters × 18 multipliers."""
    classic = get_protocol("classic")
    full, reduced = classic.shifts("CartPole-v1", "full"), classic.shifts("CartPole-v1", "reduced")
    assert len(full) == 90 and "physics:param=length,scale=1/10" in full and "physics:param=gravity,scale=10" in full
    assert len(reduced) == 10 and set(reduced) < set(full)
    assert classic.shifts("Acrobot-v1", "full") == []
    assert len(get_protocol("pixel").shifts("PongNoFrameskip-v4", "full")) == 20


def test_unknown_protocol_level_and_family_name_the_fix():
    with pytest.raises(UserError, match="--protocol 'nope' is unknown"):
        get_protocol("nope")
    with pytest.raises(UserError, match="--level 'fast' is unknown"):
        get_protocol("classic").level("fast")
    with pytest.raises(UserError, match="--protocol"):
        protocol_for("FrozenLake-v1")


# --- false-robustness checks --------------------------------------------------------------------

def test_objectives_known_answers():
    """MinBest: 1 where the greedy action changed; MinQ: the clean Q of the clean action minus
    the clean Q of the action taken under attack; MaxDiff: KL of the softmaxes."""

    class Fixed:
        kind = "q"

        def __init__(self, table):
            self.table = table

        def forward(self, x):
            return PolicyOutput("q", q=self.table[x[:, 0].long()])

    table = torch.tensor([[1.0, 3.0, 0.0], [2.0, -1.0, 0.5]])
    victim = Fixed(table)
    x, x_adv = torch.tensor([[0.0], [0.0], [1.0]]), torch.tensor([[1.0], [0.0], [0.0]])
    # row 0: clean action 1 (Q 3), attacked action 0 of row 1's table: clean Q of action 0 is 1 → drop 2
    # exact: a 0/1 indicator of changed actions, no arithmetic to round
    assert per_step_objective("minbest", victim, x, x_adv).tolist() == [1.0, 0.0, 1.0]
    assert torch.allclose(per_step_objective("minq", victim, x, x_adv), torch.tensor([2.0, 0.0, 3.0]))  # row 2: 2 − (−1)
    p, q = torch.softmax(table[1], 0), torch.softmax(table[0], 0)
    kl = float((p * (p.log() - q.log())).sum())
    assert per_step_objective("maxdiff", victim, x, x_adv)[0].item() == pytest.approx(kl, rel=1e-5)


def test_masked_gradient_agent_raises_the_warnings(masked_agent):
    victim, preset = load_for_env(f"torchscript:{masked_agent}", "CartPole-v1", kind="q", input_space="raw")
    result = check_false_robustness(victim, lambda: make_env("CartPole-v1", preset), [("0.1", 0.1)], states=128)
    held = {(w["check"], w.get("objective")) for w in result["warnings"]}
    assert {("worse_than_random", "minbest"), ("vanishing_gradient", "minbest"),
            ("vanishing_gradient", "minq")} <= held
    minbest = next(r for r in result["rows"] if r["objective"] == "minbest")
    # exact: means of 0/1 indicators; a zero gradient (round) leaves x̃ = x bit for bit, so no action changes
    assert minbest["attack_mean"] == 0.0 and minbest["random_mean"] > 0.2  # PGD does nothing, noise does
    assert minbest["gradient_vanished_fraction"] == 1.0


def test_zoo_dqn_raises_no_warning_although_random_beats_pgd_in_return():
    """The issue's counter-example: on the zoo CartPole DQN at ε 0.1 Random lowers the return more
    than PGD-10, but PGD changes more actions, so its own objective says it works."""
    victim, preset = load_for_env("zoo:cartpole-dqn", "CartPole-v1")
    result = check_false_robustness(victim, lambda: make_env("CartPole-v1", preset), [("0.1", 0.1)], states=128)
    assert result["warnings"] == []
    minbest = next(r for r in result["rows"] if r["objective"] == "minbest")
    assert minbest["attack_mean"] > minbest["random_mean"] + 0.2


class AlwaysDropout(nn.Module):
    """MC dropout that stays on in eval mode (as MC-dropout agents and noisy nets do)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(4, 32), nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(nn.functional.dropout(torch.relu(self.hidden(x)), 0.5, training=True))


def test_a_stochastic_forward_is_flagged(tmp_path):
    path = tmp_path / "dropout.pt"
    torch.jit.save(torch.jit.script(AlwaysDropout()), str(path))
    victim, preset = load_for_env(f"torchscript:{path}", "CartPole-v1", kind="categorical", input_space="raw")
    result = check_false_robustness(victim, lambda: make_env("CartPole-v1", preset), [("0.1", 0.1)], states=32)
    assert "stochastic_forward" in {w["check"] for w in result["warnings"]}
    assert result["stochastic_forward_max_change"] > 0


# --- aggregates (rliable definitions, known answers) ---------------------------------------------

def test_iqm_and_probability_of_improvement_known_answers():
    scores = [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # middle half: 3, 4, 5, 6
    assert iqm(scores) == pytest.approx(4.5)
    x, y = np.array([3.0, 5.0, 5.0, 9.0]), np.array([1.0, 5.0, 7.0])
    u = stats.mannwhitneyu(x, y, alternative="two-sided").statistic  # U counts ties one half
    assert probability_of_improvement(x, y) == pytest.approx(u / (len(x) * len(y)))
    assert probability_of_improvement(y, x) == pytest.approx(1 - u / (len(x) * len(y)))


def test_bootstrap_is_stratified_by_task():
    """Two tasks of constant scores: resampling within each task never changes the pooled IQM, so
    the stratified interval is a point; resampling across tasks would spread it over [0, 10]."""
    point, low, high = iqm_interval([[0.0, 0.0, 0.0, 0.0], [10.0, 10.0, 10.0, 10.0]])
    assert point == pytest.approx(5.0) and low == pytest.approx(5.0) and high == pytest.approx(5.0)
    rng = np.random.default_rng(1)
    sample = rng.normal(100.0, 10.0, size=40)
    point, low, high = iqm_interval([sample])
    assert low < point < high and high - low < 15  # about 4 standard errors of a 40-run IQM
    p, lo, hi = improvement_interval(sample + 30.0, sample)
    assert 0.9 < p <= 1.0 and lo <= p <= hi
    assert iqm_interval([[7.0]]) == (7.0, None, None)  # one run: nothing to resample (the mean of one value is exact)


# --- the gauntlet end to end ---------------------------------------------------------------------

TINY = Protocol(
    name="classic", version=1, families=("classic",), summary="the classic protocol, shrunk for a test",
    eps_grid=("0.1",), headline_eps="0.1", budget_note="raw", learned=("paad",), learned_continuous=(),
    shifts=lambda env, extent: ["physics:param=length,scale=10", "physics:param=length,scale=1/2",
                                "physics:param=length,scale=2"],
    levels={name: Level(3, 3000, "headline", "reduced") for name in protocols_module.LEVELS}, natural=False,
    heuristics={"q": ("random", "pgd:steps=10", "pgd:objective=minq"), "categorical": ("random", "pgd:steps=10")},
    race=None)  # every member in full: the tests below read each one's return (tests/test_race.py races)


@pytest.fixture()
def tiny_protocol(monkeypatch):
    monkeypatch.setitem(PROTOCOLS, "classic", TINY)
    return TINY


def test_gauntlet_on_a_masked_agent(tiny_protocol, masked_agent, tmp_path):
    """Strongest-of is the minimum over every attack; the masked agent's gradient attacks do
    nothing while noise and the learned attacker do, and the warning is raised; a re-run
    recomputes nothing; a store of another protocol version is refused."""
    from rlgauntlet.gauntlet import run_gauntlet

    import time

    store = tmp_path / "g.sqlite"
    stages, advances = [], []
    started = time.perf_counter()
    result = run_gauntlet(f"torchscript:{masked_agent}", "CartPole-v1", level="quick", store=store, kind="q",
                          input_space="raw", method="masked", on_stage=lambda *a: stages.append(a),
                          on_advance=advances.append)
    assert 0 < result["seconds"] <= time.perf_counter() - started + 0.1
    # (stage, done, total) in director steps: one attacker of the level's 3000 steps, none trained before
    assert ("learned attackers", 0, 3000) in stages
    # the progress bars end full: every unit of work advances its bar once
    assert sum(advances) == sum(total - done for _, done, total in stages)
    assert result["protocol"] == {"name": "classic", "version": 1, "level": "quick"}
    [worst] = result["worst_case"]
    members = worst["members"]
    assert set(members) == {"random:eps=0.1", "pgd:steps=10,eps=0.1", "pgd:objective=minq,eps=0.1", "paad:eps=0.1"}
    # exact: the worst case is one member's value selected, not recomputed
    assert worst["return_mean"] == min(members.values()) and members[worst["attack"]] == worst["return_mean"]
    # exact: x̃ = x bit for bit (zero gradient), so the attacked episodes are the clean ones
    assert members["pgd:steps=10,eps=0.1"] == result["clean"]["return_mean"]  # the gradient moves nothing
    assert members["random:eps=0.1"] < result["clean"]["return_mean"]
    assert {"worse_than_random", "vanishing_gradient"} <= {w["check"] for w in result["warnings"]}
    assert [c["x"] for c in result["shifts"]["curves"]["physics:length"]] == [0.5, 2.0, 10.0]
    assert result["certified"]["available"] is False  # a TorchScript file cannot be walked by IBP
    [attacker] = result["learned_attackers"]
    zip_path = Path(attacker["folder"]) / "attacker.zip"
    assert zip_path.is_file() and str(store.parent / "gauntlet-cache") in attacker["folder"]
    stamp = zip_path.stat().st_mtime_ns

    with _opened(store) as s:
        episodes = s.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    stages.clear()
    again = run_gauntlet(f"torchscript:{masked_agent}", "CartPole-v1", level="quick", store=store, kind="q",
                         input_space="raw", method="masked", on_stage=lambda *a: stages.append(a))
    assert ("learned attackers", 3000, 3000) in stages  # the cached attacker counts as done
    assert zip_path.stat().st_mtime_ns == stamp  # the cached attacker is reused, not retrained
    with _opened(store) as s:
        assert s.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == episodes
        [(_, meta)] = s.runs("gauntlet")
        assert meta["method"] == "masked" and meta["version"] == 1
    assert again["worst_case"] == result["worst_case"]  # bit-exact is the property: read back, not recomputed

    from rlgauntlet.report.html import render_report

    page = render_report([store], tmp_path / "report.html", gauntlet=result).read_text()
    assert page.index('data-section="gauntlet"') < page.index('data-section="overview"')  # the summary on top
    assert 'data-check="vanishing_gradient"' in page and 'data-check="worse_than_random"' in page
    assert 'class="figure shift-curves"' in page  # physics:length at 1/2 and 2 (and clean at 1) as a curve
    assert page.count('<figure class="members" data-eps="0.1"><img') == 1  # the members as a chart, per ε
    grid = page[page.index("shift-grid evaluations"):]
    assert grid.index("scale=1/2<") < grid.index("scale=2<") < grid.index("scale=10<")  # numeric, not text order

    newer = Protocol(**{**vars(TINY), "version": 2})
    PROTOCOLS["classic"] = newer
    with pytest.raises(UserError, match="version 1, and this is version 2"):
        run_gauntlet(f"torchscript:{masked_agent}", "CartPole-v1", level="quick", store=store, kind="q",
                     input_space="raw")


def test_a_finished_director_scored_by_evaluate_gives_the_gauntlets_number_for_it(tiny_protocol, tmp_path,
                                                                                   cli_main):
    """docs/protocols.md: while a board trains, a finished director (its folder under the store's
    gauntlet-cache) can be scored at once with `evaluate --threat paad:attacker=FOLDER,eps=ε --seed 0
    --chunked --n-envs 5`, and that is the number the board's evaluation stage stores for the member.
    Bit-exact is the property: the same episodes, seeds and threat streams, not a second sample."""
    from rlgauntlet.gauntlet import run_gauntlet

    store = tmp_path / "g.sqlite"
    result = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=store)
    [attacker] = result["learned_attackers"]
    member = result["worst_case"][0]["members"]["paad:eps=0.1"]
    assert member != result["clean"]["return_mean"]  # the director does something: a clean run would not pass
    out = tmp_path / "peek.json"
    done = cli_main(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--threat",
                     f"paad:attacker={attacker['folder']},eps=0.1", "--episodes", str(TINY.levels["quick"].episodes),
                     "--seed", "0", "--chunked", "--n-envs", "5", "--store", str(tmp_path / "scratch.sqlite"),
                     "--out", str(out)])
    assert done.returncode == 0, done.stderr
    clean, attacked = json.loads(out.read_text())["evaluations"]
    assert clean["return_mean"] == result["clean"]["return_mean"]
    assert attacked["return_mean"] == member


def test_a_gauntlet_loads_its_agent_once_and_parses_each_spec_once(tiny_protocol, masked_agent, tmp_path, monkeypatch):
    """In the driver: one load of the agent (the plan's, used by both sweeps and the
    certification) and one parse of every threat spec (heuristics, shifts, the learned attacker
    once it is trained); worker processes load their own copy."""
    from collections import Counter

    import rlgauntlet.experiments.agents as agents
    import rlgauntlet.threats as threats
    import rlgauntlet.threats.spec as spec_module
    from rlgauntlet.gauntlet import run_gauntlet

    loads, parses = [], Counter()
    real_load, real_parse = agents.load_for_env, spec_module.parse_threat

    def load(*args, **kwargs):
        loads.append(args[0])
        return real_load(*args, **kwargs)

    def parse(spec):
        parses[spec] += 1
        return real_parse(spec)

    monkeypatch.setattr(agents, "load_for_env", load)
    monkeypatch.setattr(spec_module, "parse_threat", parse)
    monkeypatch.setattr(threats, "parse_threat", parse)
    result = run_gauntlet(f"torchscript:{masked_agent}", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite",
                          kind="q", input_space="raw")
    assert loads == [f"torchscript:{masked_agent}"]
    # specs only the sweeps use (the checks parse their own attacks, some with the same text)
    swept = ["random:eps=0.1", *tiny_protocol.shifts("CartPole-v1", "reduced"),
             *(s for s in parses if s.startswith("paad:attacker="))]
    assert len(swept) == 5 and [parses[s] for s in swept] == [1] * 5
    assert set(result["worst_case"][0]["members"]) >= {"random:eps=0.1", "paad:eps=0.1"}


def test_a_per_plan_confirmation_list_of_the_wrong_length_is_refused_before_anything_opens(tmp_path):
    """One count per plan or one int for all: a list one short would leave a plan's confirmation to
    an IndexError halfway through a board (after its directors trained). The plans here are never
    touched: the refusal comes before any store is opened."""
    from rlgauntlet.gauntlet.run import run_plans

    never_opened = [object(), object()]
    with pytest.raises(ValueError, match="1 counts for 2 plans"):
        run_plans(never_opened, confirm_episodes=[50])
    with pytest.raises(ValueError, match="3 counts for 2 plans"):
        run_plans(never_opened, confirm_episodes=(50, 0, 50))


def test_the_headline_is_confirmed_on_more_episodes_without_moving_it(tiny_protocol, masked_agent, tmp_path):
    """``confirm_episodes``: clean and the headline worst case's attack run on from the level's 3
    episodes to 6, in the same store runs. The protocol's numbers do not move (bit-exact is the
    property: the first 3 episodes are the same stored ones); the confirmed figures are those of
    an independent evaluation of that attack over episodes 0-5 (seeds 0-5); only those two cells
    run on (no argmin agent, no other member); a rerun runs nothing."""
    from rlgauntlet.experiments.evaluate import evaluate
    from rlgauntlet.gauntlet import run_gauntlet

    store, agent = tmp_path / "g.sqlite", f"torchscript:{masked_agent}"
    options = dict(level="quick", store=store, kind="q", input_space="raw")
    plain = run_gauntlet(agent, "CartPole-v1", **options)
    assert "confirmed" not in plain
    with _opened(store) as s:
        before = s.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    confirmed = run_gauntlet(agent, "CartPole-v1", confirm_episodes=6, **options)
    assert confirmed["worst_case"] == plain["worst_case"] and confirmed["clean"] == plain["clean"]
    with _opened(store) as s:
        assert s.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == before + 2 * 3
    [headline] = plain["worst_case"]
    figures = confirmed["confirmed"]
    assert figures["episodes_per_seed"] == 6 and figures["worst_case"]["attack"] == headline["attack"]
    report = evaluate(agent_spec := AgentSpec(agent=agent, kind="q", input_space="raw"), "CartPole-v1",
                      threats=[headline["spec"]], episodes=6, seed=0, n_envs=2, impact=False)
    by_spec = {ev["spec"]: ev for ev in report.to_dict()["evaluations"]}
    for ours, theirs in ((figures["clean"], by_spec["clean"]), (figures["worst_case"], by_spec[headline["spec"]])):
        returns = np.asarray(theirs["returns"], dtype=float)
        assert ours["episodes"] == len(returns) == 6
        assert ours["return_mean"] == pytest.approx(returns.mean(), abs=1e-9)
        assert ours["return_sem"] == pytest.approx(returns.std(ddof=1) / np.sqrt(6), abs=1e-9)
    # the protocol's 3 episodes are the first 3 of the 6
    assert headline["return_mean"] == pytest.approx(np.mean(by_spec[headline["spec"]]["returns"][:3]), abs=1e-9)
    again = run_gauntlet(agent_spec, "CartPole-v1", confirm_episodes=6, level="quick", store=store)
    # read back, with 6 episodes now stored in those runs: still the level's 3
    assert again["confirmed"] == figures and again["worst_case"] == plain["worst_case"]
    from rlgauntlet.report.html import render_report

    page = render_report([store], tmp_path / "report.html", gauntlet=again).read_text()
    assert '<p class="confirmed" data-episodes="6">' in page and "the first 3 are the ones above" in page
    assert 'class="confirmed"' not in render_report([store], tmp_path / "plain.html", gauntlet=plain).read_text()
    with _opened(store) as s:
        assert s.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == before + 2 * 3


class _opened:
    def __init__(self, path):
        from rlgauntlet.experiments.store import ResultsStore

        self.store = ResultsStore(path)

    def __enter__(self):
        return self.store

    def __exit__(self, *exc):
        self.store.close()


def test_leaderboard_ranks_by_worst_case_and_never_mixes_versions(tmp_path):
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.leaderboard import render_leaderboard

    path = tmp_path / "board.sqlite"
    store = ResultsStore(path)
    scores = {"robust": [300.0, 320.0, 280.0], "vanilla": [20.0, 15.0, 40.0]}
    for method, values in scores.items():
        for seed, value in enumerate(values):
            meta = {"protocol": "classic", "version": 1, "level": "quick", "env": "CartPole-v1", "agent": f"{method}{seed}",
                    "sha256": f"{method}{seed}", "method": method}
            run = store.create_run(run_key(meta), meta, kind="gauntlet")
            store.add_metric(run, "worst_case@0.1", value)
            store.add_metric(run, "clean_return", 500.0)
    old = {"protocol": "classic", "version": 0, "level": "quick", "env": "CartPole-v1", "agent": "old", "sha256": "o",
           "method": "old"}
    store.add_metric(store.create_run(run_key(old), old, kind="gauntlet"), "worst_case@0.1", 499.0)
    store.close()
    board = leaderboard([path])
    current = next(b for b in board["boards"] if b["version"] == 1)
    assert [r["method"] for r in current["rows"]] == ["robust", "vanilla"]
    assert current["rows"][0]["iqm"] == pytest.approx(float(stats.trim_mean([300.0, 320.0, 280.0], 0.25)))
    assert current["pairs"][0]["p_x_better"] == 1.0  # exact: 9 of 9 pairs counted, 9/9
    assert "old" not in {r["method"] for r in current["rows"]}  # another version: its own board
    out = render_leaderboard(board, tmp_path / "board.html")
    text = out.read_text()
    assert '<meta name="generator" content="rlgauntlet' in text and 'data-rank="1"' in text


def test_leaderboard_as_markdown_and_latex_names_the_protocol_version_and_ranks_as_the_page(tmp_path, cli_env):
    from rlgauntlet.common.outputs import output_kind
    from rlgauntlet.experiments.store import ResultsStore, run_key

    path = tmp_path / "board.sqlite"
    store = ResultsStore(path)
    for method, value in (("vanilla_ppo", 20.0), ("sa_ppo", 310.0)):
        meta = {"protocol": "classic", "version": 2, "level": "quick", "env": "CartPole-v1", "agent": method,
                "sha256": method, "method": method}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, "worst_case@0.1", value)
        store.add_metric(run, "clean_return", 500.0)
    store.close()
    for fmt, name in (("markdown", "board.md"), ("latex", "board.tex")):
        proc = run_cli(["leaderboard", "--store", str(path), "--out", str(tmp_path / name), "--format", fmt], cli_env)
        assert proc.returncode == 0, proc.stderr
        assert output_kind(tmp_path / name) == "leaderboard table"
    md = (tmp_path / "board.md").read_text().splitlines()
    assert "protocol classic v2, level quick" in md[1] and "ε = 0.1" in md[1]
    assert md[5].startswith("| 1 | sa_ppo | 1 | 310 |") and md[6].startswith("| 2 | vanilla_ppo | 1 | 20 | 500 |")
    tex = (tmp_path / "board.tex").read_text()
    assert r"\caption{rlgauntlet leaderboard, CartPole-v1: protocol classic v2" in tex
    assert r"1 & sa\_ppo & 1 & 310 &" in tex and r"$\epsilon$ = 0.1" in tex and "\\toprule" in tex
    wrong = run_cli(["leaderboard", "--store", str(path), "--out", str(tmp_path / "board.md"), "--format", "latex"],
                    cli_env)
    assert wrong.returncode == 2 and "ending in .tex" in wrong.stderr


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.slow
def test_leaderboard_renders_in_headless_chromium(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install 'rlgauntlet[browser]'")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: apt-get install chromium (make test-slow does)")
    test_leaderboard_ranks_by_worst_case_and_never_mixes_versions(tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto((tmp_path / "board.html").resolve().as_uri())
            ranks = page.evaluate("[...document.querySelectorAll('tr[data-rank]')].map(r => r.dataset.method)")
            visible = page.evaluate("[...document.querySelectorAll('section.board')]"
                                    ".filter(e => e.getBoundingClientRect().height > 0).length")
        finally:
            browser.close()
    assert ranks[:2] == ["robust", "vanilla"] and visible == 2


# --- the CLI ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--protocol", "nope"], "--protocol 'nope' is unknown"),
    (["--level", "fast"], "--level 'fast' is unknown"),
    (["--env", "FrozenLake-v1"], "--protocol"),
    (["--env", "NoSuchEnv-v0"], "cannot make env"),
    (["--env", "CartPole-v1", "--protocol", "pixel"], "--protocol pixel is for"),
    (["--env", "CartPole-v1", "--protocol", "mujoco@v6"], "--protocol mujoco@v6 is for"),
    (["--protocol", "classic@v1"], "--protocol 'classic@v1': this rlgauntlet runs classic as classic@v2"),
    (["--level", "quick", "--confirm-episodes", "10"], "--confirm-episodes 10: the quick level already runs 10 episodes"),
])
def test_gauntlet_bad_input_is_one_line(args, message, tmp_path, cli_main):
    base = {"--agent": "zoo:cartpole-dqn", "--env": "CartPole-v1", "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    res = cli_main(["gauntlet", *[x for kv in base.items() for x in kv]])
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "gauntlet.sqlite").exists()


def test_gauntlet_list_and_leaderboard_refuse_a_foreign_file(tmp_path, cli_env):
    from rlgauntlet.gauntlet.protocols import DEFAULT_VERSIONS

    res = run_cli(["gauntlet", "--list", "--json"], cli_env)
    assert res.returncode == 0
    listed = json.loads(res.stdout)
    # the default version is listed under the family's name, every other version by its tag
    default = DEFAULT_VERSIONS["mujoco"]
    tag = {v: "mujoco" if v == default else f"mujoco@v{v}" for v in (5, 6, 7, 8)}
    assert set(listed) == set(PROTOCOLS) | set(tag.values()) and listed["classic"]["version"] >= 1
    assert listed["mujoco"]["version"] == default and listed[tag[6]]["extra_directors"] == {
        "official-attack": {"methods": ["sarl"], "steps": {"standard": 2_000_000, "paper": 2_000_000}}}
    assert listed[tag[7]]["recurrent_steps"] == {"standard": {"Ant": 4_999_168, "AntContactForces": 4_999_168}}
    assert listed[tag[7]]["recurrent_patience"] and not listed[tag[6]]["recurrent_patience"]
    assert listed[tag[8]]["curriculum"] == {"tasks": {"HalfCheetah": 3.0, "Ant": 3.0, "AntContactForces": 3.0},
                                         "methods": ["paad"]} and listed[tag[8]]["recurrent_steps"] == {}
    assert listed[tag[7]]["curriculum"] == {"tasks": {}, "methods": []}
    assert listed[tag[8]]["transfer_directors"] == 3
    plain = run_cli(["gauntlet", "--list"], cli_env)  # the table says what each version adds
    rows: dict[str, str] = {}
    key = ""  # a wrapped line's empty name cell continues the row above
    for line in plain.stdout.splitlines():  # each row's learned-attackers cell, its wrapped lines joined
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 6:
            key = cells[1] or key
            rows[key] = f"{rows.get(key, '')} {cells[5]}".strip()
    assert "LSTM directors at standard: Ant 4999k" in rows[tag[7]] and "curriculum" not in rows[tag[7]]
    assert "paad@curriculum (first at 3 × ε on HalfCheetah, 3 × ε on Ant" in rows[tag[8]]
    assert "LSTM directors at" not in rows[tag[8]] and "curriculum" not in rows[tag[6]]
    foreign = tmp_path / "board.html"
    foreign.write_text("<html>mine</html>")
    res = run_cli(["leaderboard", "--store", str(tmp_path / "none.sqlite"), "--out", str(foreign)], cli_env)
    assert res.returncode == 2 and "not written by rlgauntlet" in res.stderr
    assert foreign.read_text() == "<html>mine</html>"


def test_docs_state_every_protocols_version_and_grid():
    """docs/protocols.md is held to the code: a version bump or a new grid must update it."""
    from rlgauntlet.gauntlet.protocols import get_protocol, runnable_tags

    text = (Path(__file__).resolve().parents[1] / "docs" / "protocols.md").read_text()
    for p in map(get_protocol, runnable_tags()):
        row = next((line for line in text.splitlines() if line.startswith((f"| `{p.name}` v{p.version} |", f"| `{p.name}` v{p.version} ("))), None)
        assert row is not None, f"docs/protocols.md has no row for {p.tag}"
        assert f"{', '.join(p.eps_grid)} ({p.headline_eps})" in row
        for family, (grid, headline) in p.env_budgets.items():  # an env's own budgets, in the same row
            assert f"{family}: {', '.join(grid)} ({headline})" in row, f"{p.tag}: {family}'s budgets"
        for level, table in p.director_steps.items():  # a task's own director steps, in its level's cell
            cell = row.split(" | ")[4 + list(p.levels).index(level)]
            for steps in set(table.values()):
                families = ", ".join(f for f, n in table.items() if n == steps)
                written = f"{steps // 1_000_000}M" if steps % 1_000_000 == 0 else f"{steps // 1000}k"
                assert f"({families}: {written})" in cell, f"{p.tag} {level}: the director steps of {families}"
        for level, table in p.recurrent_steps.items():  # an LSTM director's own steps, in its level's cell
            cell = row.split(" | ")[4 + list(p.levels).index(level)]
            for steps in set(table.values()):
                families = ", ".join(f for f, n in table.items() if n == steps)
                assert f"LSTM directors ({families}: {steps // 1000}k)" in cell, f"{p.tag} {level}: LSTM {families}"
        for setting, (_, steps) in p.extra_directors.items():  # an extra director's budget, in its levels' cells
            for level, n in steps.items():
                cell = row.split(" | ")[4 + list(p.levels).index(level)]
                assert f"`{setting}` {n // 1_000_000}M" in cell or level == "paper", f"{p.tag} {level}: {setting}"


def test_an_env_with_budgets_of_its_own_gets_them_in_the_plan_and_on_the_board():
    from rlgauntlet.gauntlet.protocols import get_protocol

    mujoco = get_protocol("mujoco")
    assert mujoco.for_env("Walker2d-v4").headline_eps == "0.05"
    assert mujoco.for_env("HalfCheetah-v5").eps_grid == ("0.05", "0.1", "0.15", "0.2")
    assert mujoco.for_env("Hopper-v5") is mujoco and mujoco.headline_eps == "0.075"
    # the board reads each stored result's headline by its version and env: v3 and earlier had 0.075 everywhere
    assert mujoco.headline_of(4, "Walker2d-v4") == "0.05" and mujoco.headline_of(3, "Walker2d-v4") == "0.075"
    assert mujoco.headline_of(4, "AntContactForces-v4") == "0.15" and mujoco.headline_of(4, "Hopper-v5") == "0.075"


RESUME_SCRIPT = """
import sys
from rlgauntlet.gauntlet import protocols
from rlgauntlet.gauntlet import run_gauntlet
from rlgauntlet.gauntlet.protocols import Level, Protocol

if __name__ == "__main__":
    protocols.PROTOCOLS["classic"] = Protocol(
        name="classic", version=1, families=("classic",), summary="resume test", eps_grid=("0.1",),
        headline_eps="0.1", budget_note="raw", learned=("paad",), learned_continuous=(),
        shifts=lambda env, extent: [], natural=False, certify=False,
        levels={"quick": Level(2, 60_000, "headline", "reduced")},
        heuristics={"q": ("random", "pgd:steps=10")})
    run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=sys.argv[1])
    print("finished")
"""


@pytest.mark.slow  # 40 s: a kill mid-director is also held by the attack-train CLI's kill test and the
# exact-resume tests (test_learned_attackers.py), a killed store by test_store.py and test_race.py
def test_a_gauntlet_killed_while_training_an_attacker_resumes_it_and_keeps_every_episode(tmp_path, cli_env):
    import os
    import signal
    import time

    from rlgauntlet.experiments.store import ResultsStore

    script, store = tmp_path / "run.py", tmp_path / "g.sqlite"
    script.write_text(RESUME_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(store)], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    progress = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(tmp_path.glob("gauntlet-cache/*/*/paad-*/checkpoint/progress.json"))
        if found and json.loads(found[0].read_text())["history"]:
            progress = found[0]
            break
        time.sleep(0.2)
    assert progress is not None, proc.communicate()
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, mid-training
    proc.wait()
    saved = [h["steps"] for h in json.loads(progress.read_text())["history"]]
    assert 0 < saved[-1] < 60_000 and not (progress.parents[1] / "manifest.json").exists()
    before = ResultsStore(store)
    kept = set(before.conn.execute("SELECT run_id, episode, episode_return FROM episodes").fetchall())
    before.close()
    assert kept  # phase one (clean and heuristic attacks) was stored before the attacker trained

    done = subprocess.run([sys.executable, str(script), str(store)], env=cli_env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr
    steps = [h["steps"] for h in json.loads(progress.read_text())["history"]]
    assert steps[:len(saved)] == saved and steps[-1] >= 60_000  # went on from the checkpoint, no step repeated
    assert steps == sorted(set(steps))
    after = ResultsStore(store)
    rows = set(after.conn.execute("SELECT run_id, episode, episode_return FROM episodes").fetchall())
    after.close()
    assert kept <= rows and len(rows) > len(kept)  # nothing lost; the learned attacker's episodes added


def test_the_worst_case_takes_every_attack_within_the_budget():
    """Known answer: a PA-AD attacker trained at 0.075 is inside the 0.1-ball, so it bounds the
    worst case at 0.1; at 0.05 it does not count. Pooled means over two seeds."""
    from types import SimpleNamespace

    from rlgauntlet.gauntlet.outcome import Outcome
    from rlgauntlet.gauntlet.plan import threat_eps
    from rlgauntlet.gauntlet.summary import summarise

    def ev(spec, returns):
        return {"spec": spec, "returns": returns, "return_mean": float(np.mean(returns))}

    reports = [{"evaluations": [ev("clean", [3000.0, 3000.0]), ev("random:eps=0.05", [2500.0, 2300.0]),
                                ev("random:eps=0.1", [2000.0, 1800.0]), ev("paad:attacker=/a,eps=0.075", [600.0, 700.0])]},
               {"evaluations": [ev("clean", [3000.0, 3000.0]), ev("random:eps=0.05", [2400.0, 2400.0]),
                                ev("random:eps=0.1", [1900.0, 1900.0]), ev("paad:attacker=/b,eps=0.075", [500.0, 800.0])]}]
    for report, returns in zip(reports, ([2000.0, 2200.0], [2300.0, 2300.0])):  # a natural change
        report["evaluations"].append(ev("gaussian_noise:std=0.1", returns))
    protocol = get_protocol("mujoco")
    plan = SimpleNamespace(
        protocol=protocol, level="quick", settings=protocol.levels["quick"], env="Hopper-v5", preset="mujoco",
        victim=SimpleNamespace(budget_space="normalized", description={}), spec=SimpleNamespace(agent="zoo:x"),
        sha="s", seeds=[0, 1], heuristics=["random:eps=0.05", "random:eps=0.1"],
        learned=["paad:attacker=/a,eps=0.075", "paad:attacker=/b,eps=0.075"], natural=["gaussian_noise:std=0.1"],
        shifts=[], tasks=[], racing=False, exhaustive=False, lstm_directors=False, authors=[], eps_of=threat_eps,
        skipped=[], labels={"random:eps=0.05": "random:eps=0.05", "random:eps=0.1": "random:eps=0.1",
                            "paad:attacker=/a,eps=0.075": "paad:eps=0.075", "paad:attacker=/b,eps=0.075": "paad:eps=0.075",
                            "gaussian_noise:std=0.1": "gaussian_noise:std=0.1"})
    summary = summarise(Outcome(plan), reports, None)  # an outcome with nothing parsed, raced or transferred
    worst = {w["eps"]: w for w in summary["worst_case"]}
    # the natural change keeps 2200 of 3000 pooled over both seeds: 1 − 2200/3000 of the return lost
    assert summary["natural"]["return_drop_mean"] == pytest.approx(1 - 2200 / 3000)
    assert summary["natural"]["impact_mean"] is None  # no impact in these evaluations: none made up
    assert worst["0.05"]["attack"] == "random:eps=0.05" and worst["0.05"]["return_mean"] == pytest.approx(2400.0)
    assert worst["0.075"]["attack"] == "paad:eps=0.075" and worst["0.075"]["return_mean"] == pytest.approx(650.0)
    assert worst["0.1"]["attack"] == "paad:eps=0.075" and worst["0.1"]["return_mean"] == pytest.approx(650.0)
    assert worst["0.1"]["members"]["random:eps=0.1"] == pytest.approx(1900.0)
    assert "0.025" not in worst


def test_an_agent_counts_once_on_the_leaderboard_under_its_latest_method(tmp_path):
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    path = tmp_path / "s.sqlite"
    store = ResultsStore(path)
    # mujoco v1 results: a version before the current one, with the same headline ε, still ranked
    for method, value in (("zoo:hopper-ppo", 600.0), ("hopper-ppo", 640.0)):  # the same file, run twice
        meta = {"protocol": "mujoco", "version": 1, "level": "standard", "env": "Hopper-v5", "agent": "zoo:hopper-ppo",
                "sha256": "same", "method": method}
        store.add_metric(store.create_run(run_key(meta), meta, kind="gauntlet"), "worst_case@0.075", value)
    store.close()
    [board] = leaderboard([path])["boards"]
    assert [(r["method"], r["iqm"]) for r in board["rows"]] == [("hopper-ppo", 640.0)]
    assert get_protocol("mujoco@v5").headline_of(1) == "0.075" and get_protocol("mujoco@v5").headline_of(6) is None
    assert get_protocol("classic").headline_of(0) is None


def test_the_pixel_protocol_fits_the_zoo_pong_agent(tmp_path):
    """Every entry of the pixel protocol applies to an Atari agent (nothing skipped): the image
    natural suite, the corruption grid at severities 1 and 5 (quick), PA-AD and SA-RL at 1/255."""
    from rlgauntlet.gauntlet import plan_gauntlet

    plan = plan_gauntlet("zoo:pong-ppo", "PongNoFrameskip-v4", level="quick", store=tmp_path / "g.sqlite")
    assert plan.protocol.tag == "pixel@v3" and plan.victim.budget_space == "pixel01" and plan.skipped == []
    assert len(plan.heuristics) == 2 * len(plan.protocol.heuristics["categorical"])
    assert "jpeg:quality=10" in plan.natural and "pixelate:severity=5" in plan.shifts
    assert [(t.method, t.eps) for t in plan.tasks] == [("paad", "1/255"), ("sarl", "1/255")]
    assert plan.learned == [f"{t.spec}" for t in plan.tasks]


def test_the_mujoco_protocol_trains_each_director_with_both_settings_and_keeps_its_best(tmp_path):
    """mujoco v2: PA-AD and SA-RL each trained with our director settings and the official
    code's, best checkpoint kept; the two settings are two rows of the results (never pooled),
    each in a folder of its own; Robust Sarsa has no director and stays one."""
    from rlgauntlet.gauntlet import plan_gauntlet

    plan = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", level="quick", store=tmp_path / "g.sqlite")
    assert plan.protocol.tag == "mujoco@v5" and plan.skipped == []
    assert [(t.method, t.setting, t.select) for t in plan.tasks] == [
        ("paad", "default", "best"), ("paad", "official", "best"), ("sarl", "default", "best"),
        ("sarl", "official", "best"), ("robust-sarsa", "default", "last")]
    assert len({t.folder for t in plan.tasks}) == 5 and "official-best" in plan.tasks[1].folder
    assert sorted(plan.labels[s] for s in plan.learned) == [
        "paad:eps=0.075", "paad@official:eps=0.075", "robust_sarsa:eps=0.075", "sarl:eps=0.075",
        "sarl@official:eps=0.075"]


def test_mujoco_v6_adds_the_official_attack_director_and_keeps_every_v5_director(tmp_path):
    """v6: one SA-RL director with the official attack scan's settings, 2M steps, no early stop, at
    standard and paper (quick has none; PA-AD none); every other director is v5's, in v5's folder
    (so a board run again under v6 reuses it and its stored episodes) with v5's steps."""
    from rlgauntlet.gauntlet import plan_gauntlet

    standard = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v6", store=tmp_path / "g.sqlite")
    assert standard.protocol.tag == "mujoco@v6" and standard.protocol.directors_version == 5
    new = [t for t in standard.tasks if t.setting == "official-attack"]
    assert [(t.method, t.eps, t.steps, t.patience, t.select) for t in new] == [("sarl", "0.075", 2_000_000, None, "best")]
    # each director trains with the PPO settings it is named after (the official ones for @official)
    assert [(t.name, t.ppo_settings) for t in standard.tasks if t.method != "robust-sarsa"] == [
        ("paad", "default"), ("paad@official", "official"), ("sarl", "default"), ("sarl@official", "official"),
        ("sarl@official-attack", "official-attack")]
    assert new[0].folder.endswith("sarl-eps0.075-official-attack-best-seed0-mujoco-v5-2000000steps")
    old = [t for t in standard.tasks if t.setting != "official-attack"]
    assert [(t.label, t.steps, t.patience) for t in old] == [
        ("paad:eps=0.075", 200_000, 3), ("paad@official:eps=0.075", 200_000, 3), ("sarl:eps=0.075", 200_000, 3),
        ("sarl@official:eps=0.075", 200_000, 3), ("robust_sarsa:eps=0.075", 200_000, 3)]
    assert all("-mujoco-v5-" in t.folder for t in standard.tasks)
    assert not any(t.setting == "official-attack"
                   for t in plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v6", "quick", store=tmp_path / "g.sqlite").tasks)
    paper = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v6", "paper", store=tmp_path / "g.sqlite")
    assert sorted({t.eps for t in paper.tasks if t.setting == "official-attack"}) == ["0.025", "0.05", "0.075", "0.1"]
    # v5: the same directors in the same folders
    v5 = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", store=tmp_path / "g.sqlite")
    assert v5.protocol.tag == "mujoco@v5" and v5.tasks == old


def test_mujoco_v7_trains_lstm_directors_on_ant_for_the_authors_budget_and_keeps_every_other_director(tmp_path):
    """v7: an LSTM director on Ant (and AntContactForces) trains 2441 × 2048 = 4,999,168 steps at the
    standard level, the authors' Ant attack budget; elsewhere, memoryless directors and the other
    levels are v6's (Hopper's LSTM director 400k, HalfCheetah's 1M); an LSTM director stops by the
    patience rule counted after its first 400k steps (v6: never)."""
    from rlgauntlet.gauntlet import plan_gauntlet
    from rlgauntlet.gauntlet.protocols import get_protocol

    v6, v7 = get_protocol("mujoco@v6"), get_protocol("mujoco@v7")
    envs = ("HopperMuJoCo15-v4", "Walker2d-v5", "HalfCheetahMuJoCo15-v4", "AntMuJoCo15-v4", "AntContactForces-v4")
    lstm = {env: v7.director_steps_of("standard", env, True) for env in envs}
    assert lstm == {"HopperMuJoCo15-v4": 400_000, "Walker2d-v5": 400_000, "HalfCheetahMuJoCo15-v4": 1_000_000,
                    "AntMuJoCo15-v4": 4_999_168, "AntContactForces-v4": 4_999_168}
    for version in (v6, v7):
        assert {env: version.director_steps_of("standard", env) for env in envs} == {
            env: 1_000_000 if "Ant" in env or "Cheetah" in env else 200_000 for env in envs}
        assert {version.director_steps_of(level, "AntMuJoCo15-v4", True) for level in ("quick", "paper")} == \
            {50_000, 2_000_000}
    assert {env: v6.director_steps_of("standard", env, True) for env in envs}["AntMuJoCo15-v4"] == 1_000_000
    assert v7.director_patience("standard", True) == (3, 400_000) and v7.director_patience("standard", False) == (3, 0)
    assert v7.director_patience("quick", True) == (3, 0) and v6.director_patience("standard", True) == (None, 0)
    # v7's first stage is v6's director under v6's rule: v6's steps, every step trained
    assert v7.first_stage("standard", "AntMuJoCo15-v4") == (1_000_000, None, 0)
    assert v7.first_stage("standard", "Hopper-v5") is None and v6.first_stage("standard", "AntMuJoCo15-v4") is None
    # the plan: Hopper's directors (LSTM ones asked for) are v6's, in the same folders, but for the patience
    kw = dict(store=tmp_path / "g.sqlite", lstm_directors=True)
    old = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v6", **kw).tasks
    new = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v7", **kw).tasks
    assert [(t.folder, t.steps) for t in old] == [(t.folder, t.steps) for t in new]
    assert [(t.label, t.patience, t.patience_from) for t in new if t.recurrent] == [
        ("paad@lstm:eps=0.075", 3, 400_000), ("sarl@lstm:eps=0.075", 3, 400_000)]
    assert {t.patience for t in old if t.recurrent} == {None}
    assert {t.first_stage for t in old + new} == {None}  # Hopper: no budget of its own, no first stage
    # Ant: the v7 LSTM director goes on from v6's, which it trains first where v6 has not
    ant = AgentSpec(agent=f"torchscript:{tmp_path / 'ant.pt'}", kind="deterministic", input_space="raw")
    torch.jit.save(torch.jit.script(torch.nn.Linear(105, 8)), str(tmp_path / "ant.pt"))
    plans = {tag: plan_gauntlet(ant, "Ant-v5", tag, **kw).tasks for tag in ("mujoco@v6", "mujoco@v7")}
    v6_lstm = {t.label: t for t in plans["mujoco@v6"] if t.recurrent}
    for t in plans["mujoco@v7"]:
        if t.recurrent:
            assert t.steps == 4_999_168 and t.first_stage == (v6_lstm[t.label].folder, 1_000_000, None, 0, "0.15")
            assert v6_lstm[t.label].patience is None  # v6's rule: its LSTM directors train every step
            assert v6_lstm[t.label].steps == 1_000_000 and v6_lstm[t.label].folder.endswith("-1000000steps")
        else:
            assert t.first_stage is None
    assert len(v6_lstm) == 2


def test_mujoco_v8_plans_a_curriculum_pa_ad_director_that_first_trains_at_three_times_the_budget(tmp_path):
    """v8: where the return has no floor (HalfCheetah, Ant), beside v6's directors (the same
    folders), one PA-AD director per ε that trains the task's director steps at 3 × ε (its own
    folder, every step) and as many again at ε, going on from there (every step: no early stop);
    the PPO settings are the default ones. Ant at standard: 1M at 0.45, then 1M at 0.15; quick: 50k
    and 50k. Hopper: v6's directors exactly."""
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.gauntlet import plan_gauntlet

    kw = dict(store=tmp_path / "g.sqlite")
    hopper = {tag: plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", tag, **kw).tasks for tag in ("mujoco@v6", "mujoco@v8")}
    assert hopper["mujoco@v8"] == hopper["mujoco@v6"]
    ant = AgentSpec(agent=f"torchscript:{tmp_path / 'ant.pt'}", kind="deterministic", input_space="raw")
    torch.jit.save(torch.jit.script(torch.nn.Linear(105, 8)), str(tmp_path / "ant.pt"))
    old = plan_gauntlet(ant, "Ant-v5", "mujoco@v6", **kw).tasks
    new = plan_gauntlet(ant, "Ant-v5", "mujoco@v8", **kw).tasks
    assert [t for t in new if t.setting != "curriculum"] == old
    (curriculum,) = [t for t in new if t.setting == "curriculum"]
    assert (curriculum.label, curriculum.steps, curriculum.patience, curriculum.ppo_settings) == (
        "paad@curriculum:eps=0.15", 2_000_000, None, "default")
    folder, steps, patience, patience_from, eps = curriculum.first_stage
    assert (Path(folder).name, steps, patience, patience_from, eps) == (
        "paad-eps0.45-curriculum-best-seed0-mujoco-v5-1000000steps", 1_000_000, None, 0, "0.45")
    assert Path(curriculum.folder).name == "paad-eps0.15-curriculum-best-seed0-mujoco-v5-2000000steps"
    quick = plan_gauntlet(ant, "Ant-v5", "mujoco@v8", level="quick", **kw).tasks
    assert [(t.steps, t.first_stage[1]) for t in quick if t.setting == "curriculum"] == [(100_000, 50_000)]
    # an agent that meets LSTM directors meets an LSTM curriculum director as well, in folders of its own
    with_lstm = plan_gauntlet(ant, "Ant-v5", "mujoco@v8", lstm_directors=True, **kw).tasks
    (lstm,) = [t for t in with_lstm if t.setting == "curriculum" and t.recurrent]
    assert (lstm.label, lstm.steps, lstm.patience, Path(lstm.first_stage[0]).name, lstm.first_stage[1:]) == (
        "paad@curriculum@lstm:eps=0.15", 2_000_000, None, "paad-eps0.45-curriculum-best-lstm-seed0-mujoco-v5-1000000steps",
        (1_000_000, None, 0, "0.45"))
    assert [t for t in with_lstm if t.setting != "curriculum"] == \
        plan_gauntlet(ant, "Ant-v5", "mujoco@v6", lstm_directors=True, **kw).tasks
    assert {t.label for t in with_lstm if t.setting == "curriculum"} == {"paad@curriculum:eps=0.15",
                                                                        "paad@curriculum@lstm:eps=0.15"}


def test_a_store_of_the_version_whose_directors_v6_keeps_is_extended_not_refused():
    """v6 runs in a store of v5 results (it reuses their directors and episodes) and v5 in a store
    v6 has written to (the field ships task by task); any other version's store is refused."""
    from types import SimpleNamespace

    from rlgauntlet.gauntlet.plan import check_protocol_version
    from rlgauntlet.gauntlet.protocols import get_protocol

    def store(*versions):
        return SimpleNamespace(path="s.sqlite", runs=lambda kind: [(i, {"protocol": "mujoco", "version": v})
                                                                    for i, v in enumerate(versions)])

    check_protocol_version(store(5, 6), get_protocol("mujoco@v6"))
    check_protocol_version(store(5), get_protocol("mujoco@v5"))
    with pytest.raises(UserError, match="holds mujoco gauntlet results of version 4, and this is version 6"):
        check_protocol_version(store(5, 4), get_protocol("mujoco@v6"))
    check_protocol_version(store(5, 6), get_protocol("mujoco@v5"))
    check_protocol_version(store(6), get_protocol("mujoco@v5"))
    with pytest.raises(UserError, match="version 4, and this is version 5"):
        check_protocol_version(store(6, 4), get_protocol("mujoco@v5"))
    with pytest.raises(UserError, match="version seven, and this is version 5"):  # not a version at all
        check_protocol_version(store(6, "seven"), get_protocol("mujoco@v5"))

def test_a_protocol_runs_by_name_at_its_default_version_or_by_tag_at_any_version_it_keeps():
    from rlgauntlet.gauntlet.protocols import PROTOCOLS, get_protocol, protocol_for, runnable_tags

    assert get_protocol("mujoco").tag == protocol_for("Hopper-v5").tag == "mujoco@v8"  # DEFAULT_VERSIONS
    assert get_protocol("mujoco@v8") is PROTOCOLS["mujoco"] and get_protocol("classic@v2") is PROTOCOLS["classic"]
    assert get_protocol("classic") is PROTOCOLS["classic"]  # no default of its own: the newest
    v5, v6, v7 = get_protocol("mujoco@v5"), get_protocol("mujoco@v6"), get_protocol("mujoco@v7")
    v8 = get_protocol("mujoco@v8")
    assert v5.extra_directors == {} and v5.directors_version == 5 and v5.transfer_directors == 1  # v6 less what v6 added
    added = ("version", "extra_directors", "directors_of", "transfer_directors", "replays")
    assert {k: v for k, v in vars(v5).items() if k not in added} == {k: v for k, v in vars(v6).items() if k not in added}
    assert v6.recurrent_steps == {} and not v6.recurrent_patience and v6.directors_version == v7.directors_version == 5
    added = ("version", "recurrent_steps", "recurrent_patience")  # v7 less what v7 added
    assert {k: v for k, v in vars(v6).items() if k not in added} == {k: v for k, v in vars(v7).items() if k not in added}
    # v8 is v6 and its curriculum director (one more transferred per donor); v7's longer LSTM directors it leaves out
    assert v8.curriculum == {"HalfCheetah": 3.0, "Ant": 3.0, "AntContactForces": 3.0} and v8.directors_version == 5
    assert v8.curriculum_methods == ("paad",) and v6.curriculum == v7.curriculum == {} and not v6.curriculum_methods
    added = ("version", "curriculum", "curriculum_methods", "transfer_directors", "replays")
    assert {k: v for k, v in vars(v6).items() if k not in added} == {k: v for k, v in vars(v8).items() if k not in added}
    assert (v6.transfer_directors, v8.transfer_directors) == (2, 3)
    assert (v5.replays, v6.replays, v7.replays, v8.replays) == ((), (5,), (5,), (6, 5))  # v8 replays v6's race too
    assert {"mujoco@v5", "mujoco@v6", "mujoco@v7", "mujoco@v8"} <= set(runnable_tags())
    for bad in ("mujoco@v4", "mujoco@v", "mujoco@6", "mujoco@vsix"):
        with pytest.raises(UserError, match=f"--protocol '{bad}': this rlgauntlet runs mujoco as mujoco@v5 and mujoco@v6 "
                                            "and mujoco@v7 and mujoco@v8"):
            get_protocol(bad)
    with pytest.raises(UserError, match="'nope@v1' is unknown"):
        get_protocol("nope@v1")

def test_lstm_directors_for_an_agent_without_memory_only_when_asked_and_the_result_says_so(tmp_path):
    from rlgauntlet.gauntlet import plan_gauntlet

    plain = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", level="quick", store=tmp_path / "g.sqlite")
    asked = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", level="quick", store=tmp_path / "g.sqlite",
                          lstm_directors=True)
    assert not any(t.recurrent for t in plain.tasks) and not plain.lstm_directors
    assert [t.label for t in asked.tasks if t.recurrent] == ["paad@lstm:eps=0.075", "sarl@lstm:eps=0.075"]
    assert asked.lstm_directors and [t for t in asked.tasks if not t.recurrent] == plain.tasks
    assert {t.steps for t in asked.tasks} == {50_000}  # quick: the level's steps for every director
    standard = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", store=tmp_path / "g.sqlite",
                             lstm_directors=True)
    steps = {t.label: t.steps for t in standard.tasks}
    assert steps["paad@lstm:eps=0.075"] == steps["sarl@lstm:eps=0.075"] == 400_000  # slower to learn: 400k at least
    assert steps["paad:eps=0.075"] == steps["paad@official:eps=0.075"] == 200_000
    assert all(t.folder.endswith(f"-{t.steps}steps") for t in standard.tasks)
    # no early stop for an LSTM director (its plateau before it learns), the protocol's for the others
    assert {t.label: t.patience for t in standard.tasks if t.method != "robust-sarsa"} == {
        "paad:eps=0.075": 3, "paad@official:eps=0.075": 3, "sarl:eps=0.075": 3, "sarl@official:eps=0.075": 3,
        "paad@lstm:eps=0.075": None, "sarl@lstm:eps=0.075": None}
    # an image agent's LSTM director reads its frames through the same CNN
    from rlgauntlet.training.attackers.attack_train import director_settings, recurrent_settings

    assert recurrent_settings(director_settings("PongNoFrameskip-v4"))["policy"] == "CnnLstmPolicy"


def test_the_standard_directors_train_longer_where_the_return_has_no_floor(tmp_path, monkeypatch):
    """mujoco v5: HalfCheetah and Ant (no floor to the return: an agent driven backwards keeps
    losing) give every director 1M steps at the standard level; Hopper and Walker2d keep 200k,
    the quick and paper levels keep theirs, and Robust Sarsa (no director) the level's."""
    from dataclasses import replace

    from rlgauntlet.gauntlet import plan_gauntlet
    from rlgauntlet.gauntlet import protocols as protocols_module
    from rlgauntlet.gauntlet.protocols import NO_FLOOR_STEPS, get_protocol

    mujoco = get_protocol("mujoco@v5")
    steps = {env: {level: mujoco.director_steps_of(level, env) for level in mujoco.levels}
             for env in ("Hopper-v5", "Walker2d-v4", "HalfCheetah-v5", "Ant-v5", "AntContactForces-v4")}
    assert steps["Hopper-v5"] == steps["Walker2d-v4"] == {"quick": 50_000, "standard": 200_000, "paper": 2_000_000}
    for env in ("HalfCheetah-v5", "Ant-v5", "AntContactForces-v4"):
        assert steps[env] == {"quick": 50_000, "standard": 1_000_000, "paper": 2_000_000}, env
    assert mujoco.director_steps_of("standard", "Hopper-v5", recurrent=True) == 400_000
    assert mujoco.director_steps_of("standard", "HalfCheetah-v5", recurrent=True) == 1_000_000
    assert mujoco.describe()["director_steps"] == {"standard": NO_FLOOR_STEPS}
    # through a plan: a table entry for Hopper's quick level reaches every director, not Robust Sarsa
    monkeypatch.setitem(protocols_module.EARLIER, "mujoco@v5", replace(mujoco, director_steps={"quick": {"Hopper": 70_000}}))
    plan = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", "mujoco@v5", level="quick", store=tmp_path / "g.sqlite")
    assert {t.method: t.steps for t in plan.tasks} == {"paad": 70_000, "sarl": 70_000, "robust-sarsa": 50_000}
    assert all(t.folder.endswith(f"-{t.steps}steps") for t in plan.tasks)


def test_continuous_agents_meet_every_constant_director_at_every_eps(tmp_path):
    """mujoco v3: the push along each of Hopper's 14 directions is a heuristic attack at each of
    the 4 budgets, so each is in its ε's strongest-of; a discrete agent's protocol has none."""
    from rlgauntlet.gauntlet import plan_gauntlet
    from rlgauntlet.threats.attacks.push import push_directions

    plan = plan_gauntlet("zoo:hopper-ppo", "Hopper-v5", level="quick", store=tmp_path / "g.sqlite")
    pushes = [s for s in plan.heuristics if s.startswith("push:")]
    assert len(pushes) == 14 * 4
    assert "push:direction=1|1|1,eps=0.075" in pushes and "push:direction=-1|0|0,eps=0.025" in pushes
    assert {s.split(",eps=")[0].split("=")[1] for s in pushes} == {"|".join(map(str, d)) for d in push_directions(3)}
    assert len(plan.heuristics) == 4 * (len(plan.protocol.heuristics["gaussian"]) + 14)
    cartpole = plan_gauntlet("zoo:cartpole-ppo", "CartPole-v1", level="quick", store=tmp_path / "c.sqlite")
    assert not get_protocol("classic").push and not any(s.startswith("push:") for s in cartpole.heuristics)


def test_a_director_setting_an_env_lacks_is_skipped_with_its_reason():
    from rlgauntlet.gauntlet.plan import director_settings_for

    skipped: list[dict] = []
    protocol = get_protocol("mujoco")
    assert director_settings_for(protocol, "Walker2d-v5", skipped) == ["default", "official"] and skipped == []
    assert director_settings_for(protocol, "Swimmer-v5", skipped) == ["default"]
    assert director_settings_for(protocol, "Swimmer-v5", skipped) == ["default"]
    [row] = skipped  # once, however many methods and seeds asked
    assert row["spec"] == "director setting official" and "Hopper, Walker2d, HalfCheetah, Ant" in row["reason"]


def test_an_attacker_task_trains_with_its_setting_and_selection(monkeypatch):
    from rlgauntlet.experiments import attacker_job as attackers
    from rlgauntlet.gauntlet.plan import AttackerTask
    from rlgauntlet.gauntlet.run import train_attacker_task

    seen = {}

    def fake_train(*args, **kwargs):
        seen.update(kwargs)
        return {"steps": 7, "train_seconds": 1.0}

    monkeypatch.setattr(attackers, "train_attacker", fake_train)
    task = AttackerTask(AgentSpec(agent="zoo:hopper-ppo"), "Hopper-v5", "paad", "0.075", 0.075, 1, 100, "/f",
                        "official", "best")
    assert train_attacker_task(task) == {"steps": 7, "train_seconds": 1.0}
    assert (seen["setting"], seen["select"], seen["seed"], seen["steps"]) == ("official", "best", 1, 100)
    assert task.label == "paad@official:eps=0.075"


RAY_SCRIPT = """
import json, sys
from rlgauntlet.gauntlet import protocols
from rlgauntlet.gauntlet import run_gauntlet
from rlgauntlet.gauntlet.protocols import Level, Protocol

if __name__ == "__main__":
    protocols.PROTOCOLS["classic"] = Protocol(
        name="classic", version=1, families=("classic",), summary="ray test", eps_grid=("0.1",),
        headline_eps="0.1", budget_note="raw", learned=("paad", "sarl"), learned_continuous=(),
        shifts=lambda env, extent: [], natural=False, certify=False,
        levels={"quick": Level(2, 3000, "headline", "reduced")}, heuristics={"q": ("random", "pgd:steps=10")})
    address = sys.argv[2] if len(sys.argv) > 2 else None
    result = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=sys.argv[1],
                          executor="ray" if address else "local", workers=2, address=address)
    print(json.dumps(result["worst_case"]))
"""


@pytest.mark.slow
def test_learned_attackers_train_as_ray_tasks_with_the_local_executors_numbers(tmp_path, monkeypatch):
    """The attacker cells and the sweep chunks on a Ray head (in a loopback-only namespace) give
    the numbers of the local executor: same seeds, same attackers, same episodes."""
    from netns import RayNamespace, namespace_unavailable  # tools/netns.py: for tests and benchmarks only

    reason = namespace_unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    script = tmp_path / "run.py"
    script.write_text(RAY_SCRIPT)
    try:
        with RayNamespace(cpus=2) as ns:
            ray_run = ns.run([sys.executable, str(script), str(tmp_path / "ray" / "g.sqlite"), ns.address],
                             cwd=tmp_path, timeout=600)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    assert ray_run.returncode == 0, ray_run.stderr[-2000:]
    local = subprocess.run([sys.executable, str(script), str(tmp_path / "local" / "g.sqlite")], capture_output=True,
                           text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-2000:]
    # bit-exact is the property: same seeds, same chunks, whichever executor runs them
    assert json.loads(ray_run.stdout.splitlines()[-1]) == json.loads(local.stdout.splitlines()[-1])


def test_authors_attacker_below_the_worst_case_by_two_standard_errors_is_a_warning():
    """The warning fires when the authors' attacker is lower than the gauntlet's worst case at the
    same ε by more than 2·hypot(SEMs), and only then: a flipped comparison, a forgotten noise
    margin or a margin on one SEM only fails one of these cases."""
    from rlgauntlet.gauntlet.summary import authors_stronger

    def summary(authors_mean: float, authors_sem: float, eps: str = "0.075") -> dict:
        return {"worst_case": [{"eps": "0.075", "return_mean": 900.0, "return_sem": 30.0, "attack": "push"}],
                "authors_attack": [{"spec": "released_attacker:eps=0.075", "eps": eps,
                                    "return_mean": authors_mean, "return_sem": authors_sem}]}

    margin = 2.0 * float(np.hypot(40.0, 30.0))  # 100
    assert [w["eps"] for w in authors_stronger(summary(900.0 - margin - 1.0, 40.0))] == ["0.075"]
    assert authors_stronger(summary(900.0 - margin + 1.0, 40.0)) == []  # within the noise: no claim
    assert authors_stronger(summary(900.0 - 59.0, 0.0)) == []  # the gauntlet's own SEM still counts (2·30)
    assert len(authors_stronger(summary(900.0 - 61.0, 0.0))) == 1
    assert authors_stronger(summary(1200.0, 1.0)) == []  # weaker than the gauntlet: nothing to say
    assert authors_stronger(summary(100.0, 1.0, eps="0.1")) == []  # no worst case at that ε to compare with
    message = authors_stronger(summary(500.0, 10.0))[0]["message"]
    assert "500.0" in message and "900.0" in message and "push" in message


def test_a_plans_preview_estimates_training_from_the_same_attackers_trained_against_other_agents(tmp_path):
    """The plan's learned attackers (CartPole quick: PA-AD and SA-RL directors), the first already
    trained in this agent's cache; the same folder names trained against two other agents in 100
    and 300 s: each untrained one is estimated at their mean, 200 s, and the total is the sum. With
    one never measured, no total (a partial sum would read as the whole)."""
    from rlgauntlet.gauntlet import plan_gauntlet

    store = tmp_path / "g.sqlite"
    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", seeds=[0], store=store)
    tasks = plan.tasks
    assert len(tasks) >= 2
    trained, *untrained = tasks
    Path(trained.folder).mkdir(parents=True)
    Path(trained.folder, "manifest.json").write_text(json.dumps({"steps": trained.steps, "train_seconds": 50.0}))
    for other, seconds in (("1" * 16, 100.0), ("2" * 16, 300.0)):
        for task in untrained:
            folder = tmp_path / "gauntlet-cache" / other / "CartPole-v1" / Path(task.folder).name
            folder.mkdir(parents=True)
            (folder / "manifest.json").write_text(json.dumps({"steps": task.steps, "train_seconds": seconds}))
    preview = plan.preview()
    rows = {row["attacker"]: row for row in preview["learned_attackers"]}
    assert rows[trained.label]["trained"] is True and "estimated_seconds" not in rows[trained.label]
    assert all(rows[t.label]["estimated_seconds"] == pytest.approx(200.0) for t in untrained)
    assert preview["training_left_steps"] == sum(t.steps for t in untrained)
    assert preview["training_left_seconds"] == pytest.approx(200.0 * len(untrained)) and preview["unmeasured"] == 0
    # a manifest that is not JSON, or JSON of another shape, or without seconds, is no measurement
    for bad, text in (("3" * 16, "{not json"), ("4" * 16, "[1, 2]"), ("5" * 16, '{"train_seconds": true}')):
        folder = tmp_path / "gauntlet-cache" / bad / "CartPole-v1" / Path(untrained[0].folder).name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(text)
    assert plan.preview()["learned_attackers"] == preview["learned_attackers"]
    # a manifest of another env is not a measurement of this one's
    for other in ("1" * 16, "2" * 16):
        shutil.rmtree(tmp_path / "gauntlet-cache" / other / "CartPole-v1" / Path(untrained[0].folder).name)
        folder = tmp_path / "gauntlet-cache" / other / "Acrobot-v1" / Path(untrained[0].folder).name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"train_seconds": 9.0}))
    preview = plan.preview()
    assert preview["training_left_seconds"] is None and preview["unmeasured"] == 1
    assert not store.exists()  # planning and previewing write no store


def test_a_plans_preview_counts_what_an_interrupted_training_already_did(tmp_path):
    """An attacker whose training was interrupted at a quarter of its budget (its last checkpoint)
    has three quarters of its steps left, and of the time measured against other agents (400 s →
    300 s); the others are untouched."""
    from rlgauntlet.gauntlet import plan_gauntlet

    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", seeds=[0], store=tmp_path / "g.sqlite")
    interrupted, *others = plan.tasks
    for task in plan.tasks:
        folder = tmp_path / "gauntlet-cache" / ("1" * 16) / "CartPole-v1" / Path(task.folder).name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"steps": task.steps, "train_seconds": 400.0}))
    (Path(interrupted.folder) / "checkpoint").mkdir(parents=True)
    quarter = interrupted.steps // 4
    (Path(interrupted.folder) / "checkpoint" / "progress.json").write_text(
        json.dumps({"history": [{"steps": quarter // 2}, {"steps": quarter}]}))
    preview = plan.preview()
    rows = {row["attacker"]: row for row in preview["learned_attackers"]}
    row = rows[interrupted.label]
    assert row["trained"] is False and row["steps_done"] == quarter
    assert row["estimated_seconds"] == pytest.approx(400.0 * (1 - quarter / interrupted.steps), abs=0.1)
    assert all(rows[t.label]["steps_done"] == 0 and rows[t.label]["estimated_seconds"] == 400.0 for t in others)
    assert preview["training_left_steps"] == sum(t.steps for t in plan.tasks) - quarter


def test_gauntlet_plan_prints_the_attackers_to_train_and_writes_nothing(tmp_path, cli_env):
    out = tmp_path / "run"
    done = run_cli(["gauntlet", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--level", "quick",
                    "--out", str(out), "--plan"], cli_env)
    assert done.returncode == 0, done.stderr
    assert "to train, not measured yet" in done.stdout and "training left:" in done.stdout
    assert "paad:eps=" in done.stdout and "heuristic" in done.stdout
    assert not out.exists()


def test_a_boards_plan_is_one_row_an_agent_and_a_total_only_when_every_attacker_was_measured(capsys):
    from rlgauntlet.cli.gauntlet import _print_previews

    def preview(agent, rows, unmeasured=0):
        left = [r for r in rows if not r["trained"]]
        return {"agent": agent, "env": "Hopper-v5", "learned_attackers": rows, "unmeasured": unmeasured,
                "training_left_steps": sum(r["steps"] for r in left),
                "training_left_seconds": None if unmeasured else sum(r["estimated_seconds"] for r in left)}

    done = {"attacker": "paad:eps=0.075", "steps": 200_000, "trained": True}
    todo = {"attacker": "sarl:eps=0.075", "steps": 2_000_000, "trained": False, "estimated_seconds": 3600.0}
    _print_previews([preview("zoo:a", [done, todo]), preview("zoo:b", [done, dict(todo)])], workers=2)
    out = capsys.readouterr().out
    assert "1 of 2" in out and "4,000,000 steps, about 7,200 worker-seconds" in out
    assert "2.0 h of one worker; 1.0 h on 2" in out
    unmeasured = dict(todo, estimated_seconds=None)
    _print_previews([preview("zoo:a", [done, todo]), preview("zoo:b", [done, unmeasured], unmeasured=1)], workers=2)
    out = capsys.readouterr().out
    assert "worker-seconds" not in out and "1 of the attackers to train was never trained" in out
    _print_previews([preview("zoo:a", [done]), preview("zoo:b", [done])], workers=2)
    assert "training left: none" in capsys.readouterr().out


def test_a_result_names_the_directors_resumed_along_another_trajectory():
    """A member whose director was resumed from a checkpoint without its run state is named in the
    result, own and transferred alike; exact resumes, and directors never resumed, are not."""
    from types import MappingProxyType, SimpleNamespace

    from rlgauntlet.gauntlet.outcome import Outcome

    def director(resumes):
        return SimpleNamespace(manifest={"steps": 2048, **({"resumes": resumes} if resumes is not None else {})})

    inexact = [{"steps": 1024, "exact": False, "why": "the checkpoint holds no run_state.npz"}]
    plan = SimpleNamespace(labels={"paad:attacker=a,eps=0.1": "paad:eps=0.1", "sarl:attacker=b,eps=0.1": "sarl:eps=0.1",
                                   "paad:attacker=c,eps=0.1": "paad@official:eps=0.1"})
    outcome = Outcome(plan=plan, learned=MappingProxyType({
        "paad:attacker=a,eps=0.1": director(inexact),
        "sarl:attacker=b,eps=0.1": director([{"steps": 1024, "exact": True}]),
        "paad:attacker=c,eps=0.1": director(None)}),
        transferred=MappingProxyType({"paad:attacker=d,eps=0.1": director(inexact + [{"steps": 3072, "exact": True}])}))
    assert outcome.inexact_resumes() == [{"member": "paad:eps=0.1", "resumes": inexact},
                                         {"member": "paad:attacker=d,eps=0.1", "resumes": inexact}]
    assert Outcome(plan=plan).inexact_resumes() == []


def test_the_cli_says_which_directors_were_resumed_along_another_trajectory(capsys):
    from rlgauntlet.cli.gauntlet import _print_inexact_resumes

    result = {"agent": {"spec": "zoo:hopper-ppo"}, "directors_resumed_inexactly": [
        {"member": "paad@official:eps=0.075", "resumes": [{"steps": 1024, "exact": False, "why": "…"}]}]}
    _print_inexact_resumes(result)
    _print_inexact_resumes({"agent": {"spec": "zoo:cartpole-dqn"}})  # none: nothing printed
    err = " ".join(capsys.readouterr().err.split())
    assert "zoo:hopper-ppo: 1 director(s) resumed along another trajectory" in err
    assert "paad@official:eps=0.075" in err and "cartpole" not in err
