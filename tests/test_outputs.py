"""No output ever destroys data, and every output is checked before the work starts.

The cases are generated from the CLI's own option table: every command's options that name a
file or folder it writes are found by name, and each gets the hostile values of its kind. A new
command with an output option fails :func:`test_every_writing_command_has_a_base_invocation`
until it is given a base invocation here, and is then covered by construction.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: options that name a file the command writes, and those that name a folder it writes into
FILE_OUTPUTS = ("out", "plot")
DIR_OUTPUTS = ("run_dir", "out_dir")

#: for each writing command: arguments that make a valid invocation apart from its outputs
#: ({tmp} is the test's folder). Work must never start: every case here is refused first.
BASE = {
    "evaluate": ["--agent", "zoo:cartpole-ppo", "--env", "CartPole-v1", "--episodes", "1", "--no-impact"],
    "train": ["--preset", "cartpole-ppo", "--steps", "64", "--no-register"],
    "attack-train": ["--method", "paad", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--eps", "0.1",
                     "--steps", "64"],
    "dynamics-train": ["--agent", "zoo:pendulum-td3", "--env", "Pendulum-v1", "--samples", "10"],
    "plot": [],
    "spectrum": ["--agent", "zoo:pong-ppo", "--env", "PongNoFrameskip-v4", "--threat", "rotation:degrees=3",
                 "--steps", "1"],
    "calibrate": ["--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--threat", "random", "--target-impact",
                  "0.5", "--episodes", "2"],
    "certify": ["--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--eps", "0.01", "--episodes", "1"],
    "ood scan": ["--agent", "zoo:cartpole-dqn-ensemble", "--env", "CartPole-v1", "--shift",
                 "physics:param=length,scale=2", "--episodes", "1"],
    "ood bench": ["--agent", "zoo:cartpole-dqn-ensemble", "--env", "CartPole-v1", "--suite", "ood-cartpole",
                  "--episodes", "1"],
    "sweep": ["{repo}/sweeps/zoo.yaml"],
    "report": [],
    "zoo export": ["cartpole-ppo"],
    "gauntlet": ["--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--level", "quick", "--out", "{tmp}/g"],
    "leaderboard": [],
    "daylight": ["--agent", "zoo:pong-ppo", "--env", "PongNoFrameskip-v4", "--episodes", "2"],
}
#: commands whose store must already exist (they read it): given a real one, made by the test
READS_STORE = ("plot", "report", "leaderboard")


def _commands():
    """(command path, its click command) for every command of the CLI, sub-groups included."""
    import typer.main

    from rlgauntlet.cli import app

    def walk(group, prefix):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, prefix + [name])
            else:
                yield " ".join(prefix + [name]), command

    yield from walk(typer.main.get_command(app), [])


def _outputs(command):
    return [(p.name, p.opts[0]) for p in command.params if p.name in FILE_OUTPUTS + DIR_OUTPUTS and p.opts]


WRITERS = {name: _outputs(cmd) for name, cmd in _commands() if _outputs(cmd)}


def _has_store(name: str) -> bool:
    return any(p.name == "store" for cmd_name, cmd in _commands() if cmd_name == name for p in cmd.params)


def test_every_writing_command_has_a_base_invocation():
    assert set(WRITERS) <= set(BASE), f"add a base invocation for {sorted(set(WRITERS) - set(BASE))}"
    assert {"evaluate", "plot", "sweep", "report", "train", "ood scan", "zoo export"} <= set(WRITERS)



class Accepted(BaseException):
    """Raised in place of a command's work: the command got past every check of its input."""


#: the library function each command's work starts with (the CLI imports it when the command runs)
WORK = ("rlgauntlet.experiments.spectrum:spectrum", "rlgauntlet.experiments.calibrate:calibrate_agent",
        "rlgauntlet.experiments.certify:certify", "rlgauntlet.experiments.evaluate:evaluate",
        "rlgauntlet.report.curves:budget_curves", "rlgauntlet.report.html:render_report",
        "rlgauntlet.gauntlet:run_gauntlet", "rlgauntlet.experiments.ood_benchmark:ood_scan",
        "rlgauntlet.experiments.ood_benchmark:ood_bench", "rlgauntlet.experiments.sweep:run_sweep",
        "rlgauntlet.experiments.sweep:preview_sweep", "rlgauntlet.training.zoo_training:train",
        "rlgauntlet.training.zoo_training:train_seeds", "rlgauntlet.experiments.attacker_job:train_attacker",
        "rlgauntlet.training.attackers.dynamics:learn_dynamics", "rlgauntlet.training.export:export_sb3",
        "rlgauntlet.gauntlet.leaderboard:leaderboard", "rlgauntlet.gauntlet.run:run_plans",
        "rlgauntlet.experiments.daylight:run_daylight")


