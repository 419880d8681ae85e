"""Transfer within a board (gauntlet.transfer): which directors each agent receives, by known
answers on constructed plans, and a transferred director that cannot read this agent's inputs
refused in one line before anything runs."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.gauntlet.plan import AttackerTask
from rlgauntlet.gauntlet.protocols import get_protocol
from rlgauntlet.gauntlet.transfer import plans_director, strongest_directors, transfer_members

MUJOCO = get_protocol("mujoco@v5")  # v5's transfer (one director a donor), whatever the default version


def _task(agent: str, method: str, setting: str = "default", eps: str = "0.075", recurrent: bool = False) -> AttackerTask:
    return AttackerTask(AgentSpec(agent=agent), "Hopper-v5", method, eps, float(eps), 0, 200_000,
                        f"cache/{agent}/{method}-{setting}-{eps}{'-lstm' if recurrent else ''}", setting, "best", 3,
                        recurrent)


def _plan(agent: str, sha: str, env: str = "Hopper-v5", protocol=MUJOCO, level: str = "standard"):
    tasks = [_task(agent, "paad"), _task(agent, "paad", "official"), _task(agent, "sarl"),
             _task(agent, "robust-sarsa")]
    return SimpleNamespace(spec=AgentSpec(agent=agent), sha=sha, env=env, protocol=protocol.for_env(env),
                           level=level, tasks=tasks, lstm_directors=False)


def test_each_donor_gives_its_strongest_director_and_never_its_robust_sarsa():
    plan = _plan("zoo:a", "a" * 64)
    means = {"paad:eps=0.075": 900.0, "paad@official:eps=0.075": 700.0, "sarl:eps=0.075": 800.0,
             "robust_sarsa:eps=0.075": 100.0}  # the lowest, but a Q function of the donor's own policy
    assert [t.label for t in strongest_directors(plan, means)] == ["paad@official:eps=0.075"]
    tie = {**means, "paad:eps=0.075": 700.0}  # a tie goes to the plan's order
    assert [t.label for t in strongest_directors(plan, tie)] == ["paad:eps=0.075"]
    assert strongest_directors(plan, {}) == []  # nothing reported: nothing to give


def test_a_version_that_adds_a_director_transfers_one_more_and_keeps_what_the_earlier_transferred():
    v5, v6 = get_protocol("mujoco@v5"), get_protocol("mujoco@v6")
    assert (v5.transfer_directors, v6.transfer_directors) == (1, 2)
    old = _plan("zoo:a", "a" * 64, protocol=v5)
    new = _plan("zoo:a", "a" * 64, protocol=v6)
    new.tasks.append(_task("zoo:a", "sarl", "official-attack"))
    means = {"paad:eps=0.075": 900.0, "paad@official:eps=0.075": 700.0, "sarl:eps=0.075": 800.0,
             "sarl@official-attack:eps=0.075": 300.0}
    assert [t.label for t in strongest_directors(old, means)] == ["paad@official:eps=0.075"]
    # the new director is the strongest; the one v5 transferred comes second and is still given
    assert [t.label for t in strongest_directors(new, means)] == ["sarl@official-attack:eps=0.075",
                                                                 "paad@official:eps=0.075"]
    two_eps = _plan("zoo:a", "a" * 64, protocol=v6)
    two_eps.tasks += [_task("zoo:a", "paad", eps="0.05"), _task("zoo:a", "sarl", eps="0.05")]
    means = {**means, "paad:eps=0.05": 10.0, "sarl:eps=0.05": 20.0, "paad:eps=0.075": 600.0}
    assert [t.label for t in strongest_directors(two_eps, means)] == [
        "paad:eps=0.075", "paad@official:eps=0.075", "paad:eps=0.05", "sarl:eps=0.05"]  # two at each ε


def test_an_earlier_version_picks_among_the_directors_it_plans_itself_whatever_the_newer_one_added():
    """Whatever kind of director a newer version adds (a method, a director setting, an extra
    director, LSTM directors), the earlier version's pick leaves it out, so the members it would
    have given are the ones it gave."""
    v5 = get_protocol("mujoco@v5")
    plan = _plan("zoo:a", "a" * 64, protocol=get_protocol("mujoco@v6"))
    planned = [plans_director(v5, plan, t) for t in plan.tasks]
    assert planned == [True, True, True, True]  # PA-AD (default, official), SA-RL, Robust Sarsa
    assert not plans_director(v5, plan, _task("zoo:a", "sarl", "official-attack"))  # v6's extra director
    assert plans_director(get_protocol("mujoco@v6"), plan, _task("zoo:a", "sarl", "official-attack"))
    assert not plans_director(get_protocol("mujoco@v6"), plan, _task("zoo:a", "paad", "official-attack"))
    quick = SimpleNamespace(**{**vars(plan), "level": "quick"})  # v6 trains no extra director at quick
    assert not plans_director(get_protocol("mujoco@v6"), quick, _task("zoo:a", "sarl", "official-attack"))
    without_sarl = replace(v5, learned=("paad",))  # a version without SA-RL directors
    assert not plans_director(without_sarl, plan, _task("zoo:a", "sarl"))
    without_official = replace(v5, director_settings=("default",))
    assert not plans_director(without_official, plan, _task("zoo:a", "paad", "official"))
    lstm = _task("zoo:a", "paad", recurrent=True)
    assert plans_director(v5, plan, lstm)  # v5 plans PA-AD LSTM directors for recurrent agents
    assert not plans_director(replace(v5, recurrent_directors=()), plan, lstm)
    asked = SimpleNamespace(**{**vars(plan), "lstm_directors": True})  # the agent asked for LSTM directors
    assert plans_director(replace(v5, recurrent_directors=()), asked, lstm)
    means = {"paad:eps=0.075": 900.0, "paad@official:eps=0.075": 700.0, "sarl:eps=0.075": 300.0}
    assert [t.label for t in strongest_directors(plan, means, without_sarl)] == ["paad@official:eps=0.075"]


def test_members_go_to_every_other_agent_of_the_same_env_protocol_and_level_only():
    a, b, c = _plan("zoo:a", "a" * 64), _plan("zoo:b", "b" * 64), _plan("zoo:c", "c" * 64)
    same_file = _plan("published:a-copy", "a" * 64)  # the same agent under another name
    other_env = _plan("zoo:w", "w" * 64, env="Walker2d-v4")
    other_level = _plan("zoo:q", "q" * 64, level="quick")
    plans = [a, b, c, same_file, other_env, other_level]
    means = [{"paad:eps=0.075": 500.0 + i, "sarl:eps=0.075": 900.0, "paad@official:eps=0.075": 950.0}
             for i in range(len(plans))]
    means[4] = {"paad:eps=0.05": 1.0}  # Walker2d's own ε; its tasks say 0.075, so it reports none
    members = transfer_members(plans, means)
    donors = [[m.donor for m in received] for received in members]
    assert donors[0] == ["zoo:b", "zoo:c"]  # never itself, never the same file under another name
    assert donors[1] == ["zoo:a", "zoo:c", "published:a-copy"]
    assert donors[3] == ["zoo:b", "zoo:c"]
    assert donors[4] == [] and donors[5] == []  # another env, another level: nothing in either direction
    member = members[1][0]
    assert member.spec == 'paad:attacker="cache/zoo:a/paad-default-0.075",eps=0.075,transfer=true'  # quoted: a colon
    assert member.label == "paad:eps=0.075 (from zoo:a)" and member.eps == "0.075"
    assert member.describe()["donor_sha256"] == "a" * 64


def test_a_protocol_without_transfer_gives_nothing_and_an_lstm_director_transfers_as_it_is():
    plain = replace(MUJOCO, transfer=False)
    plans = [_plan("zoo:a", "a" * 64, protocol=plain), _plan("zoo:b", "b" * 64, protocol=plain)]
    assert transfer_members(plans, [{"paad:eps=0.075": 1.0}] * 2) == [[], []]
    a, b = _plan("zoo:a", "a" * 64), _plan("zoo:b", "b" * 64)
    a.tasks.append(_task("zoo:a", "sarl", recurrent=True))
    [[], [member]] = transfer_members([a, b], [{"sarl@lstm:eps=0.075": 10.0, "paad:eps=0.075": 20.0}, {}])
    assert member.attack == "sarl@lstm:eps=0.075" and member.spec.startswith('sarl:attacker="cache/zoo:a/sarl-default')


@pytest.fixture(scope="module")
def hopper_director(tmp_path_factory):
    """A PA-AD director trained (a few steps) against the zoo's Hopper PPO agent."""
    from rlgauntlet.experiments.attacker_job import train_attacker

    folder = tmp_path_factory.mktemp("donor") / "paad"
    train_attacker("zoo:hopper-ppo", "Hopper-v5", "paad", eps=0.075, steps=256, run_dir=folder, seed=0,
                   eval_episodes=0, log=lambda line: None,
                   hyperparams=dict(n_envs=2, policy="MlpPolicy", n_steps=64, batch_size=64, n_epochs=1,
                                    learning_rate=3e-4, gamma=0.99, policy_kwargs=dict(net_arch=[16])))
    return folder


