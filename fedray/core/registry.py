"""The registry of algorithms: built-in names, ``register``, plug-ins by reference or entry point.

Built-in algorithms are found like plug-ins: by the module that registers them, imported
when asked for (so a clustering run never imports the torch-based methods). Which module
registers which name is read from the modules' source (:func:`declared_names`), so adding an
algorithm is adding its module to ``fedray.algorithms``: nothing else names it.
"""
from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import logging
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from fedray.core.contract import Algorithm, Params
from fedray.core.errors import ConfigError, format_validation_error
from fedray.core.plugins import entry_points, first_line, is_reference, load_reference

T = TypeVar("T")

log = logging.getLogger(__name__)


def import_if_present(module: str) -> None:
    """Import ``module`` when it can be found (an optional part of fedray may be absent)."""
    if importlib.util.find_spec(module) is not None:
        importlib.import_module(module)


class Registry(Generic[T]):
    """Names of one kind (algorithms, partitions, federation builders, shard transforms, scenarios,
    models) mapped to the objects that implement them.

    Entries come from :meth:`register` (also a decorator) in the module that defines them. Such
    modules are imported on first use: ``lazy`` maps a name to the module that registers it,
    ``modules`` lists modules that register names of this kind (imported before a name is missed
    or all names are listed). Plug-ins register the same way, so a built-in entry has no
    privilege a user's lacks. ``scan`` names packages whose modules declare their entries with
    ``@register`` on a class with a literal ``name`` (:func:`declared_names`): their names join
    ``lazy`` when first needed, without importing any of those modules.

    Parameters
    ----------
    kind : str
        What an entry is, for messages ("partition", "scenario", ...).
    lazy : mapping of str to str, optional
    modules : iterable of str, optional
    scan : iterable of str, optional
    """

    def __init__(self, kind: str, *, lazy: Mapping[str, str] | None = None, modules: Iterable[str] = (),
                 scan: Iterable[str] = ()) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._given = dict(lazy or {})
        self._static_modules = tuple(modules)
        self._scan = tuple(scan)
        self._scanned: tuple[dict[str, str], tuple[str, ...]] | None = None

    def _declared(self) -> tuple[dict[str, str], tuple[str, ...]]:
        if self._scanned is None:
            names: dict[str, str] = {}
            unread: list[str] = []
            for package in self._scan:
                found, opaque = declared_names(package)
                names.update(found)
                unread.extend(opaque)
            self._scanned = (names, tuple(unread))
        return self._scanned

    @property
    def _lazy(self) -> dict[str, str]:
        return {**self._declared()[0], **self._given}

    @property
    def _modules(self) -> tuple[str, ...]:
        return (*self._static_modules, *self._declared()[1])

    def register(self, name: str, obj: T | None = None) -> Any:
        """``registry.register(name, obj)``, or ``@registry.register(name)`` above a definition."""
        if obj is not None:
            self._items[name] = obj
            return obj

        def deco(o: T) -> T:
            self._items[name] = o
            return o

        return deco

    def _load_all(self) -> None:
        for mod in dict.fromkeys([*self._lazy.values(), *self._modules]):
            import_if_present(mod)

    def get(self, name: str) -> T | None:
        """The entry for ``name`` (importing the module that registers it), or None."""
        if name not in self._items:
            if name in self._lazy:
                import_if_present(self._lazy[name])
            if name not in self._items and self._modules:
                for mod in self._modules:
                    import_if_present(mod)
        return self._items.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> T:
        obj = self.get(name)
        if obj is None:
            raise KeyError(name)
        return obj

    def names(self) -> list[str]:
        """Every registered name, sorted (imports every module that registers this kind)."""
        self._load_all()
        return sorted(self._items)

    def entries(self) -> dict[str, T]:
        self._load_all()
        return dict(sorted(self._items.items()))

    def builtin(self, name: str) -> bool:
        """Whether ``name`` is registered by a module fedray names (not yet imported, maybe)."""
        return name in self._lazy


def declared_names(package: str) -> tuple[dict[str, str], list[str]]:
    """``({name: module}, modules not read)`` for the modules of ``package``, from their source.

    A module declares an entry with a class decorated ``@register`` (or ``@<anything>.register``)
    whose body sets ``name = "..."`` (and optionally ``aliases = ("...", ...)``) to literals. The
    source is parsed, never imported, so asking for one name imports only its module. Modules
    whose source cannot be read (installed without it) or that register a class without a
    literal name are returned as the second item: they are imported when a name is missed.
    """
    if importlib.util.find_spec(package) is None:
        return {}, []
    path = getattr(importlib.import_module(package), "__path__", None)  # the package itself, not its modules
    if not path:
        return {}, []
    names: dict[str, str] = {}
    unread: list[str] = []
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        module = f"{package}.{info.name}"
        if info.ispkg:
            continue
        source = Path(getattr(info.module_finder, "path", "")) / f"{info.name}.py"
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
        except (OSError, SyntaxError, ValueError):
            unread.append(module)
            continue
        found, opaque = _registered_classes(tree)
        for name in found:
            names.setdefault(name, module)
        if opaque:
            unread.append(module)
    log.debug("%s: %d names declared in its modules (%d modules imported on a miss)", package, len(names),
              len(unread))
    return names, unread


