"""The package's imports hold the layers of docs/architecture.md: no import cycle (between
modules, or between layers), no private name imported across modules, no arrow from a lower
layer to a higher one. Imports inside functions count: they run too.

Each rule is checked on the real tree and on a small constructed graph, so a checker that
found nothing would fail here too."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rlgauntlet"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for every import of ``rlgauntlet``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("rlgauntlet"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub, None) if sub in MODULES else (node.module, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("rlgauntlet")]
    return found


def _graph() -> dict[str, set[str]]:
    return {name: {m for m, _ in _imports(name, path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _order() -> dict[str, int]:
    """Layer name -> rank, from the one line of docs/architecture.md that states the order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    line = re.search(r"^Layer order \(lowest first\): (.+)$", text, re.M)
    assert line, "docs/architecture.md states no layer order"
    return {layer: rank for rank, group in enumerate(line.group(1).split("|")) for layer in group.split()}


def test_the_cycle_finder_finds_a_constructed_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_layers():
    layers: dict[str, set[str]] = defaultdict(set)
    for source, targets in _graph().items():
        layers[_layer_of(source)] |= {_layer_of(t) for t in targets} - {_layer_of(source)}
    assert _cycles(dict(layers)) == []


def test_no_private_name_crosses_a_module():
    crossing = [(name, f"{module}.{imported}") for name, path in MODULES.items()
                for module, imported in _imports(name, path)
                if imported and imported.startswith("_") and not imported.startswith("__") and module != name]
    assert crossing == []


def test_every_layer_is_placed_and_no_arrow_points_up():
    order = _order()
    layers = {_layer_of(m) for m in MODULES} - {"<root>"}
    assert layers <= set(order), f"layers missing from docs/architecture.md: {sorted(layers - set(order))}"
    upward = sorted({(source, target) for source, targets in _graph().items() for target in targets
                     if _layer_of(source) != "<root>" and _layer_of(target) != "<root>"
                     and order[_layer_of(source)] < order[_layer_of(target)]})
    assert upward == [], f"imports against the layer order: {upward[:10]}"


def test_no_module_imports_the_package_root():
    """The root is a facade above every layer (lazy exports); the version has a module of its own."""
    importers = sorted(name for name, path in MODULES.items() if name != "rlgauntlet"
                       and any(m == "rlgauntlet" for m, _ in _imports(name, path)))
    assert importers == []


@pytest.mark.parametrize("package", sorted({_layer_of(m) for m in MODULES if m.count(".") >= 1
                                            and MODULES[m].name == "__init__.py"}))
def test_every_package_says_what_it_owns(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"rlgauntlet/{package}/__init__.py needs a docstring saying what it owns"
    assert "may import" in doc.lower(), f"rlgauntlet/{package}/__init__.py: say what it may import"