def test_a_transferred_director_reads_another_agents_inputs_only_where_they_are_alike(hopper_director, tmp_path):
    from rlgauntlet.experiments.evaluations import checked_threats
    from rlgauntlet.victims import load_victim

    spec = f"paad:attacker={hopper_director},eps=0.075"
    receiver = load_victim("zoo:hopper-sa-ppo")
    with pytest.raises(UserError, match="train an attacker for this agent"):  # not transferred: its own agent only
        checked_threats([spec], receiver, "Hopper-v5", "mujoco")
    [threat] = checked_threats([spec + ",transfer=true"], receiver, "Hopper-v5", "mujoco")  # the same input space
    with pytest.raises(UserError, match="trained on Hopper-v5, not Walker2d-v4") as caught:
        checked_threats([spec + ",transfer=true"], load_victim("zoo:hopper-sa-ppo"), "Walker2d-v4", "mujoco")
    assert "\n" not in str(caught.value)
    manifest = json.loads((hopper_director / "manifest.json").read_text())
    for change, message in (({"input_shape": [17]}, "observes (17,) and this agent's inputs are (11,)"),
                            ({"budget_space": "raw"}, "trained on raw inputs and this agent's are normalized")):
        other = tmp_path / f"changed-{len(message)}"
        other.mkdir()
        (other / "attacker.zip").write_bytes((hopper_director / "attacker.zip").read_bytes())
        (other / "manifest.json").write_text(json.dumps({**manifest, **change, "director_sha256": None}))
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
            checked_threats([f"paad:attacker={other},eps=0.075,transfer=true"], receiver, "Hopper-v5", "mujoco")
        assert "\n" not in str(caught.value) and "transfer it only between" in str(caught.value)
    assert threat.params.transfer


