"""House rules of the package, read from its source with :mod:`ast` (nothing here imports fedray).

The package is fedray/ plus the folders pyproject's ``package-dir`` maps into it: actors/ is
``fedray.actors`` and algorithms/ is ``fedray.algorithms``. Its modules stand on floors, bottom to top::

    core, plots, data, nn, algorithms, runtime (+ fedray.actors.client_actor), layers,
    loop (+ fedray.actors.server_actor), api, analysis, tools, public

where ``public`` is the top-level facade modules (fedray/__init__.py, fedray/estimators.py, fedray/tune.py,
fedray/supervised.py). A module may import from its own floor and the floors below it.

An import is an edge to the internal module it names: ``from a.b import c`` goes to ``a.b.c`` when
that is a module, otherwise to ``a.b``; relative imports are resolved. Every import statement counts,
wherever it stands (module level, under ``TYPE_CHECKING``, inside functions). Calls such as
``importlib.import_module`` (plug-in loading) are not import statements and are not read.
"""
from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# pyproject.toml [tool.setuptools] package-dir: package name -> folder
ROOTS = {"fedray": REPO / "fedray", "fedray.actors": REPO / "actors", "fedray.algorithms": REPO / "algorithms"}

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

FLOORS = ("core", "plots", "data", "nn", "algorithms", "runtime", "layers", "loop", "api", "analysis", "tools",
          "public")
PUBLIC = frozenset({"fedray", "fedray.estimators", "fedray.supervised", "fedray.tune"})
# fedray.actors has no floor of its own: each actor sits with what it wraps; the package's
# __init__ (a docstring) sits on the lower of the two.
ACTOR_FLOORS = {"fedray.actors": "runtime", "fedray.actors.client_actor": "runtime",
                "fedray.actors.server_actor": "loop"}

# Libraries an internal module may import inside a function (imported on first use on purpose).
LAZY_LIBRARIES = {
    "torch": "optional (the nn extra); clustering runs must never import it",
    "ray": "slow to import; only the ray backend and cluster tools need it (the actors import it at the top)",
    "numba": "optional speed-up; compiling on import would slow every start",
    "matplotlib": "only figures need it, and it is slow to import",
    "pandas": "slow to import (about 0.4 s); client actors of clustering runs never need it",
    "pyarrow": "slow to import; only tables and outputs need it",
    "sklearn": "slow to import; only data loaders, baselines and estimators need it",
    "scipy": "slow to import; only the server's metrics and some baselines need it, never a client actor",
    "cryptography": "only secure aggregation needs it (in the clients of such runs)",
    "psutil": "memory measurements only",
    "dp_accounting": "optional (the privacy extra): only the epsilon of a run with privacy.dp needs it",
    "grpc": "probing a Ray cluster only (installed with ray[default])",
    "jsonschema": "optional: the cluster-file schema check runs where it is installed",
    "networkx": "optional: the community graph figure only",
    "tqdm": "progress bars only",
    "cycler": "matplotlib's, with the figure style",
    "PIL": "Pillow: only images:FOLDER reads image files with it",
    "tensorboard": "optional (the tracking extra): only runs with output.trackers write event files",
    "mlflow": "optional (the tracking extra) and slow to import: only runs with output.trackers log to it",
}