def _registered_classes(tree: ast.Module) -> tuple[list[str], bool]:
    """The literal names and aliases of the module's ``@register`` classes, and whether one had none."""
    found: list[str] = []
    opaque = False
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any(_is_register(d) for d in node.decorator_list):
            continue
        attrs: dict[str, Any] = {}
        for stmt in node.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
                stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id in ("name", "aliases") and stmt.value is not None:
                try:
                    attrs[target.id] = ast.literal_eval(stmt.value)
                except ValueError:
                    attrs[target.id] = None
        if not isinstance(attrs.get("name"), str):
            opaque = True
            continue
        aliases = attrs.get("aliases", ())
        if not isinstance(aliases, (tuple, list)) or not all(isinstance(a, str) for a in aliases):
            opaque = True
            aliases = ()
        found.extend([attrs["name"], *aliases])
    return found, opaque


def _is_register(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Name) and decorator.id == "register") or \
        (isinstance(decorator, ast.Attribute) and decorator.attr == "register")


def near_names(name: Any, names: Iterable[str], cutoff: float = 0.6) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the names closest to ``name``, or an empty string."""
    near = difflib.get_close_matches(str(name), list(names), n=3, cutoff=cutoff)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


# Built-in algorithms: each module of fedray.algorithms declares its own (``@register`` on a class with a
# literal ``name``); a module is imported only when one of its names is asked for, so a clustering run
# never imports the torch-based methods (nor torch).
ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", scan=("fedray.algorithms",))


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding an algorithm to the registry under ``cls.name`` and its aliases."""
    check_algorithm_class(cls, cls.__qualname__, key="register")
    ALGORITHMS.register(cls.name, cls)
    for alias in cls.aliases:
        ALGORITHMS.register(alias, cls)
    return cls


def available_algorithms() -> dict[str, type[Algorithm]]:
    """Every built-in and registered algorithm (imports the built-in modules; none imports torch).

    Installed plug-ins are listed by :func:`fedray.core.plugins.entry_points` and loaded on use.
    """
    return ALGORITHMS.entries()


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class for ``name``: a registered or built-in key, ``package.module:ClassName``,
    or the name of an installed plug-in (entry-point group ``fedray.algorithms``).

    Raises
    ------
    ConfigError
        One line: unknown name (with the nearest known names), module not found,
        attribute missing, or not an :class:`Algorithm`.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"algorithm.name: expected a name or package.module:ClassName; got {name!r}")
    found = ALGORITHMS.get(name)
    if found is not None:
        return found
    if ":" in name:
        return ALGORITHMS.register(name, load_algorithm(name))
    installed = entry_points()
    if name in installed:
        return ALGORITHMS.register(name, load_entry_point(name))
    known = ALGORITHMS.names() + sorted(installed)
    hint = near_names(name, known)
    raise ConfigError(f"algorithm.name: unknown algorithm {name!r}{hint}; choose one of {', '.join(known)}, "
                      "or give your own class as package.module:ClassName")


def algorithm_reference(cls: type[Algorithm]) -> str | None:
    """The name under which ``cls`` is found again (:func:`get_algorithm`): its registered key, else
    ``package.module:ClassName`` when that imports the same class; None for a class no name reaches
    (e.g. one defined in ``__main__`` or inside a function)."""
    if ALGORITHMS.get(getattr(cls, "name", "")) is cls:
        return cls.name
    ref = f"{cls.__module__}:{cls.__qualname__}"
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return None
    try:
        return ref if load_algorithm(ref) is cls else None
    except ConfigError:
        return None


def make_params(cls: type[Algorithm], params: Mapping[str, Any] | None) -> Params:
    """Validate ``params`` against ``cls.Params`` with a message naming the key."""

    try:
        return cls.Params(**dict(params or {}))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"algorithm.params ({cls.name})",
                                                  model=cls.Params)) from None


def check_algorithm_class(obj: Any, ref: str, key: str = "algorithm.name") -> type:
    """Return ``obj`` if it is a concrete :class:`fedray.Algorithm` subclass, else raise ConfigError."""
    if not (inspect.isclass(obj) and issubclass(obj, Algorithm)):
        what = type(obj).__name__ if not inspect.isclass(obj) else f"class {obj.__qualname__}"
        raise ConfigError(f"{key}: {ref!r} is not a fedray.Algorithm subclass (it is a {what})")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise ConfigError(f"{key}: {ref!r} does not implement the required method(s) {missing}")
    return obj


def load_algorithm(ref: str, key: str = "algorithm.name") -> type:
    """The algorithm class named by ``"package.module:ClassName"``."""
    return check_algorithm_class(load_reference(ref, key), ref, key)


def load_entry_point(name: str, key: str = "algorithm.name") -> type:
    """Load the entry point ``name`` of the group ``fedray.algorithms``."""
    ep = entry_points()[name]
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - any error of the installed package
        raise ConfigError(f"{key}: the installed plug-in {name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {first_line(exc)}") from None
    return check_algorithm_class(obj, f"{name} = {ep.value}", key)


def plugin_modules(algorithm: str, model: Any = None, layers: Sequence[Any] = ()) -> list[str]:
    """Top-level modules, other than fedray, that a run's code comes from.

    The class of ``algorithm`` (by reference, entry point or registration), a model factory
    reference ``model`` (``algorithm.params.model``) and the user's ``layers``. The runtime ships these to the
    processes that host clients and the server.
    """
    names: list[str] = [get_algorithm(algorithm).__module__]
    if is_reference(model):
        names.append(model.partition(":")[0])
    for layer in layers:  # the user's layers: by reference, or objects from Python
        ref = getattr(layer, "name", None)
        by_ref = hasattr(layer, "params") and is_reference(ref)
        names.append(ref.partition(":")[0] if by_ref else type(layer).__module__)
    tops = (n.split(".")[0] for n in names)
    return list(dict.fromkeys(t for t in tops if t not in ("fedray", "__main__")))
