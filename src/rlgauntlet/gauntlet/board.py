"""A board: the gauntlet of many agents (agents × envs, one protocol and level) planned and run as
one set of cells, so that an executor keeps every worker busy across agents
(:func:`rlgauntlet.gauntlet.run.run_plans`), on local workers or a Ray cluster.

A board file (YAML) names the agents, each with the leaderboard label of its method and, where it
is not its own env (a zoo agent's, a published agent's), the envs it runs on:

.. code-block:: yaml

    name: hopper
    envs: [Hopper-v5]          # for agents that name none
    level: standard            # protocol: the env family's unless given
    seeds: [0]                 # default: the level's
    agents:
      - {agent: zoo:hopper-ppo, method: ppo}
      - {agent: zoo:hopper-sa-ppo, method: sa-ppo}
      - {agent: published:sa-ppo-hopper, method: sa-ppo (released)}

Every agent is loaded and every plan checked before any work (bad input fails first, with the
agent it concerns); results go to one store, and each agent's result is its own gauntlet run
there, as ``rlgauntlet gauntlet`` writes it, so the leaderboard ranks them.

Example:
    >>> board = Board.model_validate({"envs": ["CartPole-v1"], "level": "quick",
    ...                               "agents": ["zoo:cartpole-dqn", {"agent": "zoo:cartpole-ppo", "method": "ppo"}]})
    >>> [(a.agent, a.method) for a in board.agents]
    [('zoo:cartpole-dqn', None), ('zoo:cartpole-ppo', 'ppo')]
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import FileAgentSpec, agent_entries


class BoardAgent(FileAgentSpec):
    """One agent of a board: an :class:`AgentSpec`, its method label and its envs."""

    command: ClassVar[str] = "rlgauntlet gauntlet"
    method: str | None = Field(None, description="the leaderboard's label for this agent's method")
    envs: list[str] | None = Field(None, description="Gymnasium ids (default: the board's, or the agent's own)")
    lstm_directors: bool = Field(False, description="also train LSTM directors against this agent (the protocol "
                                 "trains them against recurrent agents)")


class Board(BaseModel):
    """A board file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("board", description="a label for the board")
    envs: list[str] = Field([], description="envs of the agents that name none")
    protocol: str | None = Field(None, description="a protocol name (default: each env family's)")
    level: str = Field("standard", description="quick, standard or paper")
    seeds: list[int] | None = Field(None, description="evaluation seeds (default: the level's)")
    agents: list[BoardAgent] = Field(min_length=1, description="agent specs, or entries with method, envs and load options")

    @field_validator("agents", mode="before")
    @classmethod
    def _agent_strings(cls, value: object) -> object:
        return agent_entries(value)


def load_board(path: str | Path) -> Board:
    """Read and validate a board file; every problem is one :class:`UserError` naming it."""
    from rlgauntlet.common.specfiles import load_yaml_model

    return load_yaml_model(path, Board, "board file", "boards/hopper.yaml")


def agent_envs(agent: BoardAgent, board: Board) -> list[str]:
    """The envs ``agent`` runs on: its own list, the board's, or the env it was made for."""
    if agent.envs:
        return agent.envs
    if board.envs:
        return board.envs
    home = agent.catalogue_env()
    if home is not None:
        return [home]
    raise UserError(f"board agent {agent.agent} names no env; give it envs: [ENV_ID], or the board envs:")


def check_board_keys(board: Board, agent: BoardAgent, env: str) -> None:
    """The board's own keys (protocol, level, seeds) checked for one of its (agent, env) pairs, every
    refusal naming the key to change (the command line's --protocol, --level and --seeds are refused
    with a board)."""
    from rlgauntlet.common.seeding import check_seeds
    from rlgauntlet.gauntlet.protocols import protocol_fitting

    chosen = protocol_fitting(board.protocol, env, agent.preset, option="protocol:").for_env(env)
    settings = chosen.level(board.level, option="level:")
    if board.seeds is not None:
        check_seeds(board.seeds, settings.episodes, option="seeds:")
        if chosen.race is not None:
            from rlgauntlet.gauntlet.race import check_disjoint

            check_disjoint(board.seeds, settings.episodes, max(chosen.race.rounds(settings.episodes), default=0),
                           option="seeds:")


def plan_board(board: Board, store: str | Path, allow_pickle: bool = False, exhaustive: bool = False) -> tuple[list, list]:
    """Every (agent, env) of the board planned (loaded and checked) before any work: the plans
    and each plan's method label. An agent listed twice on one env (under any label) is refused: its
    one gauntlet result would be written once and ranked once, the other entry silently lost."""
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    plans, methods, seen = [], [], {}
    for agent in board.agents:
        spec = agent.load_spec()
        if allow_pickle:
            spec = spec.model_copy(update={"allow_pickle": True})
        for env in agent_envs(agent, board):
            key = (agent.agent, env)  # its result file and its leaderboard row are named so
            if key in seen:
                labels = " and ".join(repr(m) for m in dict.fromkeys((seen[key], agent.method)))
                raise UserError(f"board agent {agent.agent} on {env} is listed twice (method {labels}); one agent on "
                                "one env is one gauntlet result: list it once (a method label groups several agents)")
            seen[key] = agent.method
            try:
                check_board_keys(board, agent, env)
                plans.append(plan_gauntlet(spec, env, board.protocol, board.level, board.seeds, store, exhaustive,
                                           agent.lstm_directors))
            except UserError as exc:
                raise UserError(f"board agent {agent.agent} on {env}: {exc}") from None
            methods.append(agent.method)
    return plans, methods
