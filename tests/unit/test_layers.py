"""The dependency rule (README, docs/architecture.md), checked on the source:

    wire  <  control  <  emulator  <  features  <  hostagent, telemetry  <  experiments, benchmarks  <  fabric

A module imports project code only from its own layer or a lower one, the
imports between modules form no cycle, and no project import hides inside
a function (imports for type checking only, under `if TYPE_CHECKING:`, are
exempt: they run never)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = {"wire": 0, "control": 1, "emulator": 2, "features": 3, "hostagent": 4, "telemetry": 4, "experiments": 5,
          "benchmarks": 5, "fabric": 6}
# wire imports nothing but Scapy, numpy (array codecs) and a few standard modules.
WIRE_ALLOWED = {"scapy", "numpy", "__future__", "struct", "dataclasses", "typing", "enum", "functools", "math", "zlib"}


def modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = modules()


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(path: Path, name: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import that runs."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((target, child.lineno, in_function))
                # `from pkg import module` imports the module too
                for a in child.names:
                    if f"{target}.{a.name}" in MODULES:
                        found.append((f"{target}.{a.name}", child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def project_imports() -> dict[str, list[tuple[str, int, bool]]]:
    return {name: [(t, line, f) for t, line, f in imports(path, name) if t.split(".")[0] in LAYERS]
            for name, path in MODULES.items()}


def layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


def test_every_package_is_in_a_layer():
    top = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}
    assert top == set(LAYERS), f"packages without a layer: {sorted(top - set(LAYERS))}"


def test_no_upward_import():
    upward = [f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)}), line {line}"
              for m, found in project_imports().items() for t, line, _ in found if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


def test_siblings_of_one_layer_do_not_import_each_other():
    across = [f"{m} imports {t}, line {line}" for m, found in project_imports().items()
              for t, line, _ in found if layer(t) == layer(m) and t.split(".")[0] != m.split(".")[0]]
    assert not across, "\n".join(across)


def test_no_project_import_inside_a_function():
    hidden = [f"{m}, line {line}: {t}" for m, found in project_imports().items() for t, line, inside in found if inside]
    assert not hidden, "\n".join(hidden)


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for m, found in project_imports().items():
        graph[m] = set()
        for t, _, _ in found:
            while t and t not in MODULES:          # `from pkg.mod import name` -> pkg.mod
                t = t.rpartition(".")[0]
            if t and t != m:
                graph[m].add(t)
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)


def test_wire_imports_only_scapy():
    others = [f"{m}, line {line}: {t}" for m, path in MODULES.items() if m.startswith("wire")
              for t, line, _ in imports(path, m)
              if t.split(".")[0] not in WIRE_ALLOWED and not t.startswith("wire")]
    assert not others, "\n".join(others)