def test_the_earlier_version_gives_what_it_gave_under_its_own_rule():
    """v6 keeps v5's directors: replayed, v5's pick leaves out v6's extra director and gives one per
    donor, exactly what a v5 board gives (the members whose race v6 replays)."""
    from rlgauntlet.gauntlet.protocols import replayed_versions

    v5, v6 = get_protocol("mujoco@v5"), get_protocol("mujoco@v6")
    assert [p.tag for p in replayed_versions(v6)] == ["mujoco@v5"] and replayed_versions(v5) == ()
    means = {"paad:eps=0.075": 900.0, "paad@official:eps=0.075": 700.0, "sarl:eps=0.075": 800.0,
             "sarl@official-attack:eps=0.075": 300.0}
    new = _plan("zoo:a", "a" * 64, protocol=v6)
    new.tasks.append(_task("zoo:a", "sarl", "official-attack"))
    assert [t.label for t in strongest_directors(new, means, v5)] == ["paad@official:eps=0.075"]
    old = [_plan(a, a[-1] * 64, protocol=v5) for a in ("zoo:a", "zoo:b")]
    newer = [_plan(a, a[-1] * 64, protocol=v6) for a in ("zoo:a", "zoo:b")]
    for plan in newer:
        plan.tasks.append(_task(plan.spec.agent, "sarl", "official-attack"))
    both = [means, {**means, "sarl:eps=0.075": 100.0}]
    replayed = transfer_members(newer, both, replayed=5)
    assert replayed == transfer_members(old, both)  # the same members, specs and order as v5's own board
    assert [m.attack for m in replayed[0]] == ["sarl:eps=0.075"]
    assert {m.spec for m in replayed[0]} < {m.spec for m in transfer_members(newer, both)[0]}
    assert transfer_members(old, both, replayed=5) == [[], []]  # v5 replays no earlier version
    assert transfer_members(newer, both, replayed=6) == [[], []]  # nor does v6 replay itself


