"""The op registry: every implementation of an op, core's own or a plugin's,
with what it applies to, and the dispatch that picks one per call.

An op is declared once (``define``) with the number of leading array
arguments whose dtypes key the dispatch. Implementations are registered with a
backend ("cuda", "triton", "cpu"), the dtypes they take (None: any), a minimum
SM, a priority (higher wins; a tie goes to the earlier registration, so core's
own wins ties) and an optional predicate on the arguments.

The dispatcher of an op looks the call's key (the dtypes of its key
arguments) up in a dict; only a miss resolves: it loads the plugins (once,
on the first miss of any op), applies the op's route, drops implementations
whose backend is unavailable here, whose SM is too new or whose dtypes do not
match, and caches the best one. When a predicate stands in front, the cached
entry tries the predicates in priority order on each call. Registering,
disabling a plugin or changing a route clears the caches. Nothing on the
call path touches pluggy.

Routes (``route``, ``routing``, ``PYGPUKIT_ROUTE=op=target,...``) restrict an
op to a backend, a plugin, or one implementation ("plugin:name"); they are
process-wide.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _dtypes
from ._errors import PluginError, RouteError

BACKENDS = ("cuda", "triton", "cpu")
CORE = "pygpukit"  # the plugin name of core's own implementations
_MAX_KEY = 3


@dataclass(frozen=True)
class Impl:
    """One implementation of an op."""

    op: str
    name: str  # "plugin:label", unique per op
    backend: str
    fn: Callable[..., Any]
    dtypes: frozenset[np.dtype] | None  # None: any
    min_sm: int
    priority: int
    predicate: Callable[..., bool] | None
    plugin: str
    order: int  # registration order, the tie-break

    def takes(self, key: tuple[Any, ...]) -> bool:
        """Whether every key argument is an array of a dtype this implementation takes."""
        return self.dtypes is None or all(k in self.dtypes for k in key)

    @property
    def dtype_names(self) -> str:
        return "any" if self.dtypes is None else ", ".join(sorted(str(d) for d in self.dtypes))


@dataclass
class _Op:
    name: str
    doc: str
    nkey: int
    plugin: str
    impls: list[Impl]
    cache: dict[Any, Callable[..., Any]]
    dispatch: Callable[..., Any] | None = None


@dataclass(frozen=True)
class ImplRow:
    """A row of ``gp.ops.table()``: an implementation and whether it runs here."""

    op: str
    impl: str
    backend: str
    dtypes: str
    min_sm: int
    priority: int
    plugin: str
    status: str  # "runs here", "runs here for float16, bfloat16", or why not


class _Chooser:
    """The cached entry of a key whose best implementations have predicates:
    the first (by priority) whose predicate accepts the call runs."""

    __slots__ = ("impls",)

    def __init__(self, impls: list[Impl]) -> None:
        self.impls = impls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for impl in self.impls:
            if impl.predicate is None or impl.predicate(*args, **kwargs):
                return _call(impl, args, kwargs)
        raise RouteError(f"{self.impls[0].op}: no implementation accepts these arguments; tried {', '.join(i.name for i in self.impls)}")


def _call(impl: Impl, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return impl.fn(*args, **kwargs)
    except Exception as e:
        _blame(e, impl)
        raise


def _blame(e: BaseException, impl: Impl | None) -> None:
    """Name the plugin in an exception raised by its implementation."""
    if impl is not None and impl.plugin != CORE and hasattr(e, "add_note"):
        e.add_note(f"(raised in {impl.op} implementation {impl.name!r} of plugin {impl.plugin!r})")


def _key_of(args: tuple[Any, ...], nkey: int) -> tuple[tuple[Any, ...], bool]:
    """(dtype-or-type of each key argument, whether all of them are arrays)."""
    key = tuple(getattr(a, "_dtype", type(a)) for a in args[:nkey])
    return key, len(key) == nkey and all(isinstance(k, np.dtype) for k in key)


def _on_stream(op: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` with its work queued on ``kwargs["stream"]`` (None: the current stream)."""
    stream = kwargs.pop("stream")
    if stream is None:
        return fn(*args, **kwargs)
    from .streams import Stream

    if not isinstance(stream, Stream):
        raise TypeError(f"{op}: stream must be a pygpukit.Stream or None, got {type(stream).__name__}")
    with stream:
        return fn(*args, **kwargs)


