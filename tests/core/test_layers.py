"""Import-layer gate: the package layering of docs/architecture.md, checked on the source tree with ``ast``.

Rules (every import counts, including ones inside functions):
1. core (``tracekit/`` outside ``tracekit/cli``) imports neither ``tracekit.converters`` nor ``tracekit.replayer``;
2. ``tracekit.converters`` never imports ``tracekit.replayer``, and ``tracekit.replayer`` never imports
   ``tracekit.converters``;
3. only the CLI imports ``tracekit.cli``;
4. inside the replayer, ``simulation`` and ``results`` never import ``reporting`` or ``orchestration`` (a module's
   concern is its subpackage: ``tracekit.replayer.<concern>``); every replayer module but the package's
   ``__init__`` lives in one of the four subpackages.
"""

from __future__ import annotations

import ast
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


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against ``module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
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
