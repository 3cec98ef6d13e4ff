"""The architecture's rules that linters do not check, as one command anyone can run (``make lint`` runs it).

    python tools/arch.py           check; exit 1 listing every breach
    python tools/arch.py --stats   also print the figures the architecture notes compare

Rules (issue #32):
  * no file-level import cycle among Loom's modules: every ``import`` counts, at module level, inside a
    function, or under ``TYPE_CHECKING`` (a cycle held apart by a deferred import is still a cycle);
  * an import inside a function carries its reason on the same line or the line above, as ``# lazy: why``
    (a heavy or optional dependency such as Ray, or start-up time of a command that rarely needs it);
  * no function over 80 lines, no module over 800.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("controller", "api", "solver", "safety", "southbound", "labs")
MAX_FUNCTION = 80
MAX_MODULE = 800
REASON = "# lazy:"


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    lines: list[str]
    imports: set[str] = field(default_factory=set)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def load() -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_gen" in path.parts:
                continue
            text = path.read_text()
            mods[module_name(path)] = Module(module_name(path), path, ast.parse(text), text.splitlines())
    return mods


def targets(node: ast.Import | ast.ImportFrom, mod: Module, known: dict[str, Module]) -> list[str]:
    """The Loom modules an import statement loads directly (a name imported from a package that is a
    submodule counts as that submodule)."""
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = mod.name.split(".")
            if mod.path.name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = []
    for name in wanted:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != mod.name:
            found.append(name)
    return found


def has_reason(mod: Module, node: ast.stmt) -> bool:
    here = mod.lines[node.lineno - 1]
    above = mod.lines[node.lineno - 2] if node.lineno > 1 else ""
    return REASON in here or above.strip().startswith(REASON)


def function_imports(mod: Module) -> list[ast.Import | ast.ImportFrom]:
    seen: dict[int, ast.Import | ast.ImportFrom] = {}
    for fn in ast.walk(mod.tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    seen[id(node)] = node
    return list(seen.values())


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in mods:
        if root in index:
            continue
        work = [(root, iter(sorted(mods[root].imports)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(mods[child].imports))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
    return found


def any_count(mods: dict[str, Module]) -> int:
    """``Any`` in annotations (arguments, returns, annotated assignments, aliases built of them)."""
    count = 0
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            notes: list[ast.expr | None] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                every = args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
                notes += [a.annotation for a in every if a is not None] + [node.returns]
            elif isinstance(node, ast.AnnAssign):
                notes.append(node.annotation)
            for note in notes:
                if note is not None:
                    count += sum(isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(note))
    return count


def check(stats: bool) -> int:
    mods = load()
    breaches: list[str] = []
    inner = 0
    long_functions = 0
    for mod in mods.values():
        rel = mod.path.relative_to(ROOT)
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mod.imports.update(targets(node, mod, mods))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION:
                    long_functions += 1
                    breaches.append(f"{rel}:{node.lineno}: function {node.name} is {length} lines (max {MAX_FUNCTION})")
        if len(mod.lines) > MAX_MODULE:
            breaches.append(f"{rel}: module is {len(mod.lines)} lines (max {MAX_MODULE})")
        for node in function_imports(mod):
            inner += 1
            if not has_reason(mod, node):
                breaches.append(f"{rel}:{node.lineno}: import inside a function without '{REASON} <reason>'")
    for component in cycles(mods):
        breaches.append("import cycle: " + " -> ".join(component))
    for breach in sorted(breaches):
        print(breach)
    if stats:
        print(f"modules {len(mods)}; functions over {MAX_FUNCTION} lines {long_functions}; "
              f"imports inside functions {inner}; Any in annotations {any_count(mods)}; breaches {len(breaches)}")
    return 1 if breaches else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stats", action="store_true", help="print the figures the notes compare")
    sys.exit(check(parser.parse_args().stats))


if __name__ == "__main__":
    main()