# (importing module, imported module) -> why the fedray module is imported inside a function. Only for
# torch or ray: the imported module imports one of them when it is imported, the importer must not (both
# checked below).
_TORCH_FREE = "listing, describing and config checks import it; torch only when a client trains"
LAZY_FEDRAY_IMPORTS: dict[tuple[str, str], str] = {
    ("fedray.nn.supervised", "fedray.nn.train"): "the public supervised base: " + _TORCH_FREE,
    ("fedray.nn.supervised_client", "fedray.nn.train"): "client hooks of the supervised base: " + _TORCH_FREE,
    ("fedray.nn.supervised_client", "fedray.nn.batched"): "client hooks of the supervised base: " + _TORCH_FREE,
    ("fedray.algorithms.baselines", "fedray.nn.train"): "fedavg/local/ifca/cfl/flhc: " + _TORCH_FREE,
    ("fedray.algorithms.flacc_client", "fedray.nn.train"): "flacc's gradient client: " + _TORCH_FREE,
    ("fedray.algorithms.fedcref_client", "fedray.nn.autoencoder"): "fedcref's client: " + _TORCH_FREE,
    ("fedray.algorithms.fedcref_client", "fedray.nn.batched"): "fedcref's client: " + _TORCH_FREE,
    ("fedray.algorithms.fedcref_client", "fedray.nn.train"): "fedcref's client: " + _TORCH_FREE,
    ("fedray.algorithms.fedcref_report", "fedray.nn.autoencoder"): "fedcref's report: " + _TORCH_FREE,
    ("fedray.runtime.startup", "fedray.actors.client_actor"): "the Ray actor class: ray only when the ray "
                                                                     "backend starts",
    ("fedray.api.runner", "fedray.actors.server_actor"): "the Ray actor class: ray only when the ray backend runs",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str | None  # the internal module the import is an edge to, None for other packages
    name: str  # the imported name as written (``torch.nn``, ``fedray.core.stats.Stats``, ``.stats``)
    function: str | None  # the enclosing function's qualified name, None at module or class level
    statement: str  # the whole statement, for messages

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    n_lines: int


@cache
def modules() -> dict[str, Module]:
    found = {}
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join([package, *parts])
            if name in found:  # fedray/actors/ or fedray/algorithms/ next to the mapped folders
                raise AssertionError(f"{name} is both {found[name].path} and {path}")
            text = path.read_text(encoding="utf-8")
            found[name] = Module(name, path, is_package, ast.parse(text, filename=str(path)),
                                 len(text.splitlines()))
    return found


def _internal(name: str) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of the package's modules."""
    mods = modules()
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


class _ImportReader(ast.NodeVisitor):
    def __init__(self, module: Module):
        self.module = module
        self.scope: list[str] = []  # enclosing classes and functions
        self.functions = 0
        self.found: list[Import] = []

    def _add(self, node: ast.stmt, target: str | None, name: str) -> None:
        function = ".".join(self.scope) if self.functions else None
        self.found.append(Import(self.module.name, node.lineno, target, name, function, ast.unparse(node)))

    def _scoped(self, node: ast.AST, is_function: bool) -> None:
        self.scope.append(node.name)  # type: ignore[attr-defined]
        self.functions += is_function
        self.generic_visit(node)
        self.functions -= is_function
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, False)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, True)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, _internal(alias.name), alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.name if self.module.is_package else self.module.name.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = f"{base}.{node.module}" if node.module else base
            written = "." * node.level + (node.module or "")
        else:
            source = written = node.module or ""
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            target = sub if sub in modules() else _internal(source)
            self._add(node, target, written + alias.name if written.endswith(".") else f"{written}.{alias.name}")


@cache
def imports() -> tuple[Import, ...]:
    found: list[Import] = []
    for module in modules().values():
        reader = _ImportReader(module)
        reader.visit(module.tree)
        found += reader.found
    return tuple(found)


def floor_of(name: str) -> str | None:
    if name in PUBLIC:
        return "public"
    if name in ACTOR_FLOORS:
        return ACTOR_FLOORS[name]
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS[:-1] else None


def _edges() -> dict[str, dict[str, Import]]:
    """module -> {imported module: its first import} over the package's own modules (no self-edges)."""
    graph: dict[str, dict[str, Import]] = {name: {} for name in modules()}
    for imp in imports():
        if imp.target is not None and imp.target != imp.module:
            graph[imp.module].setdefault(imp.target, imp)
    return graph


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's algorithm; the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(graph: dict[str, dict[str, Import]], start: str, members: set[str]) -> list[Import]:
    """The imports of a shortest cycle from ``start`` back to itself inside one component."""
    came: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt, imp in sorted(graph[node].items()):
            if nxt not in members or nxt in came:
                continue
            came[nxt] = imp
            if nxt == start:
                path = [imp]
                while path[-1].module != start:
                    path.append(came[path[-1].module])
                return path[::-1]
            queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def _fail_if(problems, header: str) -> None:
    if problems:
        pytest.fail(f"{header}:\n" + "\n".join(problems), pytrace=False)


