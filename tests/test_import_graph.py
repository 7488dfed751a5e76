"""No layer imports upward, no module cycles, kernel_ext never imports rlm (docs/architecture.md).

Imports are read with `ast` from every module, function-level and TYPE_CHECKING imports
included: a cycle hidden in a function body is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# higher number = higher layer; a module may import its own layer or lower ones
LAYERS: list[tuple[str, int]] = [
    ("rlm.cli", 7), ("rlm.magic", 7), ("rlm.__main__", 7), ("rlm.demo", 7),
    ("rlm.app", 6),
    ("rlm.agent", 5), ("rlm.notebook", 5),
    ("rlm.compaction", 4), ("rlm.longrun", 4), ("rlm.memory", 4),
    ("rlm.protocols", 3), ("rlm.chain", 3), ("rlm.session", 3),
    ("rlm.llm", 2),
    ("rlm.kernel", 1),
    ("rlm.config", 0), ("rlm.errors", 0), ("rlm.paths", 0), ("rlm.events", 0),
    ("rlm.secrets", 0), ("rlm.prompts", 0), ("rlm.trust", 0),
    ("rlm.spelling", 0), ("rlm.durability", 0), ("rlm.safeio", 0), ("rlm.outcome", 0),
    ("rlm.ledger", 2),
]


def layer(module: str) -> int:
    if module == "rlm":  # the package root: __version__ and the %load_ext entry point
        return 0
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return level
    raise AssertionError(f"{module} has no layer: add it to LAYERS (and docs/architecture.md)")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every rlm / kernel_ext module `path` imports, anywhere in the file."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from rlm.agent import loop` imports rlm.agent.loop when that is a module
            names = [base]
            for a in node.names:
                sub = f"{base}.{a.name}"
                if (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or \
                        (ROOT / Path(*sub.split(".")) / "__init__.py").exists():
                    names.append(sub)
        else:
            continue
        out.update(n for n in names if n.split(".")[0] in ("rlm", "kernel_ext"))
    out.discard(mod)
    return out


def graph() -> dict[str, set[str]]:
    files = sorted((ROOT / "rlm").rglob("*.py")) + sorted((ROOT / "kernel_ext").rglob("*.py"))
    return {module_name(p): imports(p) for p in files}


def test_no_layer_imports_upward():
    bad = []
    for mod, deps in graph().items():
        if mod.startswith("kernel_ext"):
            continue
        if mod == "rlm":  # the root package only forwards to higher layers lazily
            continue
        for dep in deps:
            if dep.startswith("kernel_ext"):
                continue  # rlm may use kernel_ext's wire format and helpers
            if layer(dep) > layer(mod):
                bad.append(f"{mod} (layer {layer(mod)}) imports {dep} (layer {layer(dep)})")
    assert not bad, "\n".join(sorted(bad))


def test_kernel_ext_never_imports_rlm():
    bad = [f"{m} imports {d}" for m, deps in graph().items() if m.startswith("kernel_ext")
           for d in deps if d.split(".")[0] == "rlm"]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_between_modules():
    g = graph()
    modules = {m for m in g if m.startswith("rlm.")}
    # a package's __init__ re-exporting its modules is not a cycle with them
    edges = {m: {d for d in g[m] if d in modules and not m.startswith(d + ".")}
             for m in modules}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("mod", ["rlm.cli.commands", "rlm.longrun.worker", "rlm.agent.loop"])
def test_the_checker_sees_function_level_imports(mod):
    """The graph includes imports inside function bodies (a checker that missed them could
    never fail on the cycles this test exists for)."""
    path = ROOT / Path(*mod.split("."))
    src = ast.parse(path.with_suffix(".py").read_text())
    nested = {n.module for f in ast.walk(src) if isinstance(f, ast.FunctionDef)
              for n in ast.walk(f) if isinstance(n, ast.ImportFrom) and n.module}
    assert nested & graph()[mod] == {m for m in nested if m.startswith(("rlm", "kernel_ext"))}
