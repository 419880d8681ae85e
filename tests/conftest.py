"""Shared fixtures: tiny SB3 agents trained inside the test session (no downloads)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))  # developer helpers that are not installed (tools/netns.py)


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_pytest_temp(tmp_path_factory):
    """The tests' own SB3 models log with SB3's default logger, which makes an empty folder
    per learn() call; keep those in pytest's temp dir, not in the machine's."""
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """SB3 models of each algorithm, trained for a few hundred steps and saved as .zip."""
    import stable_baselines3 as sb3

    out = tmp_path_factory.mktemp("sb3")
    specs = {
        "ppo": ("CartPole-v1", sb3.PPO, dict(n_steps=64, batch_size=32, n_epochs=1)),
        "a2c": ("CartPole-v1", sb3.A2C, dict(n_steps=8)),
        "dqn": ("CartPole-v1", sb3.DQN, dict(learning_starts=50, buffer_size=1000)),
        "sac": ("Pendulum-v1", sb3.SAC, dict(learning_starts=50, buffer_size=1000)),
        "td3": ("Pendulum-v1", sb3.TD3, dict(learning_starts=50, buffer_size=1000)),
        "ddpg": ("Pendulum-v1", sb3.DDPG, dict(learning_starts=50, buffer_size=1000)),
        "ppo_cont": ("Pendulum-v1", sb3.PPO, dict(n_steps=64, batch_size=32, n_epochs=1)),
    }
    paths = {}
    for name, (env_id, cls, kwargs) in specs.items():
        model = cls("MlpPolicy", env_id, seed=0, device="cpu", policy_kwargs=dict(net_arch=[32, 32]), **kwargs)
        model.learn(200)
        path = out / f"{name}.zip"
        model.save(path)
        paths[name] = path
    return paths


@pytest.fixture()
def cli_env() -> dict:
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    return env


class CliResult:
    """What a CLI call left: its exit status and what it printed (as ``subprocess.run`` gives)."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __iter__(self):  # ``code, err = cli_main(...)``: what a refusal test reads
        return iter((self.returncode, self.stderr))


@pytest.fixture()
def cli_main(monkeypatch, capsys):
    """Run the CLI's own ``main()`` in this process: ``run(args, cwd=None) -> CliResult``.

    For refusals, which end before any work: a new interpreter costs about 2.5 s a call (the
    imports), this nothing. The exit status and stderr are main()'s own (a traceback would fail
    the test as an exception, not pass as a line). Warnings are ignored as PYTHONWARNINGS does
    in ``cli_env``; the signal handlers main() installs and torch's thread count are put back.
    Tests of the process itself (signals, the installed entry point) keep ``subprocess``."""
    import signal
    import warnings

    from rlgauntlet.cli import main

    def run(args, cwd=None) -> CliResult:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["rlgauntlet", *map(str, args)])
        handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        threads = torch.get_num_threads()
        capsys.readouterr()  # what the test printed before is not the CLI's
        try:
            with warnings.catch_warnings(), pytest.raises(SystemExit) as exited:
                warnings.simplefilter("ignore")
                main()
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)
            torch.set_num_threads(threads)
        out = capsys.readouterr()
        code = exited.value.code
        return CliResult(code if isinstance(code, int) else 1, out.out, out.err)

    return run