def test_modules_are_found_and_each_stands_on_a_floor():
    """The walk finds the package (fedray/, actors/, algorithms/) and every module has a floor."""
    mods = modules()
    assert {"fedray", "fedray.core.contract", "fedray.actors.client_actor", "fedray.algorithms.kmeans"} <= set(mods)
    without = sorted(name for name in mods if floor_of(name) is None)
    _fail_if(without, "modules on no floor (move them into a floor's folder, or name their floor here)")


def test_no_import_cycles():
    """No two modules import each other, directly or through others, counting every import statement
    (inside functions and under TYPE_CHECKING too)."""
    graph = _edges()
    problems = []
    for component in _strongly_connected(graph):
        cycle = _shortest_cycle(graph, component[0], set(component))
        steps = " -> ".join(f"{imp.module} (line {imp.line})" for imp in cycle) + f" -> {component[0]}"
        problems.append(f"cycle among {len(component)} modules [{', '.join(component)}], e.g. {steps}")
    _fail_if(problems, f"{len(problems)} import cycle(s)")


def test_no_module_over_500_lines():
    """Every module of the package has at most MAX_MODULE_LINES lines."""
    long = sorted(((m.n_lines, name, m.path.relative_to(REPO)) for name, m in modules().items()
                   if m.n_lines > MAX_MODULE_LINES), reverse=True)
    _fail_if([f"{path} ({name}): {n} lines" for n, name, path in long], f"modules over {MAX_MODULE_LINES} lines")


def test_no_function_over_60_lines():
    """Every function and method (``end_lineno - lineno + 1`` of its ``def``) has at most MAX_FUNCTION_LINES lines."""
    long = []
    for name, module in modules().items():
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append((n, f"{module.path.relative_to(REPO)}:{node.lineno} {node.name}() in {name}"))
    long.sort(reverse=True)
    _fail_if([f"{where}: {n} lines" for n, where in long], f"{len(long)} functions over {MAX_FUNCTION_LINES} lines")


def test_imports_go_to_the_same_floor_or_below():
    """No module imports a module of a higher floor (every import statement counts)."""
    rank = {floor: i for i, floor in enumerate(FLOORS)}
    upward = {}
    for imp in imports():
        if imp.target is None:
            continue
        low, high = floor_of(imp.module), floor_of(imp.target)
        if low is not None and high is not None and rank[high] > rank[low]:
            upward[imp.where, imp.target] = (f"{imp.where} ({low}) imports {imp.target} ({high})"
                                             + (f" inside {imp.function}()" if imp.function else ""))
    _fail_if(list(upward.values()), f"{len(upward)} imports go to a higher floor")


def _imports_torch_on_import(name: str, seen: set[str] | None = None) -> bool:
    """Whether importing module ``name`` imports torch or ray (its module-level imports, followed through the
    package)."""
    seen = set() if seen is None else seen
    seen.add(name)
    for imp in imports():
        if imp.module != name or imp.function is not None:
            continue
        if imp.target is None and imp.name.split(".")[0] in ("torch", "ray"):
            return True
        if imp.target is not None and imp.target not in seen and _imports_torch_on_import(imp.target, seen):
            return True
    return False


def test_internal_modules_import_at_module_level():
    """Inside a function an internal module (any but the public facades) imports only LAZY_LIBRARIES,
    and fedray modules only as LAZY_FEDRAY_IMPORTS allows."""
    lazy = {}
    for imp in imports():
        if imp.function is None or imp.module in PUBLIC:
            continue
        if imp.target is None and imp.name.split(".")[0] in LAZY_LIBRARIES:
            continue
        if imp.target is not None and (imp.module, imp.target) in LAZY_FEDRAY_IMPORTS:
            continue
        lazy[imp.where] = f"{imp.where} inside {imp.function}(): {imp.statement}"
    _fail_if(list(lazy.values()), f"{len(lazy)} import statements inside functions of internal modules")


def test_lazy_fedray_imports_are_needed_for_torch():
    """Each LAZY_FEDRAY_IMPORTS pair still occurs inside a function, its imported module imports torch (or
    ray) when imported, and its importing module does not."""
    occurring = {(imp.module, imp.target) for imp in imports() if imp.function is not None}
    problems = []
    for importer, imported in sorted(LAZY_FEDRAY_IMPORTS):
        if (importer, imported) not in occurring:
            problems.append(f"{importer} no longer imports {imported} inside a function: drop the entry")
        if not _imports_torch_on_import(imported):
            problems.append(f"{imported} does not import torch or ray when imported: {importer} can import it at "
                            "the top")
        if _imports_torch_on_import(importer):
            problems.append(f"{importer} imports torch or ray when imported anyway: no reason to import {imported} "
                            "lazily")
    _fail_if(problems, "LAZY_FEDRAY_IMPORTS entries without a torch or ray reason")