class OpRegistry:
    def __init__(self, load_plugins: bool = True) -> None:
        self._load_plugins = load_plugins  # False: a registry of its own, for tests
        # set by pygpukit.plugins.manager when it is imported (pygpukit's __init__ does):
        # loads the entry points and calls their hooks
        self.plugin_loader: Callable[[OpRegistry], None] | None = None
        self._ops: dict[str, _Op] = {}
        self._routes: dict[str, str] = {}
        self._lock = threading.RLock()
        self._order = itertools.count()
        self._loaded = False
        self._owner: dict[int, Impl] = {}  # id(fn) -> Impl, to name the plugin in errors
        # a plugin's implementations of an op another plugin defines, waiting for its
        # definition (plugins load in name order, and a definer may be disabled)
        self._pending: dict[str, list[Impl]] = {}
        self.models = ModelRegistry()
        self.benchmarks = Catalog("benchmark")
        self.commands = Catalog("command", reserved=("info", "doctor", "demo", "ops", "plugins", "top"))
        self.namespaces = Catalog("namespace")

    # -- declaring ops and implementations ----------------------------------
    def define(self, op: str, *, nkey: int, doc: str = "", plugin: str = CORE) -> Callable[..., Any]:
        """Declare ``op``; returns its dispatcher (also ``gp.ops.<op>``). ``nkey``
        (1 to 3): how many leading arguments key the dispatch by their dtypes."""
        if not op.isidentifier():
            raise PluginError(f"plugin {plugin!r}: op name {op!r} is not a Python identifier")
        if not 1 <= nkey <= _MAX_KEY:
            raise PluginError(f"plugin {plugin!r}: op {op!r}: nkey must be 1 to {_MAX_KEY}, got {nkey}")
        with self._lock:
            if op in self._ops:
                raise PluginError(f"plugin {plugin!r}: op {op!r} is already defined by {self._ops[op].plugin!r}")
            entry = self._ops[op] = _Op(op, doc, nkey, plugin, self._pending.pop(op, []), {})
            entry.dispatch = self._dispatcher(entry)
            self._invalidate()
        return entry.dispatch

    def register(
        self,
        op: str,
        fn: Callable[..., Any],
        *,
        backend: str,
        dtypes: Iterable[Any] | None = None,
        min_sm: int = 0,
        priority: int = 0,
        predicate: Callable[..., bool] | None = None,
        name: str | None = None,
        plugin: str = CORE,
    ) -> Impl:
        """Add an implementation of ``op`` (see the module docstring for the fields)."""
        where = f"plugin {plugin!r}"
        if backend not in BACKENDS:
            raise PluginError(f"{where}: backend {backend!r} of {op!r} is not one of {', '.join(BACKENDS)}")
        if not callable(fn) or (predicate is not None and not callable(predicate)):
            raise PluginError(f"{where}: the implementation of {op!r} and its predicate must be callable")
        dts = None if dtypes is None else frozenset(_dtypes.as_dtype(d) for d in dtypes)
        label = f"{plugin}:{name or getattr(fn, '__name__', backend)}"
        with self._lock:
            entry = self._ops.get(op)
            if entry is None and plugin == CORE:
                raise PluginError(f"{where}: op {op!r} is not defined; defined ops: {', '.join(sorted(self._ops))}")
            impls = self._pending.setdefault(op, []) if entry is None else entry.impls
            if any(i.name == label and i.backend == backend for i in impls):
                raise PluginError(f"{where}: {op!r} already has a {backend} implementation named {label!r}")
            impl = Impl(op, label, backend, fn, dts, int(min_sm), int(priority), predicate, plugin, next(self._order))
            impls.append(impl)
            self._owner[id(fn)] = impl
            self._invalidate()
        return impl

    def remove_plugin(self, plugin: str) -> None:
        """Drop every op and implementation ``plugin`` registered."""
        with self._lock:
            for entry in self._ops.values():
                entry.impls = [i for i in entry.impls if i.plugin != plugin]
            for op in [o for o, e in self._ops.items() if e.plugin == plugin]:
                self._pending[op] = self._ops.pop(op).impls  # the others' wait for a new definition
                self._routes.pop(op, None)
            self._pending = {op: [i for i in impls if i.plugin != plugin] for op, impls in self._pending.items()}
            self._owner = {k: v for k, v in self._owner.items() if v.plugin != plugin}
            self._invalidate()

    def _invalidate(self) -> None:
        for entry in self._ops.values():
            entry.cache.clear()

    # -- routes --------------------------------------------------------------
    def route(self, op: str, target: str | None) -> None:
        """Restrict ``op`` to ``target``: a backend ("cuda", "triton", "cpu"), a
        plugin name, or one implementation ("plugin:name"); None removes the route."""
        self.ensure_loaded()
        with self._lock:
            entry = self._entry(op)
            if target is None:
                self._routes.pop(op, None)
            else:
                self._check_route(entry, target)
                self._routes[op] = target
            self._invalidate()

    def routes(self) -> dict[str, str]:
        return dict(self._routes)

    @contextlib.contextmanager
    def routing(self, **routes: str | None) -> Iterator[None]:
        """Routes for the duration of a ``with`` block (process-wide), then the previous ones."""
        self.ensure_loaded()
        with self._lock:
            saved = dict(self._routes)
            try:
                for op, target in routes.items():
                    self.route(op, target)
            except BaseException:
                self._set_routes(saved)
                raise
        try:
            yield
        finally:
            self._set_routes(saved)

    def _set_routes(self, routes: dict[str, str]) -> None:
        with self._lock:
            self._routes = routes
            self._invalidate()

    def _check_route(self, entry: _Op, target: str) -> None:
        matching = [i for i in entry.impls if _matches(i, target)]
        if not matching:
            raise RouteError(
                f"cannot route {entry.name!r} to {target!r}: no such backend, plugin or implementation. {self._describe(entry)}"
            )
        usable = [i for i in matching if self._unavailable(i) is None]
        if not usable:
            why = "; ".join(f"{i.name}: {self._unavailable(i)}" for i in matching)
            raise RouteError(f"cannot route {entry.name!r} to {target!r} here ({why}). {self._describe(entry)}")

    def _apply_env_routes(self) -> None:
        spec = os.environ.get("PYGPUKIT_ROUTE", "").strip()
        for item in filter(None, (s.strip() for s in spec.split(","))):
            op, sep, target = item.partition("=")
            if not sep or not op.strip() or not target.strip():
                raise RouteError(f"PYGPUKIT_ROUTE: {item!r} is not op=target (e.g. PYGPUKIT_ROUTE=matmul=cuda,rms_norm=triton)")
            try:
                self.route(op.strip(), target.strip())
            except RouteError as e:
                raise RouteError(f"PYGPUKIT_ROUTE: {e}") from None

    # -- plugins ---------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Load the plugins and PYGPUKIT_ROUTE, once (the first miss of any op, or a listing)."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            if self._load_plugins and self.plugin_loader is not None:
                self.plugin_loader(self)
            self._apply_env_routes()

    # -- dispatch --------------------------------------------------------------
    def _dispatcher(self, entry: _Op) -> Callable[..., Any]:
        cache, nkey, miss, owner = entry.cache, entry.nkey, self._miss, self._owner

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            try:
                if nkey == 1:
                    fn = cache[args[0]._dtype]
                elif nkey == 2:
                    fn = cache[args[0]._dtype, args[1]._dtype]
                else:
                    fn = cache[args[0]._dtype, args[1]._dtype, args[2]._dtype]
            except (KeyError, AttributeError, IndexError):
                fn = miss(entry, args)
            try:
                if not kwargs:  # the fast path: an empty **kwargs costs a dict copy
                    return fn(*args)
                if "stream" in kwargs:
                    return _on_stream(entry.name, fn, args, kwargs)
                return fn(*args, **kwargs)
            except Exception as e:
                _blame(e, owner.get(id(fn)))
                raise

        dispatch.__name__ = dispatch.__qualname__ = entry.name
        dispatch.__doc__ = entry.doc
        return dispatch

    def _miss(self, entry: _Op, args: tuple[Any, ...]) -> Callable[..., Any]:
        self.ensure_loaded()
        key, cacheable = _key_of(args, entry.nkey)
        with self._lock:
            fn = self._resolve(entry, key)
            if cacheable:
                entry.cache[key[0] if entry.nkey == 1 else key] = fn
        return fn

    def _fits(self, entry: _Op, key: tuple[Any, ...]) -> list[Impl]:
        """The implementations that take ``key`` here, best first (RouteError if none)."""
        route = self._routes.get(entry.name)
        fits = [i for i in self._ranked(entry, route) if i.takes(key)]
        if not fits:
            names = ", ".join(str(k) for k in key)
            where = f"routed to {route!r} (PYGPUKIT_ROUTE or gp.route), which has" if route else "has"
            raise RouteError(f"{entry.name} {where} no implementation for ({names}) on this machine. {self._describe(entry)}")
        return fits

    def _resolve(self, entry: _Op, key: tuple[Any, ...]) -> Callable[..., Any]:
        fits = self._fits(entry, key)
        for n, impl in enumerate(fits):
            if impl.predicate is None:
                return impl.fn if n == 0 else _Chooser(fits[: n + 1])
        return _Chooser(fits)

    def _ranked(self, entry: _Op, route: str | None) -> list[Impl]:
        usable = [i for i in entry.impls if self._unavailable(i) is None and (route is None or _matches(i, route))]
        return sorted(usable, key=lambda i: (-i.priority, i.order))

    # -- what exists and what runs here --------------------------------------------
    def _unavailable(self, impl: Impl) -> str | None:
        """Why ``impl`` cannot run on this machine, or None."""
        from . import _runtime

        rt = _runtime.get()
        here = rt.backend
        if impl.backend == "cpu" and here != "cpu":
            return "cpu implementations serve the CPU backend, and this process runs on CUDA"
        if impl.backend in ("cuda", "triton") and here != "cuda":
            return f"backend {impl.backend!r} needs a CUDA GPU (running on the CPU backend)"
        if impl.backend == "triton" and not _triton_installed():
            return "backend 'triton' needs the triton package, which is not installed"
        if impl.min_sm and rt.sm < impl.min_sm:
            return f"needs SM {impl.min_sm} (this GPU is SM {rt.sm})"
        return None

    def _entry(self, op: str) -> _Op:
        entry = self._ops.get(op)
        if entry is None:
            raise RouteError(f"no op named {op!r}; ops: {', '.join(sorted(self._ops))}")
        return entry

    def _describe(self, entry: _Op) -> str:
        rows = [f"{i.name} (backend {i.backend}, dtypes {i.dtype_names})" for i in sorted(entry.impls, key=lambda i: i.order)]
        return f"Implementations of {entry.name}: " + ("; ".join(rows) if rows else "none")

    def which(self, op: str, *args: Any, **kwargs: Any) -> str:
        """The name of the implementation ``op(*args, **kwargs)`` would run, without running it."""
        return self.implementation(op, *args, **kwargs).name

    def implementation(self, op: str, *args: Any, **kwargs: Any) -> Impl:
        """The implementation ``op(*args, **kwargs)`` would run (its ``fn`` can be called directly)."""
        self.ensure_loaded()
        entry = self._entry(op)
        key, _ = _key_of(args, entry.nkey)
        with self._lock:
            fits = self._fits(entry, key)
        # by the ranked entries, not by function: one function may serve several
        return next(i for i in fits if i.predicate is None or i.predicate(*args, **kwargs))

    def op_names(self) -> list[str]:
        self.ensure_loaded()
        return sorted(self._ops)

    def dispatcher(self, op: str) -> Callable[..., Any]:
        self.ensure_loaded()
        dispatch = self._entry(op).dispatch
        assert dispatch is not None  # set by define
        return dispatch

    def table(self) -> list[ImplRow]:
        """Every op and implementation, and whether (and for which dtypes) it runs here."""
        self.ensure_loaded()
        rows = []
        with self._lock:
            for op in sorted(self._ops):
                entry = self._ops[op]
                route = self._routes.get(op)
                ranked = self._ranked(entry, route)
                for impl in sorted(entry.impls, key=lambda i: (-i.priority, i.order)):
                    status = self._status(impl, ranked, route)
                    rows.append(ImplRow(op, impl.name, impl.backend, impl.dtype_names, impl.min_sm, impl.priority, impl.plugin, status))
            for op, impls in sorted(self._pending.items()):
                for impl in impls:
                    status = "waiting: no installed, enabled plugin defines this op"
                    rows.append(ImplRow(op, impl.name, impl.backend, impl.dtype_names, impl.min_sm, impl.priority, impl.plugin, status))
        return rows

    def _status(self, impl: Impl, ranked: list[Impl], route: str | None) -> str:
        why = self._unavailable(impl)
        if why is not None:
            return f"not here: {why}"
        if route is not None and not _matches(impl, route):
            return f"routed away ({impl.op}={route})"
        above = ranked[: ranked.index(impl)]
        if any(a.dtypes is None and a.predicate is None for a in above):
            winner = next(a for a in above if a.dtypes is None and a.predicate is None)
            return f"outranked by {winner.name}"
        claimed: set[np.dtype] = set()
        for a in above:
            if a.predicate is None and a.dtypes is not None:
                claimed |= a.dtypes
        when = " when its predicate accepts the arguments" if impl.predicate is not None else ""
        if impl.dtypes is None:
            return "runs here" + (f" for dtypes other than {', '.join(sorted(map(str, claimed)))}" if claimed else "") + when
        mine = impl.dtypes - claimed
        if not mine:
            return "outranked by " + ", ".join(a.name for a in above if a.dtypes and a.dtypes & impl.dtypes)
        return "runs here" + ("" if mine == impl.dtypes else f" for {', '.join(sorted(map(str, mine)))}") + when


