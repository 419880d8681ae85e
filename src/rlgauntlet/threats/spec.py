"""Threat spec strings: ``name`` or ``name:key=value,key=value``.

The grammar of a value:

* a number: ``10``, ``0.5``, ``1e-3``, ``-2``;
* a fraction, when both sides of one ``/`` are numbers: ``eps=1/255``;
* a boolean: ``true`` / ``false``;
* a list, items separated by ``|``: ``target=height|head_height``, ``grid=0.5|1|2``;
* a quoted text, in ``"..."`` or ``'...'``, taken as it is (commas, ``=``, ``|`` and ``/``
  included; a backslash escapes the quote): ``label="a,b=c"``;
* anything else is text, paths included: ``attacker=runs/paad-hopper/attacker.zip``.

Every threat also takes ``p=`` (perturb each step with probability p).

Example:
    >>> parse_params("eps=1/255,steps=10,norm=linf")
    {'eps': 0.00392156862745098, 'steps': 10, 'norm': 'linf'}
    >>> parse_params("attacker=runs/a.zip,target=height|0.5,label='x,y'")
    {'attacker': 'runs/a.zip', 'target': ['height', 0.5], 'label': 'x,y'}
"""

from __future__ import annotations

import difflib
import math
import os
import re
from pathlib import Path

from pydantic import ValidationError

from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import THREATS, Schedule, Threat, objectives

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_QUOTES = "\"'"