# --- lean processes -------------------------------------------------------------------------------------
#: Packages a process loads only where it uses them: not on ``import fedray``, and not in a client actor
#: (whose process imports fedray.actors.client_actor) unless its run needs them: cryptography for secure
#: aggregation, numba at the first fused pass worth compiling (fedray.core.kernels).
HEAVY = ("pandas", "pyarrow", "scipy", "cryptography", "matplotlib", "numba")
#: Modules every client actor imports (the actor class; the facade, which Python imports first) and the
#: modules of a clustering run's client functions.
LEAN = ("fedray", "fedray.actors.client_actor", "fedray.algorithms.kmeans", "fedray.algorithms.fcm",
        "fedray.algorithms.fedkmeans")


def _heavy_chain(name: str, seen: set[str]) -> list[Import] | None:
    """The module-level imports by which importing ``name`` imports a HEAVY package, or None."""
    seen.add(name)
    for imp in imports():
        if imp.module != name or imp.function is not None:
            continue
        if imp.target is None and imp.name.split(".")[0] in HEAVY:
            return [imp]
        if imp.target is not None and imp.target not in seen:
            rest = _heavy_chain(imp.target, seen)
            if rest is not None:
                return [imp, *rest]
    return None


def test_lean_modules_import_no_heavy_package_at_module_level():
    """No module-level import chain from LEAN reaches a HEAVY package (read from the source): such
    imports go inside the functions that use them, or behind the facade's lazy names."""
    problems = []
    for name in LEAN:
        chain = _heavy_chain(name, set())
        if chain is not None:
            problems.append(f"importing {name} imports {chain[-1].name.split('.')[0]}: "
                            + " -> ".join(f"{imp.where} `{imp.statement}`" for imp in chain))
    _fail_if(problems, "lean modules that import heavy packages when imported")


def test_a_fresh_interpreter_importing_the_client_actor_loads_no_heavy_package():
    """The same, as Python does it (dynamic imports included): a fresh interpreter that imports LEAN
    has none of HEAVY in ``sys.modules``."""
    import json
    import subprocess
    import sys

    code = (f"import importlib, json, sys\nfor m in {list(LEAN)!r}:\n    importlib.import_module(m)\n"
            f"print(json.dumps([p for p in {list(HEAVY)!r} if p in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], "a fresh interpreter importing LEAN loaded these"


# --- references in docs and docstrings ------------------------------------------------------------------
#: A dotted name of the package (``fedray.runtime.host.ClientHost.run``) or a file of the repository
#: (``fedray/runtime/host.py``, ``benchmarks/README.md``) as docs and docstrings write them.
_DOTTED = re.compile(r"(?<![\w./-])(fedray(?:\.\w+)+)")
_FILE = re.compile(r"(?<![\w./-])((?:fedray|actors|algorithms|benchmarks|docs|experiments|examples|tests|"
                   r"cluster_configs|notebooks|reproductions)/[\w/.-]*\w\.(?:py|md|yaml|ipynb))")


def _defined(tree: ast.AST) -> set[str]:
    """Names a module (or a class body) defines at its top: classes, functions, assignments, imports."""
    out: set[str] = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
        for sub in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try)) else ():
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split(".")[0] for a in sub.names}
    return out


def _resolves(ref: str) -> bool:
    """Whether ``fedray.a.b.Name.member`` names a module, a name it defines, and a member of that class."""
    mods, parts = modules(), ref.split(".")
    for i in range(len(parts), 0, -1):
        module = mods.get(".".join(parts[:i]))
        if module is None:
            continue
        rest = parts[i:]
        if not rest:
            return True
        text = module.path.read_text(encoding="utf-8")
        if module.name == "fedray" and f'"{rest[0]}"' in text:  # the facade's lazy names
            return True
        if rest[0] not in _defined(module.tree):
            return False
        cls = next((n for n in module.tree.body if isinstance(n, ast.ClassDef) and n.name == rest[0]), None)
        return len(rest) < 2 or cls is None or rest[1] in _defined(cls)
    return False


