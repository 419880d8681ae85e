"""rlgauntlet: put trained deep-RL agents through the gauntlet.

Example:
    >>> from rlgauntlet import evaluate                                   # doctest: +SKIP
    >>> report = evaluate("zoo:cartpole-ppo", "CartPole-v1", threats=["uniform_noise:eps=0.1"])  # doctest: +SKIP
    >>> report.to_dict()["evaluations"][1]["return_mean"]                 # doctest: +SKIP
"""

__version__ = "0.1.0"
__all__ = ["evaluate", "Report", "__version__"]


def __getattr__(name: str):
    # imported on first use: `import rlgauntlet` (e.g. for the version) stays light
    if name in ("evaluate", "Report"):
        from rlgauntlet.experiments import evaluate as module

        return getattr(module, name)
    raise AttributeError(f"module 'rlgauntlet' has no attribute {name!r}")
