"""No output ever destroys data, and every output is checked before the work starts.

The cases are generated from the CLI's own option table: every command's options that name a
file or folder it writes are found by name, and each gets the hostile values of its kind. A new
command with an output option fails :func:`test_every_writing_command_has_a_base_invocation`
until it is given a base invocation here, and is then covered by construction.
"""

from __future__ import annotations

import hashlib
import json
import signal
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


@pytest.fixture(scope="module")
def cli_main():
    from rlgauntlet.cli import main

    def call(args, capsys, monkeypatch, cwd):
        monkeypatch.setattr(sys, "argv", ["rlgauntlet", *args])
        monkeypatch.chdir(cwd)
        with pytest.raises(SystemExit) as exc:
            main()
        return exc.value.code, capsys.readouterr().err

    yield call
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
            kinds = ["file", "unwritable"] if name in DIR_OUTPUTS else ["foreign", "directory", "unwritable"]
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
    value = {"foreign": foreign, "directory": tmp_path, "file": foreign,
             "unwritable": Path("/proc/rlgauntlet-none/out" + (suffix if name in FILE_OUTPUTS else "")),
             "the store": tmp_path / "results.sqlite" if command not in READS_STORE else tmp_path / "mine.sqlite"}[kind]
    if kind == "the store" and not value.exists():
        value = _store(tmp_path).rename(value)
    other = [o for n, o in WRITERS[command] if o != option]  # other outputs: somewhere harmless
    for o in other:
        args += [o, str(tmp_path / "elsewhere" / f"x{'.png' if o == '--plot' else '.json'}")]
    before = _snapshot(tmp_path)
    code, err = cli_main([*args, option, str(value)], capsys, monkeypatch, tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert str(value) in lines[0] or option in lines[0], lines[0]
    assert _snapshot(tmp_path) == before  # no file changed, none created (no store, no run folder)


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
    code, err = cli_main([*args, option, value], capsys, monkeypatch, tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and option in lines[0], err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_bare_group_names_what_is_missing(cli_main, capsys, monkeypatch, tmp_path):
    for args in ([], ["zoo"], ["ood"]):
        code, err = cli_main(args, capsys, monkeypatch, tmp_path)
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
                     ["directory", "foreign"] if p.name in STORE_OPTIONS else
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
    value = {"missing": tmp_path / "missing.pkl", "directory": tmp_path, "foreign": foreign,
             "missing agent file": f"sb3:{tmp_path / 'missing.zip'}", "agent directory": f"sb3:{tmp_path}",
             "foreign agent": f"sb3:{foreign}", "unknown zoo name": "zoo:no-such-agent", "unknown source": "bogus:x",
             "empty spec": "", "unknown threat": "no_such_threat:eps=0.1",
             "filter matching nothing": "no-such-agent"}[kind]
    args = command.split() + [a.format(repo=repo, tmp=tmp_path) for a in BASE[command]]
    if option != "--store" and command in READS_STORE:
        args += ["--store", str(_store(tmp_path))]
    before = _snapshot(tmp_path)
    code, err = cli_main([*args, option, str(value)], capsys, monkeypatch, tmp_path)
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert _snapshot(tmp_path) == before  # refused before anything was written (a store read is left byte-identical)
