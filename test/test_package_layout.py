"""The wheel's own rules, read from its source: SGLang is reached through the ``compat`` package only (its private
``HookRegistry`` through ``compat/registry.py`` only), the package's imports form no cycle, and ``compat`` holds no
adapter nobody calls. Each rule is also run on a planted breach, so it cannot pass by reading nothing."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "sglang_gemma4_dflash"
COMPAT = "sglang_gemma4_dflash.compat"
REGISTRY = "sglang.srt.plugins.hook_registry"


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


def sglang_imports_outside(modules: dict[str, ast.Module], allowed: str, prefix: str) -> dict[str, list[str]]:
    """``{module: [imports of prefix]}`` of the modules not under ``allowed``."""
    offenders = {
        name: sorted(m for m in _imports(tree) if m == prefix or m.startswith(prefix + "."))
        for name, tree in modules.items()
        if name != allowed and not name.startswith(allowed + ".")
    }
    return {k: v for k, v in offenders.items() if v}


def _planted(modules: dict[str, ast.Module], name: str, source: str) -> dict[str, ast.Module]:
    return {**modules, name: ast.parse(source)}


def test_only_compat_imports_sglang():
    modules = _modules()
    assert sglang_imports_outside(modules, COMPAT, "sglang") == {}
    planted = _planted(modules, "sglang_gemma4_dflash.dflash.candidates", "def f():\n    from sglang.srt import x\n")
    assert sglang_imports_outside(planted, COMPAT, "sglang") == {
        "sglang_gemma4_dflash.dflash.candidates": ["sglang.srt", "sglang.srt.x"]
    }


def test_only_compat_registry_reaches_sglangs_hook_registry():
    modules = _modules()
    assert sglang_imports_outside(modules, f"{COMPAT}.registry", REGISTRY) == {}
    planted = _planted(modules, f"{COMPAT}.probe", f"from {REGISTRY} import HookRegistry\n")
    assert list(sglang_imports_outside(planted, f"{COMPAT}.registry", REGISTRY)) == [f"{COMPAT}.probe"]


def import_cycles(modules: dict[str, ast.Module]) -> list[list[str]]:
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

    return [c for name in modules if (c := cycle_from(name))]


def test_the_package_imports_form_no_cycle():
    modules = _modules()
    assert import_cycles(modules) == []
    planted = _planted(modules, f"{COMPAT}.symbols", "from sglang_gemma4_dflash.compat import probe\n")
    assert import_cycles(planted)


def uncalled_compat_functions(modules: dict[str, ast.Module]) -> list[str]:
    """``module.function`` of each public function of a ``compat`` module that nothing calls: another module names
    it through the module (``runtime.tp_group``) or imports it (``from ...runtime import tp_group``), or its own
    module uses it."""
    public = {
        (name, node.name)
        for name, tree in modules.items()
        if name.startswith(COMPAT + ".")
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }
    used = set()
    for name, tree in modules.items():
        aliases = {}  # local name -> compat module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == COMPAT:
                aliases.update({a.asname or a.name: f"{COMPAT}.{a.name}" for a in node.names})
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(COMPAT + "."):
                used.update((node.module, a.name) for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                used.add((aliases[node.value.id], node.attr))
            elif isinstance(node, ast.Name) and name.startswith(COMPAT + "."):
                used.add((name, node.id))
    return sorted(f"{module}.{function}" for module, function in public - used)


def test_every_public_compat_function_has_a_caller():
    modules = _modules()
    assert uncalled_compat_functions(modules) == []
    planted = _planted(modules, f"{COMPAT}.runtime", "def nobody_calls_this():\n    return 1\n")
    assert f"{COMPAT}.runtime.nobody_calls_this" in uncalled_compat_functions(planted)
