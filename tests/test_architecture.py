"""The package layout the design promises, checked on the source: no
import cycles between modules, the kernels never import JAX or llvmlite,
the lowering never imports rendering code, and buffer layouts come from
one module."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "jaxrender"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the jaxrender modules it imports (anywhere, deferred
    imports inside functions included, annotation-only imports under ``if
    TYPE_CHECKING:`` not), resolved to modules that exist."""
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        typing_only = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
                       and getattr(top.test, "id", getattr(top.test, "attr", None)) == "TYPE_CHECKING"
                       for n in ast.walk(top)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    up = up[:len(up) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            # A package's __init__ importing its own submodules is not a cycle
            # through them: Python runs the submodule after the package exists.
            if n.startswith(m + "."):
                continue
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = _cycle(_imports())
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"p": {"p.x"}, "p.x": {"p"}}) is None


def test_layers_do_not_reach_across():
    graph = _imports()
    for name, deps in graph.items():
        if name.startswith("jaxrender.kernels"):
            # Physics is written against the kernel IR only.
            assert not any(d.startswith(("jaxrender.lowering", "jaxrender.primitives", "jaxrender.scene"))
                           for d in deps), (name, deps)
            text = (PKG.parent / (name.replace(".", "/") + ".py")).read_text() \
                if (PKG.parent / (name.replace(".", "/") + ".py")).exists() else ""
            assert not re.search(r"^\s*(import|from)\s+(jax|llvmlite)\b", text, re.M), name
        if name.startswith(("jaxrender.lowering", "jaxrender.ir")):
            assert not any(d.startswith(("jaxrender.kernels", "jaxrender.scene", "jaxrender.render"))
                           for d in deps), (name, deps)


def test_scene_buffers_are_declared_in_the_layout_module_only():
    # Every scene buffer's declaration (dtype, row width) lives in
    # kernels/layout.py; a second declaration elsewhere would be a copy that
    # can drift from it.
    from jaxrender.kernels import layout
    names = "|".join(re.escape(n) for n in layout.scene_inputs())
    declared = re.compile(rf'"({names})"\s*:\s*ir\.(In|Scalar)\(')
    for path in (PKG / "kernels").rglob("*.py"):
        if path.name != "layout.py":
            assert not declared.search(path.read_text()), path
    assert declared.search((PKG / "kernels" / "layout.py").read_text())
