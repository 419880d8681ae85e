"""Model-based attacks on continuous control (Weng et al., ICLR 2020): a learned dynamics
model, unrolled optimisation toward an unsafe target state on observations (``model_obs``)
or actions (``model_action``), and the paper's model-free baselines (``rand_u``, ``rand_b``,
``flip`` and their ``*_action`` forms)."""

from rlgauntlet.threats.model_based import attack, baselines  # noqa: F401