def _texts() -> list[tuple[str, str]]:
    """(where, text) of every docstring of the package and every page of docs/ and the README."""
    out = []
    for module in modules().values():
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    out.append((f"{module.path.relative_to(REPO)}:{getattr(node, 'lineno', 1)}", doc))
    # docs/notes/ holds dated investigation logs, which name the tree as it was on their date; the lab's
    # READMEs and the benchmarks' page are current docs
    pages = [p for p in sorted((REPO / "docs").rglob("*.md")) if "notes" not in p.relative_to(REPO / "docs").parts]
    pages += sorted((REPO / "reproductions").rglob("*.md")) + [REPO / "benchmarks" / "README.md", REPO / "README.md"]
    for page in pages:
        out.append((str(page.relative_to(REPO)), page.read_text(encoding="utf-8")))
    return out


def _entry_point_groups() -> set[str]:
    """The entry-point groups the package reads (``NAME_GROUP = "fedray.…"`` constants): names, not modules."""
    out = set()
    for module in modules().values():
        for node in module.tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Name) and t.id.endswith("GROUP") for t in node.targets)):
                out.add(node.value.value)
    return out


def test_docs_and_docstrings_name_modules_and_files_that_exist():
    """Every ``fedray.x.y`` name in a docstring, docs/ or the README resolves (module, top-level name,
    member of a class, or an entry-point group the package reads), and every repository file they name
    exists (``fedray/actors/`` and ``fedray/algorithms/`` are read as the folders pyproject maps them from)."""
    problems = []
    groups = _entry_point_groups()
    for where, text in _texts():
        for ref in sorted(set(_DOTTED.findall(text))):
            if ref not in groups and not _resolves(ref):
                problems.append(f"{where}: {ref} names nothing in the package")
        for path in sorted(set(_FILE.findall(text))):
            real = re.sub(r"^fedray/(actors|algorithms)/", r"\1/", path)
            if not (REPO / real).exists():
                problems.append(f"{where}: {path} does not exist")
    _fail_if(problems, f"{len(problems)} references to modules or files that are not there")


# --- private names ------------------------------------------------------------------------------------
#: Private names (a leading underscore) that one module imports from another, counted over the package.
#: The count may only fall: where modules share internals, make the names public or move them together.
MAX_PRIVATE_CROSSINGS = 0
#: Floors whose modules neither import nor give away a private name.
NO_PRIVATE_CROSSINGS = ("runtime", "loop")


def _private_crossings() -> list[Import]:
    out = []
    for imp in imports():
        last = imp.name.rsplit(".", 1)[-1]
        if imp.target is not None and imp.target != imp.module and last.startswith("_") and not last.startswith("__"):
            out.append(imp)
    return out


def test_private_names_do_not_cross_into_or_out_of_the_runtime_and_the_loop():
    problems = [f"{imp.where} imports {imp.name.rsplit('.', 1)[-1]} from {imp.target}" for imp in _private_crossings()
                if floor_of(imp.module) in NO_PRIVATE_CROSSINGS or floor_of(imp.target) in NO_PRIVATE_CROSSINGS]
    _fail_if(problems, "private names crossing a module boundary of the runtime or the loop")


def test_private_names_crossing_module_boundaries_only_become_fewer():
    crossing = _private_crossings()
    assert len(crossing) <= MAX_PRIVATE_CROSSINGS, (
        f"{len(crossing)} private names cross module boundaries (at most {MAX_PRIVATE_CROSSINGS}); the new ones: "
        + "; ".join(f"{imp.where} {imp.statement}" for imp in crossing))


def test_the_driver_of_a_run_without_secure_aggregation_loads_no_cryptography():
    """A fresh interpreter that imports what a run's driver imports (the session, the run functions, the
    privacy layer itself) has not imported cryptography: the keys, the PRG and the share encryption import
    it when a run with secure aggregation first uses them."""
    import subprocess
    import sys

    code = ("import sys\nimport fedray.api.session, fedray.api.run, fedray.layers.privacy\n"
            "print('cryptography' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False", "importing the session loaded cryptography"
