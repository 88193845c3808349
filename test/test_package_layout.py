"""The wheel's own rules, read from its source: SGLang is reached through ``compat.py`` only, the package's
imports form no cycle, and ``compat.py`` holds no adapter nobody calls."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "sglang_gemma4_dflash"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


def _imports(tree: ast.Module) -> set[str]:
    """Every module imported anywhere in the file (top level or inside functions)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_only_compat_imports_sglang():
    offenders = {
        name: sorted(m for m in _imports(tree) if m == "sglang" or m.startswith("sglang."))
        for name, tree in _modules().items()
        if name != "sglang_gemma4_dflash.compat"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_package_imports_form_no_cycle():
    modules = _modules()
    edges = {name: {m for m in _imports(tree) if m in modules and m != name} for name, tree in modules.items()}

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    return path + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    cycles = [c for name in modules if (c := cycle_from(name))]
    assert cycles == []


def test_every_public_compat_function_has_a_caller():
    modules = _modules()
    compat = modules["sglang_gemma4_dflash.compat"]
    public = {n.name for n in compat.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    used = set()
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "compat":
                used.add(node.attr)
            elif isinstance(node, ast.Name) and name == "sglang_gemma4_dflash.compat":
                used.add(node.id)  # helpers compat uses itself
            elif isinstance(node, ast.ImportFrom) and node.module == "sglang_gemma4_dflash.compat":
                used.update(alias.name for alias in node.names)
    assert sorted(public - used) == []