def split_outside_quotes(text: str, sep: str, spec: str, what: str = "value") -> list[str]:
    """Split ``text`` on ``sep`` where it is not inside quotes; quotes are kept in the parts."""
    parts, current, quote, i = [], [], None, 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\" and i + 1 < len(text) and text[i + 1] == quote:
                current.append(text[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in _QUOTES:
            quote = ch
        elif ch == sep:
            parts.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    if quote is not None:
        part = "".join(current)
        name = part.partition("=")[0].strip() if "=" in part else what
        raise UserError(f"threat spec {spec!r}: the value of {name!r} opens a {quote} quote that is never closed")
    parts.append("".join(current))
    return parts


def _unquote(t: str) -> str | None:
    """The text inside a fully quoted value (escaped quotes resolved), or None if not quoted."""
    if len(t) >= 2 and t[0] in _QUOTES and t[-1] == t[0]:
        return t[1:-1].replace("\\" + t[0], t[0])
    return None


def parse_value(text: str, spec: str, key: str = "value") -> int | float | bool | str | list:
    """Convert one value of a spec (see the module docstring for the grammar)."""
    t = text.strip()
    quoted = _unquote(t)
    if quoted is not None:
        return quoted
    if any(q in t for q in _QUOTES) and "|" not in t:
        raise UserError(f"threat spec {spec!r}: {key}={t} has a stray quote; quote the whole value, e.g. {key}=\"a,b\"")
    if "|" in t:
        items = split_outside_quotes(t, "|", spec, key)
        if any(not i.strip() for i in items):
            raise UserError(f"threat spec {spec!r}: {key}={t} has an empty list item; write e.g. {key}=a|b")
        return [parse_value(i, spec, key) for i in items]
    if len(t) > 100 and _NUMBER.match(t):
        raise UserError(f"threat spec {spec!r}: {key} has a number of {len(t)} characters; give a sensible value")
    num, slash, den = t.partition("/")
    if slash and "/" not in den and _NUMBER.match(num.strip()) and _NUMBER.match(den.strip()):
        if float(den) == 0:
            raise UserError(f"threat spec {spec!r}: {key}={t} divides by zero")
        value = float(num) / float(den)
        if not math.isfinite(value):
            raise UserError(f"threat spec {spec!r}: {key}={t} is not a finite number")
        return value
    if _NUMBER.match(t):
        return int(t) if re.fullmatch(r"[+-]?\d+", t) else float(t)
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    return t


def split_items(text: str, spec: str) -> list[str]:
    """The ``key=value`` items of a spec's parameter part (commas inside quotes kept)."""
    return [] if not text.strip() else split_outside_quotes(text, ",", spec)


def split_spec_list(text: str) -> list[str]:
    """Several specs written with commas, as ``--strongest-of`` takes them: an item with no
    ``=``, or with a ``:`` before its first ``=``, starts a new spec; any other item is one more
    parameter of the spec before it.

    Example:
        >>> split_spec_list("random,pgd:eps=0.1,steps=30,maxdiff:eps=0.1")
        ['random', 'pgd:eps=0.1,steps=30', 'maxdiff:eps=0.1']
    """
    specs: list[str] = []
    for item in split_outside_quotes(text, ",", text, "list"):
        item = item.strip()
        if not item:
            continue
        head = item.split("=", 1)[0]
        if "=" not in item or ":" in head or not specs:
            specs.append(item)
        else:
            specs[-1] += "," + item
    return specs


def parse_params(text: str, spec: str | None = None) -> dict:
    """Parse ``key=value,key=value`` into a dict (see :func:`parse_value`)."""
    spec = spec if spec is not None else text
    params: dict = {}
    for item in split_items(text, spec):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip() or any(q in key for q in _QUOTES):
            raise UserError(
                f"threat spec {spec!r}: {item.strip()!r} is not key=value; "
                "write e.g. gaussian_noise:std=0.1,p=0.5"
            )
        if key in params:
            raise UserError(f"threat spec {spec!r}: {key!r} is given twice")
        params[key] = parse_value(value, spec, key)
    return params


ALIASES = ("fgsm", "pgd")


def known_threats() -> list[str]:
    # importing this module imported the package first, whose __init__ registers the built-ins
    return sorted([*THREATS, *ALIASES])


def _resolve_alias(name: str, params: dict, spec: str) -> type[Threat]:
    """``fgsm:objective=X`` is attack X with one step of size ε; ``pgd:objective=X`` is X
    with its PGD defaults. The objective defaults to minbest."""
    known = objectives()  # the registry knows them: each attack declares ``objective = True``
    objective = params.pop("objective", "minbest")
    if objective not in known:
        raise UserError(f"threat spec {spec!r}: unknown objective {objective!r}; choose one of: {', '.join(known)}")
    if name == "fgsm":
        if objective == "cw":
            raise UserError(f"threat spec {spec!r}: cw is an optimisation, not a one-step attack; use --threat cw")
        if "steps" in params:
            raise UserError(f"threat spec {spec!r}: fgsm is one step; use pgd:steps=N for more")
        params["steps"] = 1
    return THREATS[objective]


def normalize_spec(spec: str) -> str:
    """The spec without spaces around its name, keys and values (quoted text kept as written),
    so that ``pgd: eps = 0.1`` and ``pgd:eps=0.1`` are the same evaluation."""
    name, sep, rest = spec.strip().partition(":")
    if not sep:
        return name.strip()
    items = []
    for item in split_items(rest, spec):
        key, eq, value = item.partition("=")
        items.append(f"{key.strip()}{eq}{value.strip()}")
    return f"{name.strip()}:{','.join(items)}"


def key_spec(threat: Threat) -> str:
    """``threat``'s spec as a results store keys its runs: each of its ``file_params`` cut to its
    last path component, every other item as written (normalised). A store, a clone of the
    releases or a board's folder moved elsewhere so finds its runs again; the files' content is in
    the key through ``threat.fingerprint()``.

    Example:
        >>> key_spec(parse_threat("paad:attacker=some/where/runs/paad-eps0.075/,eps=0.075"))
        'paad:attacker=paad-eps0.075,eps=0.075'
        >>> key_spec(parse_threat('released_attacker:path="a,b/attack-ppo-hopper.model",eps=0.075'))
        'released_attacker:path=attack-ppo-hopper.model,eps=0.075'
    """
    if not threat.file_params:
        return threat.spec
    name, sep, rest = normalize_spec(threat.spec).partition(":")
    items = []
    for item in split_items(rest, threat.spec):
        key, eq, value = item.partition("=")
        if key in threat.file_params:
            value = quote_value(Path(os.path.abspath(str(parse_value(value, threat.spec, key)))).name)
        items.append(f"{key}{eq}{value}")
    return f"{name}{sep}{','.join(items)}"


def parse_threat(spec: str) -> Threat:
    """Build a threat from its spec string, or raise a :class:`UserError` naming the problem."""
    spec = normalize_spec(spec)
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
        required = [k for k, f in fields.items() if f.is_required() and k not in params]
        hint = f"; required: {', '.join(required)}" if required else ""
        raise UserError(f"threat spec {spec!r}: {where}: {err['msg']}{hint}") from None
    return cls(model, Schedule(float(p)), spec=spec)


def quote_value(text: str) -> str:
    """``text`` as a spec value: quoted (inner quotes escaped, as :func:`parse_threat` reads them)
    when it holds a character the spec grammar gives a meaning (a path with a comma, say).

    >>> quote_value("runs/paad"), quote_value("runs/a,b")
    ('runs/paad', '"runs/a,b"')
    """
    return '"' + text.replace('"', '\\"') + '"' if any(c in text for c in ',:="|\'') else text