def _no_work(patch) -> None:
    """Every command's work replaced by :class:`Accepted` (``patch``: a monkeypatch context): a
    suggestion can be tried without training or evaluating anything."""
    import importlib

    def accepted(*args, **kwargs):
        raise Accepted()

    for target in WORK:
        module, name = target.split(":")
        patch.setattr(importlib.import_module(module), name, accepted)


#: "e.g. --opt VALUE [--opt VALUE ...]" and "drop --opt" in a message: the fix it suggests
SUGGESTION = re.compile(r"e\.g\. ((?:--[a-z][\w-]* [^\s;,()]+(?: |(?=[;,)]|$)))+)")
DROP = re.compile(r"drop (--[a-z][\w-]*)")


def _apply(args: list[str], message: str) -> list[str] | None:
    """``args`` with the first fix ``message`` suggests applied (None: it suggests none)."""
    found, drop = SUGGESTION.search(message), DROP.search(message)
    if found is None and drop is None:
        return None
    if found is not None and (drop is None or found.start() < drop.start()):
        tokens = found.group(1).split()
        pairs = list(zip(tokens[::2], tokens[1::2]))
        options = {o for o, _ in pairs}
    else:
        pairs, options = [], {drop.group(1)}
    out, skip = [], False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        if token in options:
            skip = i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(token)
    return out + [x for pair in pairs for x in pair]


def _try_suggestion(args: list[str], err: str, capsys, monkeypatch, cwd: Path) -> None:
    """Rule of hardening v3: a fix an error message suggests is accepted, or leads to the next
    real problem (another message), never to the same refusal or a traceback."""
    first = next(line for line in err.splitlines() if line.startswith("rlgauntlet:"))
    fixed = _apply(args, first)
    if fixed is not None:
        _run_fix(fixed, first, capsys, monkeypatch, cwd)


def _run_fix(fixed: list[str], first: str, capsys, monkeypatch, cwd: Path) -> None:
    """Run the command with a suggested fix applied (its work replaced by :class:`Accepted`): it is
    accepted, or refused for another reason than ``first``, never with a traceback."""
    from rlgauntlet.cli import main

    with monkeypatch.context() as patch:
        _no_work(patch)
        patch.setattr(sys, "argv", ["rlgauntlet", *fixed])
        patch.chdir(cwd)
        try:
            main()
            code = 0
        except Accepted:
            return
        except SystemExit as exc:
            code = exc.code
    second = capsys.readouterr().err
    assert "Traceback" not in second, (fixed, second)
    if code == 2:
        again = next(line for line in second.splitlines() if line.startswith("rlgauntlet:"))
        assert again != first, f"the suggested fix {fixed} is refused in turn: {again}"


def _store(folder: Path) -> Path:
    from rlgauntlet.experiments.store import ResultsStore

    path = folder / "mine.sqlite"
    ResultsStore(path).close()
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): (_sha(p) if p.is_file() else "dir") for p in sorted(folder.rglob("*"))}


def _cases():
    for command, outputs in sorted(WRITERS.items()):
        for name, option in outputs:
            kinds = (["file", "unwritable"] if name in DIR_OUTPUTS else
                     ["foreign", "directory", "unwritable"] + (["ours, another kind"] if command != "zoo export" else []))
            if name in FILE_OUTPUTS and _has_store(command):
                kinds.append("the store")
            for kind in kinds:
                yield pytest.param(command, name, option, kind, id=f"{command}-{option}-{kind}")


