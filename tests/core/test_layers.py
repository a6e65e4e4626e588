"""Import-layer gate: the package layering of docs/architecture.md, checked on the source tree with ``ast``.

Rules (every import counts, module-level and inside functions; ``if TYPE_CHECKING:`` imports count for the
direction rules 1-6 but not for cycles, rule 7, since they never run):
1. core (``tracekit/`` outside ``tracekit/cli``) imports neither ``tracekit.converters`` nor ``tracekit.replayer``;
2. ``tracekit.converters`` never imports ``tracekit.replayer``, and ``tracekit.replayer`` never imports
   ``tracekit.converters``;
3. only the CLI imports ``tracekit.cli``;
4. inside the replayer, ``simulation`` and ``results`` never import ``reporting`` or ``orchestration`` (a module's
   concern is its subpackage: ``tracekit.replayer.<concern>``); every replayer module but the package's
   ``__init__`` lives in one of the four subpackages;
5. inside the core, one direction of use between its packages (``CORE_USES``): base modules <- model <- wire <-
   workloads <- sets <- interop, checks <- transforms <- the faces (``tracekit``, ``tracekit.io``) and the CLI,
   with costs beside sets (it uses model and workloads only); no core module imports the face ``tracekit.io``
   (it imports the defining module); a package's face (its ``__init__``) counts as the module defining the name;
6. a private module (a ``_name`` component) is imported only from its own folder (and that folder's
   sub-folders): ``tracekit.wire._prim`` from ``tracekit/wire/``, never from ``tracekit/sets/`` or ``replayer/``;
7. no import cycle between modules of the three trees: the graph of executed imports (faces resolved to the
   defining module, so ``__init__`` faces aside) has no strongly connected component of two or more modules.
   Function-level imports count: a cycle hidden in a function still ties both modules together (a change to one
   can break the other), which is what the gate is for.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# source folder -> the import name it installs under (pyproject's package-dir)
TREES = {"tracekit": "tracekit", "converters": "tracekit.converters", "replayer": "tracekit.replayer"}

# Known breaches, each with its reason. The gate fails on any breach not listed here, and on a listed one that is
# gone (so the list only shrinks). (importing module, imported module)
KNOWN: set[tuple[str, str]] = set()


# replayer subpackages by concern (docs/architecture.md): (importing concern, imported concern) pairs that breach
CONCERNS = ("simulation", "results", "reporting", "orchestration")
FORBIDDEN = {
    ("simulation", "reporting"),
    ("simulation", "orchestration"),
    ("results", "reporting"),
    ("results", "orchestration"),
}


def _concern(name: str) -> str | None:
    """The replayer subpackage a module belongs to (``tracekit.replayer.<concern>...``), else None."""
    parts = name.split(".")
    if not _within(name, "tracekit.replayer") or len(parts) < 3:
        return None
    return parts[2] if parts[2] in CONCERNS else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    base = TREES[rel.parts[0]]
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([base, *parts])


def _import_nodes(tree: ast.AST) -> list[tuple[ast.stmt, bool]]:
    """Every import statement of ``tree`` with whether it sits under ``if TYPE_CHECKING:`` (never executed)."""
    found: list[tuple[ast.stmt, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, typing_only))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), typing_only)
            else:
                visit(child, typing_only)

    visit(tree, False)
    return found


def _imports(path: Path, module: str, typing_too: bool = True) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against ``module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node, typing_only in _import_nodes(tree):
        if typing_only and not typing_too:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join(anchor + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return out


def _edges() -> set[tuple[str, str]]:
    edges = set()
    for folder in TREES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_proto" in path.parts:
                continue
            module = _module_name(path)
            edges.update((module, imported) for imported in _imports(path, module))
    return edges


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _breaches(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    bad = set()
    for src, dst in edges:
        cli = _within(src, "tracekit.cli")
        conv, rep = _within(src, "tracekit.converters"), _within(src, "tracekit.replayer")
        core = not (cli or conv or rep)
        if core and (_within(dst, "tracekit.converters") or _within(dst, "tracekit.replayer")):
            bad.add((src, _owner(dst)))
        elif conv and _within(dst, "tracekit.replayer") or rep and _within(dst, "tracekit.converters"):
            bad.add((src, _owner(dst)))
        elif not cli and _within(dst, "tracekit.cli"):
            bad.add((src, _owner(dst)))
        elif (_concern(src), _concern(dst)) in FORBIDDEN:
            bad.add((src, _owner(dst)))
    return bad


def _owner(name: str) -> str:
    """The module part of an imported name (drops a trailing `from m import Class`)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        head = parts[:n]
        folder = (
            {"converters": "converters", "replayer": "replayer", "cli": "tracekit/cli"}.get(head[1], None)
            if len(head) > 1
            else None
        )
        rel = Path(folder or "tracekit", *head[2:]) if folder else Path("tracekit", *head[1:])
        if (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file():
            return ".".join(head)
    return name


# ----------------------------------------------------------------------------- rules 5-7: the core's packages
# the base modules: imported by every package, importing only each other
BASE = (
    "tracekit.errors", "tracekit.fmt", "tracekit.parallel", "tracekit.jit", "tracekit._aot", "tracekit.gc_pause",
    "tracekit.output", "tracekit.capture", "tracekit._proto",
)  # fmt: skip
# core package -> the core packages it may import (besides the base modules and itself): one direction of use
CORE_USES: dict[str, set[str]] = {
    "model": set(),
    "wire": {"model"},
    "workloads": {"model", "wire"},
    "sets": {"model", "wire", "workloads"},
    "costs": {"model", "workloads"},
    "interop": {"model", "wire", "workloads", "sets"},
    "checks": {"model", "wire", "workloads", "sets"},
    "transforms": {"model", "wire", "workloads", "sets", "interop", "costs", "checks"},
}
FACES = ("tracekit", "tracekit.io")  # public faces for code outside the core (they define nothing)


def _layer(name: str) -> str | None:
    """The core layer of a module: a ``CORE_USES`` package, "base", "face", "cli", or None outside the core."""
    if _within(name, "tracekit.converters") or _within(name, "tracekit.replayer"):
        return None
    if _within(name, "tracekit.cli"):
        return "cli"
    if name in FACES:
        return "face"
    if any(_within(name, base) for base in BASE):
        return "base"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in CORE_USES else None


def _modules() -> dict[str, Path]:
    """Every module of the three trees (generated ``_proto`` aside) -> its file."""
    out = {}
    for folder in TREES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_proto" not in path.parts:
                out[_module_name(path)] = path
    return out


def _face_names(path: Path, module: str) -> dict[str, str]:
    """``name -> module`` of the names a package face (an ``__init__``) imports from its modules."""
    found = {}
    for node, _ in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


_MODULES = _modules()


_FACE_NAMES = {m: _face_names(p, m) for m, p in _MODULES.items() if p.name == "__init__.py" or m in FACES}


def _defining_module(name: str) -> str | None:
    """The module of the three trees that defines an imported ``name`` (a module, or ``module.attr``), following
    package faces: eager ones (``from tracekit.model.node import Node`` in ``tracekit/model/__init__.py``) and lazy
    ones alike, since a lazy face (PEP 562 ``__getattr__``) names its modules in ``if TYPE_CHECKING:`` imports,
    which ``_face_names`` reads (``test_lazy_faces_match_their_typing_imports`` holds the two lists equal).
    None for a name outside the trees."""
    if name in _MODULES:
        return name  # a module, or a submodule imported from its package
    head, _, attr = name.rpartition(".")
    if head in _FACE_NAMES and attr in _FACE_NAMES[head]:
        return _defining_module(f"{_FACE_NAMES[head][attr]}.{attr}")
    return head if head in _MODULES else None


def _resolved_edges(typing_too: bool) -> set[tuple[str, str]]:
    """(importer, imported module) over the three trees, each imported name resolved to the module that defines
    it: ``from tracekit.model import Node`` is an edge to ``tracekit.model.node`` (the face forwards the name)."""
    edges = set()
    for module, path in _MODULES.items():
        for imported in _imports(path, module, typing_too):
            target = _defining_module(imported)
            if target and target != module and not _within(module, target):
                edges.add((module, target))
    return edges


# ----------------------------------------------------------------------------- the packages' faces
# A face is a package ``__init__`` (or ``tracekit.io``) with ``__all__``. The core's folders (wire, sets, checks, costs,
# interop) have lazy faces: ``__all__``, a literal ``_FACE = {name: defining module}`` that a module-level
# ``__getattr__`` (PEP 562) imports from on first use, and the same names as ``if TYPE_CHECKING:`` imports, which
# mypy, IDEs and this gate (``_face_names``) read.
LAZY_FACES = ("tracekit.wire", "tracekit.sets", "tracekit.checks", "tracekit.costs", "tracekit.interop")


def _literal(tree: ast.Module, target: str) -> object:
    """The literal value assigned to ``target`` at the top of a module, None when there is none."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _face_problems(module: str, source: str) -> list[str]:
    """What is wrong with the face ``module`` whose source is ``source``: a name of ``__all__`` that its module
    does not define, or (a lazy face) ``__all__``, ``_FACE`` and the ``TYPE_CHECKING`` imports that disagree."""
    tree = ast.parse(source)
    exported = _literal(tree, "__all__")
    if exported is None:
        return []
    problems = []
    lazy = _literal(tree, "_FACE")
    if lazy is not None:
        typing_names = {
            alias.asname or alias.name: node.module
            for node, typing_only in _import_nodes(tree)
            if typing_only and isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        if not set(exported) == set(lazy) == set(typing_names):
            problems.append(f"{module}: __all__, _FACE and the TYPE_CHECKING imports name different sets")
        problems += [f"{module}.{n}: _FACE says {m}, TYPE_CHECKING {typing_names.get(n)}" for n, m in lazy.items()
                     if typing_names.get(n, m) != m]  # fmt: skip
        homes = {n: lazy.get(n) for n in exported}
    else:
        homes = {n: module for n in exported}
    for name, home in homes.items():
        if home is None or home not in _MODULES and not home.startswith("tracekit._proto"):
            problems.append(f"{module}.{name}: defining module {home} is not a module of the three trees")
        elif not hasattr(importlib.import_module(home), name):
            problems.append(f"{module}.{name}: {home} defines no {name!r}")
    return problems


def test_every_face_name_resolves():
    """A face names only what exists: each ``__all__`` name is found (for a lazy face, in the module its ``_FACE``
    names), and the gate resolves it to a module of the trees, so direction and cycle rules see through faces."""
    faces = [m for m, p in _MODULES.items() if p.name == "__init__.py" or m in FACES]
    problems, checked = [], 0
    for module in faces:
        source = _MODULES[module].read_text(encoding="utf-8")
        problems += _face_problems(module, source)
        for name in _literal(ast.parse(source), "__all__") or ():
            checked += 1
            if _defining_module(f"{module}.{name}") is None:
                problems.append(f"{module}.{name}: the gate resolves it to no module")
    assert set(LAZY_FACES) <= set(faces)
    assert checked > 150, checked  # every face was read (wire alone names 43)
    assert not problems, "\n".join(problems)


def _lazy_face(typing_names: str, exported: str, face: str) -> str:
    head = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracekit.sets.traceset import "
    return f"{head}{typing_names}\n__all__ = [{exported}]\n_FACE = {{{face}}}\n"


def test_a_face_naming_what_does_not_exist_fails():
    home = "'tracekit.sets.traceset'"
    good = _lazy_face("TraceSet", "'TraceSet'", f"'TraceSet': {home}")
    assert _face_problems("tracekit.sets", good) == []
    gone = _lazy_face("TraceSet, Gone", "'TraceSet', 'Gone'", f"'TraceSet': {home}, 'Gone': {home}")
    assert _face_problems("tracekit.sets", gone) == ["tracekit.sets.Gone: tracekit.sets.traceset defines no 'Gone'"]
    moved = _lazy_face("TraceSet", "'TraceSet'", "'TraceSet': 'tracekit.sets.io'")
    assert "tracekit.sets.TraceSet: _FACE says tracekit.sets.io, TYPE_CHECKING tracekit.sets.traceset" in (
        _face_problems("tracekit.sets", moved)
    )
    unlisted = _lazy_face("TraceSet", "'TraceSet', 'ClassSet'", f"'TraceSet': {home}")
    assert "tracekit.sets: __all__, _FACE and the TYPE_CHECKING imports name different sets" in (
        _face_problems("tracekit.sets", unlisted)
    )


@pytest.mark.parametrize(
    "name,defining",
    [
        ("tracekit.sets.TraceSet", "tracekit.sets.traceset"),  # lazy face
        ("tracekit.checks.validate_trace", "tracekit.checks.rank_checks"),
        ("tracekit.interop.write_traceset", "tracekit.interop.astra"),
        ("tracekit.wire.kernels", "tracekit.wire.kernels"),  # a submodule from its package
        ("tracekit.model.Node", "tracekit.model.node"),  # eager face
        ("tracekit.io.write_traceset", "tracekit.interop.astra"),  # face of a face's name
        ("tracekit.sets", "tracekit.sets"),
    ],
)
def test_gate_sees_through_faces(name, defining):
    assert _defining_module(name) == defining


def test_face_imports_count_against_the_direction():
    # sets.io importing interop's face is the breach sets.io -> interop.astra
    assert _direction_breaches({("tracekit.sets.io", _defining_module("tracekit.interop.astra_ready") or "")})


def test_lazy_faces_import_nothing():
    """Importing a core folder's package costs nothing: no module of it (or any other) is imported until a name is
    used, so a face can never take part in an import cycle."""
    code = (
        "import sys, tracekit; before = set(sys.modules)\n"
        f"import {', '.join(LAZY_FACES)}\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
        "from tracekit.sets import TraceSet; import tracekit.sets.traceset as t; assert TraceSet is t.TraceSet\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == sorted(LAZY_FACES)


def _direction_breaches(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Rules 5 and 6 on (importer, imported) edges."""
    bad = set()
    for src, dst in edges:
        a, b = _layer(src), _layer(dst)
        if b == "face" and a not in (None, "cli", "face"):
            bad.add((src, dst))  # the core imports the defining module, not the face
        elif a == "base" and b not in ("base", None):
            bad.add((src, dst))
        elif a in CORE_USES and b in CORE_USES and a != b and b not in CORE_USES[a]:
            bad.add((src, dst))
        elif a in CORE_USES and b in ("cli", "face"):
            bad.add((src, dst))
        if _private_breach(src, dst):
            bad.add((src, dst))
    return bad


def _package_folder(package: str) -> Path:
    """The source folder of a package (converters/ and replayer/ are folders of their own, not under tracekit/)."""
    parts = package.split(".")
    if len(parts) > 1 and parts[1] in ("converters", "replayer"):
        return Path(parts[1], *parts[2:])
    return Path("tracekit", *parts[1:])


def _private_breach(src: str, dst: str) -> bool:
    """Rule 6: ``dst`` has a private component and ``src`` lives outside the folder holding it."""
    parts = dst.split(".")
    private = next((i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")), None)
    if private is None:
        return False
    holder = _package_folder(".".join(parts[:private]))
    path = _MODULES.get(src)
    mine = path.parent.relative_to(ROOT) if path else _package_folder(src.rpartition(".")[0])
    return not (mine == holder or holder in mine.parents)


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan), each sorted, largest first."""
    graph: dict[str, list[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, []).append(dst)
        graph.setdefault(dst, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def test_no_import_cycles(capsys):
    edges = _resolved_edges(typing_too=False)
    cycles = _cycles(edges)
    modules = {m for edge in edges for m in edge}
    with capsys.disabled():
        print(f"\nimport graph: {len(modules)} modules, {len(edges)} edges, {len(cycles)} import cycles")
    assert not cycles, "import cycles (docs/architecture.md):\n" + "\n".join(f"  {' <-> '.join(c)}" for c in cycles)


def test_core_direction_and_private_modules():
    bad = _direction_breaches(_resolved_edges(typing_too=True))
    assert not bad, "imports against the direction or of another folder's private module:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(bad)
    )


def test_top_of_tracekit_holds_at_most_ten_modules():
    top = sorted(p.stem for p in (ROOT / "tracekit").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 10, top


@pytest.mark.parametrize(
    "src,dst,breach",
    [
        ("tracekit.wire.codec", "tracekit.model.node", False),
        ("tracekit.model.trace", "tracekit.wire.nodeview", True),
        ("tracekit.sets.io", "tracekit.interop.astra", True),
        ("tracekit.interop.astra", "tracekit.sets.io", False),
        ("tracekit.interop.astra", "tracekit.transforms.select", True),
        ("tracekit.transforms.pipeline", "tracekit.interop.astra", False),
        ("tracekit.checks.validate", "tracekit.io", True),
        ("tracekit.converters.pytorch.linker", "tracekit.io", False),
        ("tracekit.output", "tracekit.wire.framing", True),
        ("tracekit.costs.devices", "tracekit.sets.traceset", True),
        ("tracekit.sets.io", "tracekit.sets._prefix_lock", False),
        ("tracekit.checks.validate", "tracekit.sets._prefix_lock", True),
        ("tracekit.replayer.simulation.engine", "tracekit.wire._prim", True),
        ("tracekit.replayer.simulation.engine", "tracekit.replayer.simulation._flows", False),
        ("tracekit.replayer.reporting.report", "tracekit.replayer.simulation._flows", True),
        ("tracekit.jit", "tracekit._aot", False),
        ("tracekit.cli.replay", "tracekit.cli._common", False),
    ],
)
def test_direction_rules_catch_breaches(src, dst, breach):
    assert bool(_direction_breaches({(src, dst)})) is breach


def test_cycles_are_found():
    edges = {("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.z", "a.w"), ("b.p", "b.q"), ("b.q", "b.p")}
    assert _cycles(edges) == [["a.x", "a.y", "a.z"], ["b.p", "b.q"]]


def test_source_tree_is_found():
    edges = _edges()
    sources = {src for src, _ in edges}
    # the three trees are all scanned (a moved folder must not silently empty the gate)
    assert any(_within(s, "tracekit.converters.pytorch") for s in sources)
    assert any(_within(s, "tracekit.replayer") for s in sources)
    assert "tracekit.model" in sources and "tracekit.cli" in sources


def test_replayer_modules_have_a_concern():
    loose = sorted(_module_name(p) for p in (ROOT / "replayer").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"replayer modules outside simulation/results/reporting/orchestration: {loose}"


def test_layers_hold():
    bad = _breaches(_edges())
    new = sorted(bad - KNOWN)
    assert not new, "import-layer breaches (see docs/architecture.md):\n" + "\n".join(f"  {a} -> {b}" for a, b in new)
    gone = sorted(KNOWN - bad)
    assert not gone, f"fixed breaches still listed in KNOWN (remove them): {gone}"


@pytest.mark.parametrize(
    "src,dst,breach",
    [
        ("tracekit.model", "tracekit.replayer.simulation.engine", True),
        ("tracekit.transforms.scale", "tracekit.converters.pytorch", True),
        ("tracekit.converters.pytorch.linker", "tracekit.replayer.simulation.hardware", True),
        ("tracekit.replayer.simulation.engine", "tracekit.converters.generators.llm", True),
        ("tracekit.replayer.simulation.engine", "tracekit.cli._common", True),
        ("tracekit.cli.replay", "tracekit.replayer.simulation.engine", False),
        ("tracekit.replayer.simulation.engine", "tracekit.model", False),
        ("tracekit.converters.pytorch.linker", "tracekit.io", False),
        ("tracekit.replayer.simulation.engine", "tracekit.replayer.reporting.plots", True),
        ("tracekit.replayer.simulation.folding", "tracekit.replayer.orchestration.sweep", True),
        ("tracekit.replayer.results.result", "tracekit.replayer.reporting.timeline", True),
        ("tracekit.replayer.results.measured", "tracekit.replayer.reporting.measured_report", True),
        ("tracekit.replayer.simulation.folding", "tracekit.replayer.results.result", False),
        ("tracekit.replayer.reporting.report", "tracekit.replayer.results.result", False),
        ("tracekit.replayer.reporting.report", "tracekit.replayer.simulation.hardware", False),
        ("tracekit.replayer.orchestration.sweep", "tracekit.replayer.reporting.plots", False),
    ],
)
def test_rules_catch_breaches(src, dst, breach):
    assert bool(_breaches({(src, dst)})) is breach