def test_v8_replays_both_v6s_and_v5s_transfer_races_each_as_that_version_gave_it():
    """v8 transfers three directors a donor and adds a curriculum director where the return has no
    floor: both v6's pick (two a donor, no curriculum) and v5's (one, no official-attack) are
    replayed, each exactly the members that version's own board gives, so that v8 is never weaker on
    a board than v6 either (before, v8 replayed v5's race only)."""
    from rlgauntlet.gauntlet.protocols import replayed_versions

    v5, v6, v8 = (get_protocol(f"mujoco@v{n}") for n in (5, 6, 8))
    assert [p.tag for p in replayed_versions(v8)] == ["mujoco@v6", "mujoco@v5"]
    means = {"paad:eps=0.15": 900.0, "paad@official:eps=0.15": 700.0, "sarl:eps=0.15": 800.0,
             "sarl@official-attack:eps=0.15": 300.0, "paad@curriculum:eps=0.15": 100.0}

    def plans(protocol, curriculum: bool) -> list:
        made = []
        for agent in ("zoo:a", "zoo:b"):
            plan = _plan(agent, agent[-1] * 64, env="HalfCheetah-v5", protocol=protocol)
            plan.tasks = [_task(agent, t.method, t.setting, "0.15") for t in plan.tasks]
            plan.tasks.append(_task(agent, "sarl", "official-attack", "0.15"))
            if curriculum:
                plan.tasks.append(_task(agent, "paad", "curriculum", "0.15"))
            made.append(plan)
        return made

    both = [means, {**means, "sarl:eps=0.15": 200.0}]
    newest = plans(v8, True)
    own = [[m.attack for m in given] for given in transfer_members(newest, both)]
    assert own[1] == ["paad@curriculum:eps=0.15", "sarl@official-attack:eps=0.15", "paad@official:eps=0.15"]
    assert transfer_members(newest, both, replayed=6) == transfer_members(plans(v6, False), both)
    assert transfer_members(newest, both, replayed=5) == transfer_members(plans(v5, False), both)
    assert [m.attack for m in transfer_members(newest, both, replayed=6)[1]] == [
        "sarl@official-attack:eps=0.15", "paad@official:eps=0.15"]
    assert [m.attack for m in transfer_members(newest, both, replayed=5)[0]] == ["sarl:eps=0.15"]


def test_the_earlier_versions_finalists_run_in_full_beside_this_versions():
    """A member the earlier version's race kept stays a finalist when this version's race drops it
    (the rise on SA-PPO Walker2d under v6: v5's finalist lost its place to a new member)."""
    from rlgauntlet.gauntlet.outcome import Outcome
    from rlgauntlet.gauntlet.race import RaceResult
    from rlgauntlet.gauntlet.transfer import TransferMember

    def member(name: str, eps: str = "0.075") -> TransferMember:
        return TransferMember(f"paad:attacker={name},eps={eps},transfer=true", eps, f"zoo:{name}", "b" * 64,
                              f"paad:eps={eps}")

    plan = SimpleNamespace(protocol=get_protocol("mujoco@v6"))
    old, new1, new2, other = member("old"), member("new1"), member("new2"), member("other", "0.05")
    outcome = Outcome(plan, transfer=(old, new1, new2, other), earlier_transfer={5: (old.spec, other.spec)})
    assert outcome.transfer_groups(5) == [("0.05", [other.spec]), ("0.075", [old.spec])]
    assert outcome.transfer_groups() == [("0.05", [other.spec]), ("0.075", [old.spec, new1.spec, new2.spec])]
    raced = replace(outcome, transfer_race=RaceResult({old.spec: "not among the lowest"}, ()))
    # the earlier race kept it (as no race at all would: everything then runs in full)
    assert raced.transfer_finalists == [old.spec, new1.spec, new2.spec, other.spec]
    assert replace(raced, earlier_transfer_races={5: RaceResult({}, ())}).transfer_finalists == raced.transfer_finalists
    assert replace(outcome, earlier_transfer={}).transfer_finalists == [m.spec for m in outcome.transfer]
    assert replace(raced, earlier_transfer={}).transfer_finalists == [new1.spec, new2.spec, other.spec]  # v5: no replay
    dropped_by_both = replace(raced, earlier_transfer_races={5: RaceResult({old.spec: "dropped"}, ())})
    assert dropped_by_both.transfer_finalists == [new1.spec, new2.spec, other.spec]
    # the result names what only the replay kept: v5's finalist, not the members v6's race kept too
    from rlgauntlet.gauntlet.summary import transfer_summary

    summary = transfer_summary(replace(raced, earlier_transfer_races={5: RaceResult({}, ())}), {})
    assert summary["kept_by_earlier_version"] == [old.label] and summary["finalists"] == 4
    assert summary["replayed_races"] == ["mujoco@v5"]
    none = transfer_summary(replace(raced, earlier_transfer={}), {})
    assert none["kept_by_earlier_version"] == [] and none["replayed_races"] == []
    same = Outcome(plan, transfer=(old,), earlier_transfer={5: (old.spec,)})
    assert same.replayed_versions == [] and same.earlier_finalists == []  # one race decides both


