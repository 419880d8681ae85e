"""The scripts outside the package (benchmarks/, tools/) call the library as it is now.

No fast test runs them (they train and evaluate for minutes to hours), so a library function that
drops or renames a keyword leaves a script that fails only when someone runs it, often on a lent
GPU machine where a failed start costs device time (the OOD Pong runbook failed so once). This
reads each script's calls to functions and classes imported from ``rlgauntlet`` and checks every
keyword and the number of positional arguments against the callee's signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("benchmarks/*.py"), *REPO.glob("tools/**/*.py")])


def _imported_callees(tree: ast.AST) -> dict[str, object]:
    """Names a script binds to objects of ``rlgauntlet`` (``from rlgauntlet.x import f [as g]``,
    ``import rlgauntlet.x as m``), anywhere in the file; a name bound to two different objects is
    left out (which one a call means depends on its scope)."""
    bound: dict[str, object] = {}
    clashes: set[str] = set()

    def bind(name: str, obj: object) -> None:
        if name in bound and bound[name] is not obj:
            clashes.add(name)
        bound[name] = obj

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rlgauntlet"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                if obj is None:  # a submodule imported by name
                    obj = importlib.import_module(f"{node.module}.{alias.name}")
                bind(alias.asname or alias.name, obj)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rlgauntlet") and alias.asname:
                    bind(alias.asname, importlib.import_module(alias.name))
    return {name: obj for name, obj in bound.items() if name not in clashes}


def _callee(func: ast.expr, names: dict[str, object]) -> object | None:
    if isinstance(func, ast.Name):
        return names.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = names.get(func.value.id)
        if inspect.ismodule(module):
            return getattr(module, func.attr, None)
    return None


def _dict_literals(tree: ast.AST) -> dict[str, list[str]]:
    """Names assigned once in the script, to a dict display with string keys: their keys (what
    ``f(**name)`` passes as keywords)."""
    found: dict[str, list[str] | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            literal = (isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                          for k in value.keys))
            found[name] = [k.value for k in value.keys] if literal and name not in found else None
    return {name: keys for name, keys in found.items() if keys is not None}


def _keywords(call: ast.Call, literals: dict[str, list[str]]) -> list[str]:
    """The keyword names ``call`` passes: its own, and those of a ``**name`` whose dict is known."""
    names = []
    for kw in call.keywords:
        if kw.arg is not None:
            names.append(kw.arg)
        elif isinstance(kw.value, ast.Name):
            names += literals.get(kw.value.id, [])
    return names


def _problems(call: ast.Call, target: object, literals: dict[str, list[str]] | None = None) -> list[str]:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or an object without one: nothing to check
        return []
    params = signature.parameters.values()
    keywords_ok = any(p.kind is p.VAR_KEYWORD for p in params)  # **kwargs takes any name
    accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems = [f"keyword {name!r}" for name in _keywords(call, literals or {})
                if not keywords_ok and name not in accepted]
    if not any(isinstance(arg, ast.Starred) for arg in call.args) and not any(p.kind is p.VAR_POSITIONAL
                                                                               for p in params):
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(call.args) > len(positional):
            problems.append(f"{len(call.args)} positional arguments (it takes {len(positional)})")
    return problems


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_script_calls_the_library_with_arguments_it_takes(script):
    tree = ast.parse(script.read_text(), filename=str(script))
    names, literals = _imported_callees(tree), _dict_literals(tree)
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = _callee(node.func, names)
            if target is not None and callable(target) and not inspect.ismodule(target):
                wrong += [f"line {node.lineno}: {ast.unparse(node.func)}() given {problem}"
                          for problem in _problems(node, target, literals)]
    assert not wrong, f"{script.relative_to(REPO)}: " + "; ".join(wrong)


def test_the_check_finds_a_keyword_the_callee_no_longer_takes(tmp_path):
    """The check itself: the call that broke the OOD runbook (``device=`` to ``ood_scan``, whose
    agent spec carries the device now, given through ``**runtime``) is found, and the same call
    without it is not."""
    from rlgauntlet.experiments.ood_benchmark import ood_scan

    bad = ast.parse("ood_scan('zoo:a', 'CartPole-v1', 'ood-cartpole', device='cuda', n_envs=8)").body[0].value
    good = ast.parse("ood_scan('zoo:a', 'CartPole-v1', 'ood-cartpole', n_envs=8)").body[0].value
    assert _problems(bad, ood_scan) == ["keyword 'device'"] and _problems(good, ood_scan) == []
    spread = ast.parse("ood_scan('zoo:a', 'CartPole-v1', **runtime)").body[0].value  # as the script had it
    assert _problems(spread, ood_scan, {"runtime": ["device", "n_envs"]}) == ["keyword 'device'"]
    assert _problems(ast.parse("ood_scan(*[1] * 20)").body[0].value, ood_scan) == []  # a starred call: not counted
    too_many = ast.parse("ood_scan(1, 2, 3, 4, 5, 6, 7, 8, 9)").body[0].value  # 8 may be given by position
    assert _problems(too_many, ood_scan) == ["9 positional arguments (it takes 8)"]
