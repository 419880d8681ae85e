"""Threat spec strings: ``name`` or ``name:key=value,key=value``.

Values may be integers, decimals, fractions (``eps=1/255``), booleans (``true``/``false``)
or words. Every threat also takes ``p=`` (perturb each step with probability p).

Example:
    >>> parse_params("eps=1/255,steps=10,norm=linf")
    {'eps': 0.00392156862745098, 'steps': 10, 'norm': 'linf'}
"""

from __future__ import annotations

import difflib
import re

from pydantic import ValidationError

from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import THREATS, Schedule, Threat

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_value(text: str, spec: str) -> int | float | bool | str:
    """Convert one value of a spec: int, float, fraction ``a/b``, bool or plain word."""
    t = text.strip()
    if "/" in t:
        num, _, den = t.partition("/")
        if not (_NUMBER.match(num.strip()) and _NUMBER.match(den.strip())):
            raise UserError(f"threat spec {spec!r}: {t!r} is not a fraction; write e.g. eps=1/255")
        if float(den) == 0:
            raise UserError(f"threat spec {spec!r}: {t!r} divides by zero")
        return float(num) / float(den)
    if _NUMBER.match(t):
        return int(t) if re.fullmatch(r"[+-]?\d+", t) else float(t)
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    return t


def parse_params(text: str, spec: str | None = None) -> dict:
    """Parse ``key=value,key=value`` into a dict (see :func:`parse_value`)."""
    spec = spec if spec is not None else text
    params: dict = {}
    if not text.strip():
        return params
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UserError(
                f"threat spec {spec!r}: {item.strip()!r} is not key=value; "
                "write e.g. gaussian_noise:std=0.1,p=0.5"
            )
        if key in params:
            raise UserError(f"threat spec {spec!r}: {key!r} is given twice")
        params[key] = parse_value(value, spec)
    return params


ALIASES = ("fgsm", "pgd")


def known_threats() -> list[str]:
    import rlgauntlet.threats  # noqa: F401  (registers the built-in threats)

    return sorted([*THREATS, *ALIASES])


def _resolve_alias(name: str, params: dict, spec: str) -> type[Threat]:
    """``fgsm:objective=X`` is attack X with one step of size ε; ``pgd:objective=X`` is X
    with its PGD defaults. The objective defaults to minbest."""
    from rlgauntlet.threats.attacks import OBJECTIVES

    objective = params.pop("objective", "minbest")
    if objective not in OBJECTIVES:
        raise UserError(f"threat spec {spec!r}: unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}")
    if name == "fgsm":
        if objective == "cw":
            raise UserError(f"threat spec {spec!r}: cw is an optimisation, not a one-step attack; use --threat cw")
        if "steps" in params:
            raise UserError(f"threat spec {spec!r}: fgsm is one step; use pgd:steps=N for more")
        params["steps"] = 1
    return THREATS[objective]


def parse_threat(spec: str) -> Threat:
    """Build a threat from its spec string, or raise a :class:`UserError` naming the problem."""
    import rlgauntlet.threats  # noqa: F401

    spec = spec.strip()
    name, _, rest = spec.partition(":")
    name = name.strip()
    if not name:
        raise UserError("empty threat spec; write e.g. --threat gaussian_noise:std=0.1")
    if name not in THREATS and name not in ALIASES:
        names = sorted([*THREATS, *ALIASES])
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"unknown threat {name!r}{hint}; known threats: {', '.join(names)}")
    params = parse_params(rest, spec)
    cls = _resolve_alias(name, params, spec) if name in ALIASES else THREATS[name]
    p = params.pop("p", 1.0)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise UserError(f"threat spec {spec!r}: p={p} must be a probability in [0, 1]")
    fields = cls.Params.model_fields
    for key in params:
        if key not in fields:
            allowed = ", ".join([*fields, "p"])
            raise UserError(f"threat {name!r} has no parameter {key!r}; its parameters are: {allowed}")
    try:
        model = cls.Params(**params)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or name
        required = [k for k, f in fields.items() if f.is_required()]
        hint = f"; required: {', '.join(required)}" if required else ""
        raise UserError(f"threat spec {spec!r}: {where}: {err['msg']}{hint}") from None
    return cls(model, Schedule(float(p)), spec=spec)
