"""The agent grammar: what ``--agent`` accepts, parsed in one place.

An agent is named ``SOURCE:REST``. The sources and what follows the colon:

========================  ============================================================
``zoo:NAME``              a reference agent of this project's zoo (``rlgauntlet zoo list``)
``sb3:PATH.zip[:ALGO]``   a Stable-Baselines3 file; ``ALGO`` (ppo, dqn, ...) when the file's
                          own record of its class is not enough
``torchscript:PATH``      a TorchScript archive (with ``--kind`` and, for non-image input,
                          ``--input-space``)
``pg:PATH.model``         a policy_gradients release file (SA-PPO lineage), read as data
``sadqn:PATH.model``      an SA-DQN Atari Q-network (its state dict), read as data, on its own
                          frames (``--env SADQN/Pong-v0``)
``published:NAME``        a catalogued release in the user's local clone (``rlgauntlet
                          published list``)
========================  ============================================================

:data:`AGENT_FORMS` is the one sentence every help text and error prints.

Example:
    >>> ref = parse_agent("sb3:runs/hopper.zip:ppo")
    >>> ref.source, ref.name, ref.algorithm, str(ref)
    ('sb3', 'runs/hopper.zip', 'ppo', 'sb3:runs/hopper.zip:ppo')
    >>> parse_agent("zoo:cartpole-dqn").name
    'cartpole-dqn'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlgauntlet.errors import UserError

#: each source, and what follows its colon
AGENT_SOURCES = {"zoo": "NAME", "sb3": "PATH.zip[:ALGO]", "torchscript": "PATH", "pg": "PATH.model",
                 "sadqn": "PATH.model", "published": "NAME"}
#: the accepted forms, as every help text and error says them
AGENT_FORMS = " | ".join(f"{source}:{rest}" for source, rest in AGENT_SOURCES.items())
#: the Stable-Baselines3 algorithms an ``sb3:`` agent may name after its path
SB3_ALGORITHMS = ("ppo", "a2c", "dqn", "sac", "td3", "ddpg")
#: the sources whose rest is a catalogue name rather than a file path
NAMED_SOURCES = ("zoo", "published")


@dataclass(frozen=True)
class AgentRef:
    """A parsed agent name: its ``source`` and what follows the colon (``rest``)."""

    source: str
    rest: str

    def __str__(self) -> str:
        return f"{self.source}:{self.rest}"

    @property
    def name(self) -> str:
        """The catalogue name (``zoo:``, ``published:``) or the file path (an ``sb3:`` path
        without its algorithm)."""
        return self.path_text if self.source == "sb3" else self.rest

    @property
    def algorithm(self) -> str | None:
        """The SB3 algorithm an ``sb3:`` agent names after its path, lower case; else None."""
        if self.source != "sb3":
            return None
        head, _, tail = self.rest.rpartition(":")
        return tail.lower() if head and tail.lower() in SB3_ALGORITHMS else None

    @property
    def path_text(self) -> str:
        """The file part of a file source, as written (empty for a catalogue name)."""
        if self.source in NAMED_SOURCES:
            return ""
        return self.rest.rpartition(":")[0] if self.algorithm else self.rest

    @property
    def path(self) -> Path | None:
        """The agent file of a file source (``sb3:``, ``torchscript:``, ``pg:``, ``sadqn:``); None for a
        catalogue name."""
        return Path(self.path_text) if self.path_text else None


def parse_agent(text: str) -> AgentRef:
    """``text`` (``zoo:cartpole-dqn``, ``sb3:a.zip:ppo``, ...) as an :class:`AgentRef`, or one
    :class:`UserError` naming what is wrong and the forms that are accepted."""
    source, sep, rest = str(text).partition(":")
    if sep and not rest.strip() and source in AGENT_SOURCES:
        what = "NAME" if source in NAMED_SOURCES else "PATH"
        raise UserError(f"agent {text!r} names no {what.lower()} after {source}:; give {source}:{what}"
                        + (" (`rlgauntlet published list` names them)" if source == "published" else
                           " (`rlgauntlet zoo list` names them)" if source == "zoo" else ""))
    if not sep or not rest:
        raise UserError(f"agent {text!r} has no source prefix; use one of: {AGENT_FORMS}")
    if source not in AGENT_SOURCES:
        raise UserError(f"unknown agent source {source!r}; use one of: {AGENT_FORMS}")
    return AgentRef(source, rest)


def agent_of_description(description: dict) -> str | None:
    """The agent name that loads the victim a run recorded (its ``description``): a catalogue
    agent by its name, a file agent by its recorded path; None when the record says neither.

    Example:
        >>> agent_of_description({"source": "zoo", "name": "cartpole-dqn"})
        'zoo:cartpole-dqn'
        >>> agent_of_description({"source": "sb3", "path": "runs/a.zip", "algorithm": "ppo"})
        'sb3:runs/a.zip'
    """
    source = description.get("source")
    if description.get("published") and description.get("name"):
        return f"published:{description['name']}"  # a published agent records its file as pg
    if source in NAMED_SOURCES and description.get("name"):
        return f"{source}:{description['name']}"
    if source in AGENT_SOURCES and description.get("path"):
        return f"{source}:{description['path']}"
    return None