@pytest.mark.parametrize("command, name, option, kind", list(_cases()))
def test_hostile_output_is_refused_in_one_line_and_nothing_changes(command, name, option, kind, tmp_path, cli_main,
                                                                   capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in BASE[command]]
    suffix = ".png" if name == "plot" or command in ("plot", "spectrum") else (".zip" if command == "zoo export" else
                                                                               ".html" if command == "report" else ".json")
    foreign = tmp_path / f"theirs{suffix}"
    foreign.write_text(json.dumps({"mine": True}))
    if command in READS_STORE or _has_store(command):
        store = _store(tmp_path) if command in READS_STORE else tmp_path / "results.sqlite"
        args += ["--store", str(store)]
    ours = tmp_path / f"ours{suffix}"
    if kind == "ours, another kind":
        _write_ours(ours, "some other command's output")
    value = {"foreign": foreign, "directory": tmp_path, "file": foreign, "ours, another kind": ours,
             "unwritable": Path("/proc/rlgauntlet-none/out" + (suffix if name in FILE_OUTPUTS else "")),
             "the store": tmp_path / "results.sqlite" if command not in READS_STORE else tmp_path / "mine.sqlite"}[kind]
    if kind == "the store" and not value.exists():
        value = _store(tmp_path).rename(value)
    other = [o for n, o in WRITERS[command] if o != option]  # other outputs: somewhere harmless
    for o in other:
        args += [o, str(tmp_path / "elsewhere" / f"x{'.png' if o == '--plot' else '.json'}")]
    before = _snapshot(tmp_path)
    code, err = cli_main([*args, option, str(value)], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert str(value) in lines[0] or option in lines[0], lines[0]
    assert _snapshot(tmp_path) == before  # no file changed, none created (no store, no run folder)
    _try_suggestion([*args, option, str(value)], err, capsys, monkeypatch, tmp_path)


def _write_ours(path: Path, kind: str) -> None:
    """A file rlgauntlet writes, of ``kind``, in the format its name says."""
    from rlgauntlet.common.outputs import save_figure, write_json

    if path.suffix == ".png":
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(1, 1))
        save_figure(fig, path, kind=kind)
        plt.close(fig)
    elif path.suffix == ".html":
        path.write_text('<!doctype html><html><head><meta name="generator" content="rlgauntlet 0.1.0">\n'
                        f'<meta name="rlgauntlet-output" content="{kind}"></head></html>\n')
    else:
        write_json(path, {"x": 1}, kind=kind)


#: files a command writes beside (or inside) the output it is given: a sibling is an output too
SIBLINGS = {
    ("plot", "--out"): lambda v: [v.with_suffix(".json")],
    ("spectrum", "--out"): lambda v: [v.with_suffix(".json")],
    ("ood bench", "--plot"): lambda v: [v.with_suffix(".json")],
    ("leaderboard", "--out"): lambda v: [v.with_suffix(".json")],
    ("gauntlet", "--out"): lambda v: [v / "gauntlet.json", v / "report.html"],
}


def _sibling_cases():
    for (command, option), siblings in SIBLINGS.items():
        for which in range(len(siblings(Path("x.png")))):
            for kind in ("foreign", "ours, another kind"):
                yield pytest.param(command, option, which, kind, id=f"{command}-{option}-sibling{which}-{kind}")


