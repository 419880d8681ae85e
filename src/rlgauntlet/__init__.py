"""rlgauntlet: put trained deep-RL agents through the gauntlet.

Example:
    >>> from rlgauntlet import evaluate                                   # doctest: +SKIP
    >>> report = evaluate("zoo:cartpole-ppo", "CartPole-v1", threats=["uniform_noise:eps=0.1"])  # doctest: +SKIP
    >>> report.to_dict()["evaluations"][1]["return_mean"]                 # doctest: +SKIP
"""

from rlgauntlet.version import __version__
__all__ = ["evaluate", "Report", "run_sweep", "render_report", "__version__"]


def __getattr__(name: str):
    # imported on first use: `import rlgauntlet` (e.g. for the version) stays light
    if name in ("evaluate", "Report"):
        from rlgauntlet.experiments import evaluate as module

        return getattr(module, name)
    if name == "run_sweep":
        from rlgauntlet.experiments.sweep import run_sweep

        return run_sweep
    if name == "render_report":
        from rlgauntlet.report.html import render_report

        return render_report
    raise AttributeError(f"module 'rlgauntlet' has no attribute {name!r}")