def _matches(impl: Impl, target: str) -> bool:
    return target in (impl.backend, impl.plugin, impl.name)


def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


@dataclass(frozen=True)
class ModelEntry:
    """A model architecture a plugin can load (``pygpukit_register_models``)."""

    name: str
    loader: Callable[..., Any]
    description: str
    plugin: str


@dataclass(frozen=True)
class BenchmarkEntry:
    """A benchmark suite (``pygpukit_register_benchmarks``): ``run(recorder, quick)``
    measures and records (see ``pygpukit.benchmark.harness``)."""

    name: str
    run: Callable[..., Any]
    description: str
    plugin: str


@dataclass(frozen=True)
class CommandEntry:
    """A ``pygpukit NAME ...`` command (``pygpukit_register_commands``): ``main(argv)``
    takes the remaining arguments and returns an exit status."""

    name: str
    main: Callable[[list[str]], Any]
    description: str
    plugin: str


@dataclass(frozen=True)
class NamespaceEntry:
    """An attribute of ``pygpukit`` served by a plugin's module (``gp.nn``),
    imported on first access (``pygpukit_register_namespaces``)."""

    name: str
    module: str
    description: str
    plugin: str


class Catalog:
    """Named entries that plugins add (models, benchmarks, commands, namespaces),
    each attributed to its plugin; ``kind`` names them in errors."""

    def __init__(self, kind: str, reserved: Iterable[str] = ()) -> None:
        self.kind = kind
        self.reserved = frozenset(reserved)  # names core uses itself
        self._entries: dict[str, Any] = {}

    def add(self, entry: Any) -> Any:
        """Add ``entry`` (a frozen dataclass with ``name`` and ``plugin``); its target was checked by the caller."""
        where = f"plugin {entry.plugin!r}"
        if not isinstance(entry.name, str) or not entry.name:
            raise PluginError(f"{where}: a {self.kind} name must be a non-empty str, got {entry.name!r}")
        if entry.name in self.reserved:
            raise PluginError(f"{where}: {self.kind} name {entry.name!r} is core's own")
        if entry.name in self._entries:
            raise PluginError(f"{where}: {self.kind} {entry.name!r} is already registered by {self._entries[entry.name].plugin!r}")
        self._entries[entry.name] = entry
        return entry

    def remove_plugin(self, plugin: str) -> None:
        self._entries = {k: v for k, v in self._entries.items() if v.plugin != plugin}

    def get(self, name: str) -> Any:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no {self.kind} named {name!r}; registered: {', '.join(sorted(self._entries)) or 'none'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entries(self) -> list[Any]:
        return sorted(self._entries.values(), key=lambda m: m.name)


class ModelRegistry(Catalog):
    def __init__(self) -> None:
        super().__init__("model")

    def register(self, name: str, loader: Callable[..., Any], *, description: str = "", plugin: str = CORE) -> ModelEntry:
        if not callable(loader):
            raise PluginError(f"plugin {plugin!r}: the loader of model {name!r} must be callable")
        return self.add(ModelEntry(name, loader, description, plugin))  # type: ignore[no-any-return]


REGISTRY = OpRegistry()


def builtin(op: str, fn: Callable[..., Any], *, nkey: int, doc: str | None = None) -> Callable[..., Any]:
    """Define core op ``op`` with ``fn`` as its implementation on both core
    backends (fn runs through the active runtime); returns the dispatcher."""
    dispatch = REGISTRY.define(op, nkey=nkey, doc=doc if doc is not None else (fn.__doc__ or ""))
    for backend in ("cuda", "cpu"):
        REGISTRY.register(op, fn, backend=backend, name=op)
    return dispatch