@pytest.mark.parametrize("command, option, which, kind", list(_sibling_cases()))
def test_a_sibling_output_obeys_the_foreign_file_rule(command, option, which, kind, tmp_path, cli_main, capsys,
                                                      monkeypatch):
    """A file a command writes beside its output is refused like the output itself: someone
    else's file, or one of ours of another kind (a gauntlet's gauntlet.json under a leaderboard)."""
    repo = Path(__file__).resolve().parents[1]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in BASE[command]]
    args = [a for a in args if a != f"{tmp_path}/g"] if command == "gauntlet" else args
    if command == "gauntlet":
        args = args[:args.index("--out")] + args[args.index("--out") + 2:]
    suffix = {"leaderboard": ".html", "gauntlet": ""}.get(command, ".png")
    value = tmp_path / f"result{suffix}"
    if command == "gauntlet":
        value.mkdir()
    if command in READS_STORE:
        args += ["--store", str(_store(tmp_path))]
    sibling = SIBLINGS[(command, option)](value)[which]
    if kind == "foreign":
        sibling.write_text(json.dumps({"theirs": True}) if sibling.suffix == ".json" else "<html>theirs</html>")
    else:
        _write_ours(sibling, "some other command's output")
    before = _snapshot(tmp_path)
    code, err = cli_main([*args, option, str(value)], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert str(sibling) in lines[0], lines[0]
    assert _snapshot(tmp_path) == before
    _try_suggestion([*args, option, str(value)], err, capsys, monkeypatch, tmp_path)


#: commands that run cells on an executor: an unreachable --address is refused before any file exists
ADDRESS_BASE = {
    "sweep": ["{repo}/sweeps/zoo.yaml", "--store", "{tmp}/s.sqlite"],
    "gauntlet": BASE["gauntlet"],
    "train": ["--preset", "cartpole-ppo", "--steps", "64", "--no-register", "--seeds", "0"],
}


def test_every_address_option_is_covered():
    with_address = {name for name, cmd in _commands() if any(p.name == "address" for p in cmd.params)}
    assert with_address == set(ADDRESS_BASE)


@pytest.mark.parametrize("command", sorted(ADDRESS_BASE))
def test_an_unreachable_address_is_refused_before_anything_is_written(command, tmp_path, cli_main, capsys,
                                                                      monkeypatch):
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    repo = Path(__file__).resolve().parents[1]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in ADDRESS_BASE[command]]
    args += ["--executor", "ray", "--address", f"127.0.0.1:{port}"]
    monkeypatch.chdir(tmp_path)
    code, err = cli_main(args, cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and "--address" in lines[0], err
    assert not list(tmp_path.iterdir())  # no store, no run rows, no run folder
    _try_suggestion(args, err, capsys, monkeypatch, tmp_path)


# -- numbers: every float option is finite, every int option keeps its minimum ---------------------

def _number_cases():
    for command, click_command in _commands():
        for p in click_command.params:
            if not p.opts or not p.opts[0].startswith("--"):
                continue
            kind = p.bare_type()
            if kind == "float":
                for value in ("nan", "inf", "-inf"):
                    yield pytest.param(command, p.opts[0], value, id=f"{command}-{p.opts[0]}-{value}")
            elif kind == "int" and p.min is not None:
                yield pytest.param(command, p.opts[0], str(int(p.min) - 1), id=f"{command}-{p.opts[0]}-below-min")


def test_there_are_number_options_to_check():
    cases = list(_number_cases())
    assert len(cases) > 30 and any("--min-score" in str(c.values) for c in cases)


@pytest.mark.parametrize("command, option, value", list(_number_cases()))
def test_hostile_numbers_are_refused_in_one_line_before_any_work(command, option, value, tmp_path, cli_main,
                                                                 capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in BASE.get(command, [])]
    code, err = cli_main([*args, option, value], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and option in lines[0], err
    assert not list(tmp_path.iterdir())  # refused before anything was written
    _try_suggestion([*args, option, value], err, capsys, monkeypatch, tmp_path)


def test_a_bare_group_names_what_is_missing(cli_main, tmp_path):
    for args in ([], ["zoo"], ["ood"]):
        code, err = cli_main(args, cwd=tmp_path)
        lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
        assert code == 2 and len(lines) == 1 and "give a command" in lines[0], err


# -- inputs: files, stores, agents and specs ---------------------------------------------------------

#: options that name a file a command reads, the results store, an agent, a threat spec
INPUT_FILES = ("vecnormalize", "lpips_weights")
STORE_OPTIONS = ("store",)
AGENT_OPTIONS = ("agent",)
SPEC_OPTIONS = ("threat", "shift")


def _input_cases():
    for command, click_command in _commands():
        if command not in BASE:
            continue
        for p in click_command.params:
            if not p.opts or not p.opts[0].startswith("--"):
                continue
            option = p.opts[0]
            kinds = (["filter matching nothing"] if p.name in AGENT_OPTIONS and command in READS_STORE else
                     ["missing", "directory", "foreign"] if p.name in INPUT_FILES else
                     ["directory", "foreign"] + (["empty file"] if command in READS_STORE else [])
                     if p.name in STORE_OPTIONS else
                     ["missing agent file", "agent directory", "foreign agent", "unknown zoo name", "unknown source"]
                     if p.name in AGENT_OPTIONS else ["empty spec", "unknown threat"] if p.name in SPEC_OPTIONS else [])
            for kind in kinds:
                yield pytest.param(command, option, kind, id=f"{command}-{option}-{kind}")


def test_there_are_input_options_to_check():
    cases = [c.values for c in _input_cases()]
    assert len(cases) > 40 and {c[0] for c in cases} >= {"evaluate", "certify", "ood scan", "calibrate", "plot"}


@pytest.mark.parametrize("command, option, kind", list(_input_cases()))
def test_hostile_inputs_are_refused_in_one_line_and_nothing_changes(command, option, kind, tmp_path, cli_main,
                                                                    capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    foreign = tmp_path / "theirs.bin"
    foreign.write_bytes(bytes(range(256)) * 4)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")  # a 0-byte --store of a reading command: refused, never made a store
    value = {"missing": tmp_path / "missing.pkl", "directory": tmp_path, "foreign": foreign,
             "missing agent file": f"sb3:{tmp_path / 'missing.zip'}", "agent directory": f"sb3:{tmp_path}",
             "foreign agent": f"sb3:{foreign}", "unknown zoo name": "zoo:no-such-agent", "unknown source": "bogus:x",
             "empty spec": "", "unknown threat": "no_such_threat:eps=0.1",
             "filter matching nothing": "no-such-agent", "empty file": empty}[kind]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in BASE[command]]
    if option != "--store" and command in READS_STORE:
        args += ["--store", str(_store(tmp_path))]
    before = _snapshot(tmp_path)
    code, err = cli_main([*args, option, str(value)], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert _snapshot(tmp_path) == before  # refused before anything was written (a store read is left byte-identical)
    _try_suggestion([*args, option, str(value)], err, capsys, monkeypatch, tmp_path)


# -- the cases hardening v3's probe found, each with its suggestion tried -----------------------------

def _listed_cases():
    return [
        pytest.param(["gauntlet", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--out", "g", "--seeds", "0",
                      "--seeds", "0"], "--seeds", id="gauntlet-repeated-seed"),
        pytest.param(["train", "--preset", "cartpole-ppo", "--no-register", "--seeds", "1", "--seeds", "1"], "--seeds",
                     id="train-repeated-seed"),
        pytest.param(["train", "--preset", "cartpole-ppo", "--no-register", "--seeds", "-1"], "--seeds",
                     id="train-negative-seed"),
        pytest.param(["train", "--preset", "cartpole-ppo", "--no-register", "--seed", "-1"], "--seed",
                     id="train-negative-single-seed"),
        pytest.param(["leaderboard", "--store", "{store_html}", "--out", "{store_html}"], "--out",
                     id="leaderboard-store-as-out"),
        pytest.param(["leaderboard", "--store", "{store_json}", "--out", "{store_stem}.html"], "--out",
                     id="leaderboard-json-sibling-is-the-store"),
        pytest.param(["ood", "bench", "--agent", "zoo:cartpole-dqn-ensemble", "--env", "CartPole-v1", "--suite",
                      "ood-cartpole", "--plot", "/proc/rlgauntlet-none/p.png"], "--plot", id="ood-plot-unwritable"),
        pytest.param(["gauntlet", "--agent", "zoo:cartpole-dqn", "--env", "NoSuchEnv-v0", "--out", "g"], "cannot make env",
                     id="gauntlet-unknown-env"),
        pytest.param(["gauntlet", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--protocol", "pixel", "--out",
                      "g"], "--protocol", id="gauntlet-protocol-of-another-family"),
        pytest.param(["sweep", "{tmp}", "--store", "s.sqlite"], "sweep file", id="sweep-a-directory"),
        pytest.param(["report", "--store", "{empty}", "--out", "r.html"], "--store", id="report-empty-store"),
        pytest.param(["leaderboard", "--store", "{empty}", "--out", "b.html"], "--store", id="leaderboard-empty-store"),
        pytest.param(["report", "--store", "{no_episodes}", "--out", "r.html"], "no finished episode",
                     id="report-runs-without-episodes"),
    ]


@pytest.mark.parametrize("args, named", _listed_cases())
def test_each_listed_case_is_one_line_writes_nothing_and_its_fix_works(args, named, tmp_path, cli_main, capsys,
                                                                       monkeypatch):
    from rlgauntlet.experiments.store import ResultsStore, run_key

    store = _store(tmp_path)
    for name in ("store.html", "store.json"):
        (tmp_path / name).write_bytes(store.read_bytes())
    (tmp_path / "empty.sqlite").write_bytes(b"")
    runs_only = ResultsStore(tmp_path / "runs-only.sqlite")  # a run row whose episodes never ran
    meta = {"agent": "zoo:cartpole-dqn", "env": {"id": "CartPole-v1", "preset": "classic"}, "spec": "clean", "seed": 0}
    runs_only.create_run(run_key(meta), meta)
    runs_only.close()
    values = {"store_html": tmp_path / "store.html", "store_json": tmp_path / "store.json",
              "store_stem": tmp_path / "store", "tmp": tmp_path, "empty": tmp_path / "empty.sqlite",
              "no_episodes": tmp_path / "runs-only.sqlite"}
    args = [a.format(**values) for a in args]
    before = _snapshot(tmp_path)
    code, err = cli_main(args, cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and named in lines[0], err
    assert _snapshot(tmp_path) == before
    _try_suggestion(args, err, capsys, monkeypatch, tmp_path)


def test_init_from_reads_the_agents_pickled_statistics_with_allow_pickle(monkeypatch):
    """`train --init-from sb3:FILE.zip --allow-pickle` hands the permission on to the agent's
    VecNormalize file (the refusal used to repeat with the flag given)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.training import kit
    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.victims import sb3 as sb3_victims

    seen = []

    class Stats:
        def __init__(self, path, allow_pickle=False):
            seen.append(allow_pickle)
            raise RuntimeError("stop here")

    monkeypatch.setattr(sb3_victims, "VecNormalizeStats", Stats)
    monkeypatch.setattr(kit, "agent_files", lambda agent: (Path("a.zip"), Path("a.vecnormalize.pkl")))
    monkeypatch.setattr("rlgauntlet.victims.sb3_files.read_sb3_zip", lambda path: ({}, {}))
    monkeypatch.setattr("rlgauntlet.victims.sb3_files.with_target_networks", lambda state, keys: {})
    monkeypatch.setattr("rlgauntlet.victims.sb3.sha256_file", lambda path: "0" * 64)
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=1))
    model = kit.build_model(PRESETS["cartpole-ppo"], env, "cpu")
    monkeypatch.setattr(model.policy, "load_state_dict", lambda state: None)
    for allow in (False, True):
        with pytest.raises(RuntimeError, match="stop here"):
            kit.init_from_agent(model, env, "sb3:a.zip", PRESETS["cartpole-ppo"], allow_pickle=allow)
    assert seen == [False, True]


def test_zoo_list_shows_a_missing_field_and_a_missing_zoo_folder_is_one_line(tmp_path, cli_main, monkeypatch):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "manifest.json").write_text(json.dumps({"attacker": {"env": "CartPole-v1", "kind": "paad"}, "bare": {}}))
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(zoo))
    code, err = cli_main(["zoo", "list"], cwd=tmp_path)
    assert code == 0 and "Traceback" not in err
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(tmp_path / "no-such-folder"))
    code, err = cli_main(["zoo", "list"], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and "RLGAUNTLET_ZOO" in lines[0] and "does not exist" in lines[0], err
    assert not (tmp_path / "no-such-folder").exists()


def test_a_certified_sweep_plans_shows_and_counts_its_certification(tmp_path, cli_main):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("agents: [zoo:cartpole-dqn]\nsuites: [certified]\neps_grid: [0.05, 0.1]\nepisodes: 2\n")
    res = cli_main(["sweep", str(sweep), "--store", str(tmp_path / "s.sqlite"), "--dry-run"], cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "certification (GWC episodes and ACR) at 2 budget(s)" in " ".join(out.split())
    assert not (tmp_path / "s.sqlite").exists()
    from rlgauntlet.experiments.sweep import run_sweep

    result = run_sweep(sweep, tmp_path / "s.sqlite")
    specs = [e["spec"] for e in result["reports"][0]["evaluations"]]
    assert "gwc:eps=0.05" in specs and "gwc:eps=0.1" in specs  # in the agent's table, as evaluate shows them
    assert len(result["certified"][0]["evaluations"]) == 2


def test_a_sweep_threat_without_a_budget_says_how_to_give_one(tmp_path, cli_main):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("agents: [zoo:cartpole-dqn]\nthreats: [pgd]\neps: 0.05\nepisodes: 1\n")
    code, err = cli_main(["sweep", str(sweep), "--store", str(tmp_path / "s.sqlite")], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and "eps_grid: [0.05]" in lines[0], err
    assert not (tmp_path / "s.sqlite").exists()  # checked before the store was made


# -- hardening v4: fixes that fix, and no misleading line (each case as its rule) --------------------

def _releases_tree(tmp_path: Path, state: str) -> Path:
    """A clones folder for RLGAUNTLET_RELEASES in one of the states a user's can be in."""
    root = tmp_path / "releases"
    if state == "root is a file":
        root.write_text("not a folder")
        return root
    root.mkdir()
    clone = root / "ATLA_robust_RL"
    if state == "clone is a file":
        clone.write_text("not a clone")
    elif state in ("file missing", "edited file"):
        (clone / "src/models/atla_release/PPO").mkdir(parents=True)
        if state == "edited file":
            (clone / "src/models/atla_release/PPO/model-ppo-hopper.model").write_bytes(b"edited")
    return root


@pytest.mark.parametrize("state, named, short", [
    ("root is a file", "is a file, not a folder; point RLGAUNTLET_RELEASES", "clones folder is a file"),
    ("clone is a file", "is a file, not a clone of huanzhang12/ATLA_robust_RL; move it away", "clone path is a file"),
    ("file missing", "checkout dfdf8f56a025da95e0a3d652e5e7010b30904a29 -- src/models/atla_release/PPO/model-ppo-hopper.model",
     "file missing"),
    ("edited file", "checkout dfdf8f56a025da95e0a3d652e5e7010b30904a29 -- src/models/atla_release/PPO/model-ppo-hopper.model",
     "another version"),
])
def test_a_published_agent_whose_copy_is_unusable_is_told_a_fix_that_works(state, named, short, tmp_path, cli_main,
                                                                            monkeypatch):
    """No `git clone` where a file is in the way, the release's commit named where a file is missing
    or edited (a plain checkout keeps an edit), and `published list` gives a short reason per row."""
    from rlgauntlet.published import local_problem, release

    root = _releases_tree(tmp_path, state)
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(root))
    before = _snapshot(tmp_path)
    code, err = cli_main(["evaluate", "--agent", "published:ppo-hopper", "--env", "Hopper-v5", "--episodes", "1"],
                         cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and named in lines[0], err
    if state != "clone is a file":
        assert "git clone" not in lines[0]
    assert _snapshot(tmp_path) == before
    assert local_problem(release("ppo-hopper"))[0] == short
    listed = cli_main(["published", "list"])
    row = next(line for line in listed.stdout.splitlines() if "ppo-hopper " in line)
    assert listed.returncode == 0 and "no: " in row and "…:" not in listed.stdout


@pytest.mark.parametrize("args, named, never", [
    (["evaluate", "--agent", "pg:", "--env", "Hopper-v5"], "names no path after pg:", "no source prefix"),
    (["evaluate", "--agent", "published:", "--env", "Hopper-v5"], "names no name after published:", "no source prefix"),
    (["evaluate", "--agent", "pg:/dev/zero", "--env", "Hopper-v5"], "is not a regular file", "does not exist"),
    (["ood", "scan", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--shift", "physics:param=length,scale=0",
      "--store", "o.sqlite"], "param=length must stay positive", "became non-finite"),
    (["train", "--preset", "cartpole-ppo", "--run-dir", "D", "--init-from", "zoo:no-such-agent", "--no-register"],
     "no zoo agent named 'no-such-agent'", "Traceback"),
    (["train", "--preset", "cartpole-ppo", "--run-dir", "D", "--init-from", "zoo:hopper-ppo", "--no-register"],
     "does not fit the PPO policy of preset cartpole-ppo", "Traceback"),
])
def test_each_v4_input_case_is_one_line_writes_nothing_and_says_the_right_thing(args, named, never, tmp_path, cli_main,
                                                                                capsys, monkeypatch):
    before = _snapshot(tmp_path)
    code, err = cli_main(args, cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and named in lines[0] and never not in err, err
    assert _snapshot(tmp_path) == before  # no store, no empty run folder
    _try_suggestion(args, err, capsys, monkeypatch, tmp_path)


def test_a_read_only_command_is_never_told_to_give_a_new_store(tmp_path, cli_main):
    import sqlite3

    theirs = tmp_path / "theirs.sqlite"
    conn = sqlite3.connect(theirs)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()
    for args in (["leaderboard", "--store", str(theirs), "--out", "b.html"],
                 ["report", "--store", str(theirs), "--out", "r.html"]):
        code, err = cli_main(args, cwd=tmp_path)
        assert code == 2 and "it is created" not in err and "written by evaluate, sweep or gauntlet" in err, err


def test_a_zoo_outside_any_repository_names_its_variable_not_git(tmp_path, cli_main, monkeypatch):
    zoo = tmp_path / "myzoo"
    zoo.mkdir()
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(zoo))
    code, err = cli_main(["zoo", "list"], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and "RLGAUNTLET_ZOO" in lines[0] and "manifest.json" in lines[0], err
    code, err = cli_main(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1"], cwd=tmp_path)
    assert code == 2 and "RLGAUNTLET_ZOO" in err, err
    (zoo / "manifest.json").write_text(json.dumps({"mine": {"env": "CartPole-v1", "algorithm": "dqn",
                                                            "file": "mine.zip", "sha256": "0" * 64}}))
    code, err = cli_main(["evaluate", "--agent", "zoo:mine", "--env", "CartPole-v1"], cwd=tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and len(lines) == 1 and "git checkout" not in lines[0] and str(zoo) in lines[0], err
    assert "RLGAUNTLET_ZOO" in lines[0]


BOARD_OPTIONS = [["--level", "paper"], ["--method", "x"], ["--precision", "float32"], ["--device", "cpu"],
                 ["--kind", "q"], ["--vecnormalize", "v.pkl"], ["--input-space", "raw"], ["--other-env"],
                 ["--seeds", "1"], ["--protocol", "classic"]]
REFUSED_BOARD_OPTION = re.compile(r"set (\w+): (?:true )?(\(on each agent\) )?in .* instead and drop (--[\w-]+)")


@pytest.mark.parametrize("option", BOARD_OPTIONS, ids=[o[0] for o in BOARD_OPTIONS])
def test_a_board_option_refused_with_agents_is_accepted_as_the_key_it_names(option, tmp_path, cli_main, capsys,
                                                                             monkeypatch):
    """The round trip of hardening v3's rule, for board files: the key the refusal names, set in the
    board file to the option's value, is accepted (or leads to another, real problem), never the
    same refusal."""
    import yaml

    board = tmp_path / "b.yaml"
    board.write_text("agents: [zoo:cartpole-dqn]\n")
    args = ["gauntlet", "--agents", str(board), "--out", str(tmp_path / "out"), *option]
    code, err = cli_main(args, cwd=tmp_path)
    first = next(line for line in err.splitlines() if line.startswith("rlgauntlet:"))
    found = REFUSED_BOARD_OPTION.search(first)
    assert code == 2 and found is not None and found.group(3) == option[0], first
    key, per_agent = found.group(1), found.group(2) is not None
    value = True if len(option) == 1 else ([int(option[1])] if key == "seeds" else option[1])
    data = {"agents": [{"agent": "zoo:cartpole-dqn", **({key: value} if per_agent else {})}],
            **({} if per_agent else {key: value})}
    board.write_text(yaml.safe_dump(data))
    _run_fix(args[:5], first, capsys, monkeypatch, tmp_path)


@pytest.mark.parametrize("damage", ["edited", "deleted"])
def test_the_git_command_a_published_refusal_gives_restores_the_release(damage, tmp_path, monkeypatch):
    """The catalogue's fix round trip: a clone whose release file was edited or deleted is told a
    `git -C CLONE checkout COMMIT -- PATH`; run as given, it restores exactly the catalogue's file
    (a plain `git checkout` of a moved branch would not)."""
    import shutil

    from rlgauntlet import published

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "releases"
    clone = root / "Repo"
    (clone / "models").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(clone)]
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    (clone / "models/agent.model").write_bytes(b"released weights")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "release"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (clone / "models/agent.model").write_bytes(b"a later version")  # the branch moves on after the release
    subprocess.run([*git, "commit", "-qam", "later"], check=True)
    entry = {"name": "agent", "repository": "someone/Repo", "path": "models/agent.model",
             "sha256": hashlib.sha256(b"released weights").hexdigest()}
    monkeypatch.setattr(published, "catalogue", lambda: {"repositories": {"someone/Repo": "https://example.invalid"},
                                                          "commits": {"someone/Repo": commit}, "releases": [entry]})
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(root))
    if damage == "deleted":
        (clone / "models/agent.model").unlink()
    short, message = published.local_problem(entry)
    assert short == ("another version" if damage == "edited" else "file missing")
    command = re.search(r"`(git -C [^`]+)`", message).group(1)
    subprocess.run(command.split(), check=True, capture_output=True)
    assert published.local_problem(entry) is None
    assert published.clone_command("someone/Repo").endswith(str(clone))  # a clone lands where it is looked for