def test_each_replayed_versions_finalists_run_and_a_race_of_the_same_members_is_run_once():
    """Two earlier versions replayed (v8: v6's race and v5's): a member either one's race kept runs in
    full though v8's race dropped it; a version whose members are those of a newer one replayed (or
    of this version's) is not raced again."""
    from rlgauntlet.gauntlet.outcome import Outcome
    from rlgauntlet.gauntlet.race import RaceResult
    from rlgauntlet.gauntlet.transfer import TransferMember

    def member(name: str) -> TransferMember:
        return TransferMember(f"paad:attacker={name},eps=0.15,transfer=true", "0.15", f"zoo:{name}", "c" * 64,
                              "paad:eps=0.15")

    plan = SimpleNamespace(protocol=get_protocol("mujoco@v8").for_env("HalfCheetah-v5"))
    a, b, c, d = (member(n) for n in "abcd")
    outcome = Outcome(plan, transfer=(a, b, c, d), earlier_transfer={6: (a.spec, b.spec), 5: (a.spec,)},
                      transfer_race=RaceResult({a.spec: "dropped", b.spec: "dropped"}, ()))
    assert outcome.replayed_versions == [6, 5] and outcome.transfer_groups(6) == [("0.15", [a.spec, b.spec])]
    assert outcome.transfer_finalists == [a.spec, b.spec, c.spec, d.spec]  # no replayed race run: all kept
    by_v6 = replace(outcome, earlier_transfer_races={6: RaceResult({a.spec: "dropped"}, ()), 5: RaceResult({}, ())})
    assert by_v6.earlier_finalists == [b.spec, a.spec]  # v6 kept b, v5 kept a
    assert by_v6.transfer_finalists == [a.spec, b.spec, c.spec, d.spec]
    only_v6 = replace(by_v6, earlier_transfer_races={6: RaceResult({a.spec: "dropped"}, ()),
                                                     5: RaceResult({a.spec: "dropped"}, ())})
    assert only_v6.transfer_finalists == [b.spec, c.spec, d.spec]
    same_as_v6 = replace(outcome, earlier_transfer={6: (a.spec, b.spec), 5: (b.spec, a.spec)})
    assert same_as_v6.replayed_versions == [6]
    same_as_own = replace(outcome, earlier_transfer={6: (a.spec, b.spec, c.spec, d.spec), 5: (a.spec,)})
    assert same_as_own.replayed_versions == [5]


def test_a_version_replaying_only_the_transfer_race_differs_from_the_earlier_one_in_directors_only():
    """v6 is never weaker than v5 because it replays v5's transfer race and keeps every v5 director;
    that suffices only while the heuristic race (members, rule, budgets, levels) is v5's. A version
    that changes more must replay that race too: this test then names what changed."""
    from dataclasses import fields

    from rlgauntlet.gauntlet.protocols import Protocol, replayed_versions

    def changed(older: Protocol, newer: Protocol) -> set[str]:
        return {f.name for f in fields(Protocol) if getattr(older, f.name) != getattr(newer, f.name)}

    v6 = get_protocol("mujoco@v6")
    [v5] = replayed_versions(v6)
    assert changed(v5, v6) == {"version", "extra_directors", "directors_of", "transfer_directors", "replays"}
    v8 = get_protocol("mujoco@v8")
    assert changed(v6, v8) == {"version", "curriculum", "curriculum_methods", "transfer_directors", "replays"}
    directors_only = {"version", "extra_directors", "directors_of", "transfer_directors", "replays", "curriculum",
                      "curriculum_methods"}
    assert all(changed(older, v8) <= directors_only for older in replayed_versions(v8))
