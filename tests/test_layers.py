"""The package's imports hold the layers of docs/architecture.md: no import cycle (between
modules, or between layers), no private name imported or reached across modules, no arrow from a
lower layer to a higher one. Every import counts: inside functions (they run too), relative ones
(``from ..experiments import x``), and dynamic ones (``importlib.import_module``: a constant
name is an arrow; a computed one must be declared in :data:`DYNAMIC`, with the module names it can
reach read from that module's own constants).

Each rule is checked on the real tree and on a small constructed package that breaks it, so a
scanner that found nothing would fail here too."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rlgauntlet"

#: the modules that import a computed module name, and why; the rlgauntlet modules such a module
#: can reach are the ``rlgauntlet.x[.y][:Name]`` strings among its own constants (its registry)
DYNAMIC = {
    "rlgauntlet.training.algorithms": "BUILT_IN names our SB3 subclasses as 'module:Class' data (no import cycle)",
    "rlgauntlet.victims.sb3_files": "the third-party classes an SB3 file may name, from allow-lists (read as data)",
}
DYNAMIC_CALLS = ("import_module", "__import__")
MODULE_STRING = re.compile(r"^(rlgauntlet(?:\.\w+)*)(?::\w+)?$")


@dataclass
class Scan:
    """What the scanner read from one package: its modules, their arrows (module → module), the
    private names reached across modules and the dynamic imports."""

    root: str
    modules: dict[str, Path]
    edges: dict[str, set[str]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)  # "module: target._name"
    dynamic: dict[str, list[str]] = field(default_factory=dict)  # module -> computed import calls (source text)


def _module_names(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _absolute(name: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The module an ImportFrom names, a relative one resolved against ``name`` (``path``)."""
    if node.level == 0:
        return node.module
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if node.level - 1 > len(base):
        return None
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan(package: Path) -> Scan:
    """Read every module of ``package`` (a folder with ``__init__.py``)."""
    root = package.name
    modules = _module_names(package)
    result = Scan(root, modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        targets: set[str] = set()
        bound: dict[str, str] = {}  # local name -> the module it is bound to
        imported_names: list[tuple[str, str]] = []  # (module, private name) from-imported

        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(name, path, node)
                if not module or not (module == root or module.startswith(root + ".")):
                    continue
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    if sub in modules:
                        targets.add(sub)
                        bound[alias.asname or alias.name] = sub
                    else:
                        targets.add(module)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            imported_names.append((module, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == root or alias.name.startswith(root + "."):
                        targets.add(alias.name)
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if called in DYNAMIC_CALLS and node.args:
                    arg = node.args[0]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        if arg.value == root or arg.value.startswith(root + "."):
                            targets.add(arg.value)
                    else:
                        result.dynamic.setdefault(name, []).append(ast.unparse(node))
        if name in result.dynamic:  # a declared registry: its module-name constants are its arrows
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    match = MODULE_STRING.match(node.value)
                    if match and match.group(1).split(".")[0] == root:
                        targets.add(match.group(1))
        for node in ast.walk(tree):  # module._name: a private name reached through a module object
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                owner = bound.get(node.value.id) if isinstance(node.value, ast.Name) else None
                if owner is None and isinstance(node.value, (ast.Attribute, ast.Name)):
                    dotted = ast.unparse(node.value)
                    owner = dotted if dotted in modules else None
                if owner is not None and owner != name:
                    result.private.append(f"{name}: {owner}.{node.attr}")
        result.private += [f"{name}: {module}.{imported}" for module, imported in imported_names if module != name]
        result.edges[name] = {t for t in targets if t in modules and t != name}
    return result


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


def _layer_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    layers: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        layers[_layer_of(source)] |= {_layer_of(t) for t in targets} - {_layer_of(source)}
    return _cycles(dict(layers))


def _upward(graph: dict[str, set[str]], order: dict[str, int]) -> list[tuple[str, str]]:
    return sorted({(source, target) for source, targets in graph.items() for target in targets
                   if _layer_of(source) != "<root>" and _layer_of(target) != "<root>"
                   and order[_layer_of(source)] < order[_layer_of(target)]})


def _root_importers(found: Scan) -> list[str]:
    return sorted(name for name, targets in found.edges.items() if found.root in targets and name != found.root)


def _order() -> dict[str, int]:
    """Layer name -> rank, from the one line of docs/architecture.md that states the order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    line = re.search(r"^Layer order \(lowest first\): (.+)$", text, re.M)
    assert line, "docs/architecture.md states no layer order"
    return {layer: rank for rank, group in enumerate(line.group(1).split("|")) for layer in group.split()}


REAL = scan(PACKAGE)


# -- each rule on a constructed package that breaks it ----------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> Scan:
    """A package ``rlgauntlet`` under ``tmp_path`` with ``files`` (path -> source)."""
    package = tmp_path / "rlgauntlet"
    for relative, text in {"__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(package).parents:
            (package / parent / "__init__.py").touch()
        path.write_text(text)
    return scan(package)


def test_the_cycle_finder_finds_a_constructed_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_scanner_reads_every_kind_of_import(tmp_path):
    found = _package(tmp_path, {
        "low/a.py": "from rlgauntlet.low import b\nimport rlgauntlet.high.c\n",
        "low/b.py": "def f():\n    from ..high import d\n",  # relative, inside a function
        "low/__init__.py": "from .a import x\n",  # relative from a package's __init__
        "high/c.py": "import importlib\nM = importlib.import_module('rlgauntlet.low.b')\n",
        "high/d.py": "from rlgauntlet.low.a import thing\n",
    })
    assert found.edges["rlgauntlet.low.a"] == {"rlgauntlet.low.b", "rlgauntlet.high.c"}
    assert found.edges["rlgauntlet.low.b"] == {"rlgauntlet.high.d"}
    assert found.edges["rlgauntlet.low"] == {"rlgauntlet.low.a"}
    assert found.edges["rlgauntlet.high.c"] == {"rlgauntlet.low.b"}
    assert found.edges["rlgauntlet.high.d"] == {"rlgauntlet.low.a"}


def test_a_relative_upward_arrow_and_a_relative_cycle_are_found(tmp_path):
    found = _package(tmp_path, {
        "low/a.py": "from ..high import b\n",
        "high/b.py": "from ..low.a import x\n",
    })
    assert _upward(found.edges, {"low": 0, "high": 1}) == [("rlgauntlet.low.a", "rlgauntlet.high.b")]
    assert _cycles(found.edges) == [["rlgauntlet.high.b", "rlgauntlet.low.a"]]
    assert _layer_cycles(found.edges) == [["high", "low"]]


def test_a_dynamic_import_is_an_arrow_and_a_computed_one_is_listed(tmp_path):
    found = _package(tmp_path, {
        "low/a.py": "import importlib\ndef f():\n    return importlib.import_module('rlgauntlet.high.b')\n",
        "low/reg.py": ("import importlib\nTABLE = {'k': 'rlgauntlet.high.b:Thing'}\n"
                       "def get(k):\n    m, _, a = TABLE[k].partition(':')\n    return importlib.import_module(m)\n"),
        "high/b.py": "Thing = 1\n",
    })
    assert _upward(found.edges, {"low": 0, "high": 1}) == [("rlgauntlet.low.a", "rlgauntlet.high.b"),
                                                          ("rlgauntlet.low.reg", "rlgauntlet.high.b")]
    assert set(found.dynamic) == {"rlgauntlet.low.reg"}


def test_a_private_name_reached_through_a_module_is_found(tmp_path):
    found = _package(tmp_path, {
        "a.py": "_SECRET = 1\n__version__ = '1'\n",
        "b.py": "from rlgauntlet import a\nx = a._SECRET\ny = a.__version__\n",
        "c.py": "import rlgauntlet.a as m\nx = m._SECRET\n",
        "d.py": "import rlgauntlet.a\nx = rlgauntlet.a._SECRET\n",
        "e.py": "from rlgauntlet.a import _SECRET\n",
        "f.py": "from . import a\nx = a._SECRET\n",
        "g.py": "class K:\n    _own = 1\n    def f(self):\n        return self._own\n",
    })
    assert sorted(found.private) == ["rlgauntlet.b: rlgauntlet.a._SECRET", "rlgauntlet.c: rlgauntlet.a._SECRET",
                                     "rlgauntlet.d: rlgauntlet.a._SECRET", "rlgauntlet.e: rlgauntlet.a._SECRET",
                                     "rlgauntlet.f: rlgauntlet.a._SECRET"]


def test_a_module_importing_the_root_is_found(tmp_path):
    found = _package(tmp_path, {"low/a.py": "import rlgauntlet\n", "low/b.py": "from .. import x\n"})
    assert _root_importers(found) == ["rlgauntlet.low.a", "rlgauntlet.low.b"]


# -- the real package ------------------------------------------------------------------------

def test_the_scanner_sees_the_real_package():
    """A scanner that read no edge would pass every rule below."""
    assert len(REAL.modules) > 100 and sum(len(t) for t in REAL.edges.values()) > 300
    assert "rlgauntlet.experiments.agents" in REAL.edges["rlgauntlet.gauntlet.plan"]


def test_no_import_cycle_between_modules():
    assert _cycles(REAL.edges) == []


def test_no_import_cycle_between_layers():
    assert _layer_cycles(REAL.edges) == []


def test_no_private_name_crosses_a_module():
    assert REAL.private == []


def test_every_computed_import_is_declared():
    assert set(REAL.dynamic) == set(DYNAMIC), {m: REAL.dynamic.get(m) for m in set(REAL.dynamic) ^ set(DYNAMIC)}


def test_every_layer_is_placed_and_no_arrow_points_up():
    order = _order()
    layers = {_layer_of(m) for m in REAL.modules} - {"<root>"}
    assert layers <= set(order), f"layers missing from docs/architecture.md: {sorted(layers - set(order))}"
    upward = _upward(REAL.edges, order)
    assert upward == [], f"imports against the layer order: {upward[:10]}"


def test_no_module_imports_the_package_root():
    """The root is a facade above every layer (lazy exports); the version has a module of its own."""
    assert _root_importers(REAL) == []


@pytest.mark.parametrize("package", sorted({_layer_of(m) for m in REAL.modules if m.count(".") >= 1
                                            and REAL.modules[m].name == "__init__.py"}))
def test_every_package_says_what_it_owns(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"rlgauntlet/{package}/__init__.py needs a docstring saying what it owns"
    assert "may import" in doc.lower(), f"rlgauntlet/{package}/__init__.py: say what it may import"
