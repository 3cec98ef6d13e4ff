"""The architecture's rules that linters do not check, as one command anyone can run (``make lint`` runs it).

    python tools/arch.py           check; exit 1 listing every breach
    python tools/arch.py --stats   also print the figures the architecture notes compare

Rules (issue #32):
  * no file-level import cycle among Loom's modules: every ``import`` counts, at module level, inside a
    function, or under ``TYPE_CHECKING`` (a cycle held apart by a deferred import is still a cycle);
  * an import inside a function carries its reason on the same line or the line above, as ``# lazy: why``
    (a heavy or optional dependency such as Ray, or start-up time of a command that rarely needs it);
  * no function over 80 lines, no module over 800;
  * no ``dict[str, Any]`` in a public signature between packages (:func:`public_dict_any`): a public
    function or method whose parameter or return annotation holds ``dict[str, Any]`` (or a module's alias
    of it, such as ``Doc``) and that another top-level package, or another subpackage of ``controller``,
    imports. A breach in every package (``TYPED``: their documents are models or JSON objects end to end);
    listed with ``--stats``.
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
#: the packages whose cross-package signatures may carry no ``dict[str, Any]`` (a breach there): all of them
TYPED = PACKAGES


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


def _is_dict_any(node: ast.AST) -> bool:
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "dict"
            and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2
            and all(isinstance(e, ast.Name) for e in node.slice.elts)
            and [e.id for e in node.slice.elts if isinstance(e, ast.Name)] == ["str", "Any"])


def _aliases(mod: Module) -> set[str]:
    """The module's names for ``dict[str, Any]`` (``Doc = dict[str, Any]``, ``Doc: TypeAlias = ...``)."""
    found = set()
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if _is_dict_any(node.value):
                found.add(node.targets[0].id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if _is_dict_any(node.value):
                found.add(node.target.id)
    return found


def _holds_dict_any(note: ast.expr | None, aliases: set[str]) -> bool:
    if note is None:
        return False
    if isinstance(note, ast.Constant) and isinstance(note.value, str):
        try:
            note = ast.parse(note.value, mode="eval").body
        except SyntaxError:
            return False
    return any(_is_dict_any(n) or (isinstance(n, ast.Name) and n.id in aliases) for n in ast.walk(note))


def unit(name: str) -> str:
    """The package a module belongs to for the cross-package rule: ``controller``'s subpackages (and
    top-level modules) count apart, every other top-level package is one."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "controller" and len(parts) > 1 else parts[0]


def _resolve(base: str, mod: Module, level: int) -> str:
    if not level:
        return base
    package = mod.name.split(".")
    if mod.path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - level + 1]
    return ".".join(package + ([base] if base else []))


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def imported_names(mods: dict[str, Module]) -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the modules that import ``name`` from ``module`` (``from module import name``,
    or ``module.name`` through an imported module), re-exports followed to where the name is defined."""
    reexports: dict[str, dict[str, tuple[str, str]]] = {}
    used: dict[tuple[str, str], set[str]] = {}

    def use(target: str, name: str, importer: str) -> None:
        for _ in range(5):  # follow a package's re-export to the module defining the name
            nxt = reexports.get(target, {}).get(name)
            if nxt is None:
                break
            target, name = nxt
        used.setdefault((target, name), set()).add(importer)

    bindings: dict[str, dict[str, str]] = {}
    for mod in mods.values():
        local: dict[str, str] = {}
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", mod, node.level)
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in mods:
                        local[a.asname or a.name] = full
                    elif base in mods:
                        reexports.setdefault(mod.name, {})[a.asname or a.name] = (base, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES:
                        local[a.asname or a.name] = a.name if a.asname else a.name.split(".")[0]
        bindings[mod.name] = local
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", mod, node.level)
                for a in node.names:
                    if base in mods and f"{base}.{a.name}" not in mods:
                        use(base, a.name, mod.name)
            elif isinstance(node, ast.Attribute):
                dotted = _dotted(node)
                if dotted is None:
                    continue
                head, _, rest = dotted.partition(".")
                target = bindings[mod.name].get(head)
                if target is None or not rest:
                    continue
                names = f"{target}.{rest}".split(".")
                for cut in range(len(names) - 1, 0, -1):
                    if ".".join(names[:cut]) in mods:
                        use(".".join(names[:cut]), names[cut], mod.name)
                        break
    return used


def public_dict_any(mods: dict[str, Module]) -> list[tuple[str, str]]:
    """The public functions and methods with ``dict[str, Any]`` (or an alias of it) in their signature that
    another package imports (see the module docstring), as (module, ``path:line: name``)."""
    used = imported_names(mods)
    aliases = {name: _aliases(mod) for name, mod in mods.items()}
    for mod in mods.values():  # an alias imported from the module that defines it is one too
        for node in mod.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                base = _resolve(node.module, mod, node.level)
                aliases[mod.name] |= {a.asname or a.name for a in node.names if a.name in aliases.get(base, ())}

    def crosses(module: str, name: str) -> bool:
        return any(unit(importer) != unit(module) for importer in used.get((module, name), ()))

    def flagged(fn: ast.FunctionDef | ast.AsyncFunctionDef, known: set[str]) -> bool:
        args = fn.args
        every = args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
        notes = [a.annotation for a in every if a is not None] + [fn.returns]
        return any(_holds_dict_any(n, known) for n in notes)

    found: list[tuple[str, str]] = []
    for mod in mods.values():
        rel = mod.path.relative_to(ROOT)
        for node in mod.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not node.name.startswith("_") and crosses(mod.name, node.name) and flagged(node, aliases[mod.name]):
                    found.append((mod.name, f"{rel}:{node.lineno}: {node.name}"))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_") and crosses(mod.name, node.name):
                for fn in node.body:
                    if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.name.startswith("_")
                            and flagged(fn, aliases[mod.name])):
                        found.append((mod.name, f"{rel}:{fn.lineno}: {node.name}.{fn.name}"))
    return found


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
    signatures = public_dict_any(mods)
    breaches += [f"{where}: dict[str, Any] in a public signature another package imports"
                 for module, where in signatures if unit(module).startswith(TYPED)]
    for breach in sorted(breaches):
        print(breach)
    if stats:
        for _module, where in sorted(signatures, key=lambda s: s[1]):
            print(f"dict[str, Any] across packages: {where}")
        print(f"modules {len(mods)}; functions over {MAX_FUNCTION} lines {long_functions}; "
              f"imports inside functions {inner}; Any in annotations {any_count(mods)}; "
              f"dict[str, Any] public cross-package signatures {len(signatures)}; breaches {len(breaches)}")
    return 1 if breaches else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stats", action="store_true", help="print the figures the notes compare")
    sys.exit(check(parser.parse_args().stats))


if __name__ == "__main__":
    main()
