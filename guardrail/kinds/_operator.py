"""Operator ids: values of a kind the deploying team knows before a conversation starts.

Plan codes from the business's catalog, SKUs, fare classes, airport codes,
policy ids: no tool result returns them, yet they are valid. The operator
declares them with a kind, in code or in a manifest: a list, a loader called
once per guard or once per session, or the ids of the kind's shape in a text
the operator passes in (a system prompt, a policy document). They are the
tier ``operator``.

Nothing a user, a model or a tool writes adds to them, and they are never
stored with a session: a ledger read back from a store, or rebuilt from a
transcript, holds them only because the guard still declares them.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind

#: When a loader runs: once for the guard, or once for each session (given its id).
Per = Literal["guard", "session"]
PERS: Final[tuple[str, ...]] = ("guard", "session")

#: A loader of operator ids: no argument (``per="guard"``), or the session id (``"session"``).
Loader = Callable[..., Iterable[str]]

#: Sessions whose loaded ids are kept; beyond it the least recently used is loaded again.
SESSIONS_KEPT: Final = 1024

#: A kind's operator ids: key -> the value as the operator wrote it.
Values = dict[str, str]
#: Every kind's operator ids, as the check reads them.
Catalog = Mapping[str, Mapping[str, str]]
EMPTY: Final[Catalog] = {}


@dataclass
class _Declared:
    """What the operator declared for one kind: values as written, and loaders."""

    values: list[str] = field(default_factory=list)
    guard_loaders: list[Loader] = field(default_factory=list)
    session_loaders: list[Loader] = field(default_factory=list)


class OperatorIds:
    """A guard's operator ids: declared once, read by the check for each session.

    Keys are made with the kinds given at :meth:`catalog` time, so a kind
    redeclared with another normaliser keys its operator ids anew; a loader
    runs once (per guard, or per session) whatever the kinds do.
    """

    def __init__(self) -> None:
        self._declared: dict[str, _Declared] = {}
        self._loaded: dict[int, list[str]] = {}  # a guard loader's values, by id(loader)
        self._guard: dict[str, Values] | None = None
        self._sessions: OrderedDict[str | None, dict[str, Values]] = OrderedDict()
        self._lock = threading.RLock()

    def __bool__(self) -> bool:
        return bool(self._declared)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds that have operator ids declared."""
        return frozenset(self._declared)

    def add(
        self,
        kind: Kind,
        values: Iterable[str] | str | Loader | None = None,
        *,
        per: str = "guard",
        text: str | None = None,
        replace: bool = False,
    ) -> None:
        """Declare operator ids of ``kind``: values, a loader, or the ids in ``text``.

        ``replace`` forgets what was declared for the kind before (a kind
        declared again). Checked now: a value the kind's normaliser cannot
        read, a ``per`` other than guard or session, or ``text`` for a kind
        with no pattern is a usage error.
        """
        if per not in PERS:
            raise GuardrailUsageError(
                f"kind {kind.name!r}: operator ids are loaded per 'guard' or per 'session', "
                f"not {per!r}"
            )
        found: list[str] = []
        if text is not None:
            if not isinstance(text, str):
                raise GuardrailUsageError(f"kind {kind.name!r}: text= takes the operator's text")
            if not kind.has_pattern:
                raise GuardrailUsageError(
                    f"kind {kind.name!r} has no pattern, so no id of it can be found in a text: "
                    "give it a pattern, or list its operator ids"
                )
            found = [written for written, _ in kind.ids_in(text)]
        with self._lock:
            declared = self._declared.get(kind.name)
            if declared is None or replace:
                declared = self._declared[kind.name] = _Declared()
            if callable(values):
                loaders = declared.guard_loaders if per == "guard" else declared.session_loaders
                loaders.append(values)
            elif values is not None:
                if per != "guard":
                    raise GuardrailUsageError(
                        f"kind {kind.name!r}: per='session' takes a loader (a function of the "
                        "session id), not a list of values"
                    )
                declared.values.extend(_checked(kind, values, "the declared values"))
            declared.values.extend(found)
            self._forget()

    def absorb(self, other: OperatorIds) -> None:
        """Take every declaration of ``other`` (a manifest's, once it loaded whole)."""
        with self._lock:
            for name, declared in other._declared.items():
                self._declared[name] = declared
            self._loaded.update(other._loaded)
            self._forget()

    def _forget(self) -> None:
        """Drop the keyed catalogs: a declaration or a kind changed."""
        self._guard = None
        self._sessions.clear()

    def rekeyed(self) -> None:
        """The kinds changed (a kind declared again): key the operator ids anew when next read."""
        with self._lock:
            self._forget()

    def view(self, session_id: str | None, kinds: Mapping[str, Kind]) -> Catalog:
        """:meth:`catalog`, read only when a value is looked up in it (EMPTY: none declared).

        A check whose every id a ledger holds never runs a loader, so a loader that
        fails breaks only the calls that need an operator id.
        """
        return _View(self, session_id, kinds) if self._declared else EMPTY

    def catalog(self, session_id: str | None, kinds: Mapping[str, Kind]) -> Catalog:
        """Every kind's operator ids for ``session_id``, keyed by ``kinds``' normalisers.

        The guard's loaders run the first time this is read, a session's the
        first time it is read for that session. A loader that fails raises a
        usage error naming the kind; it runs again on the next read.
        """
        if not self._declared:
            return EMPTY
        with self._lock:
            cached = self._sessions.get(session_id)
            if cached is not None:
                self._sessions.move_to_end(session_id)
                return cached
            if self._guard is None:
                self._guard = self._keyed_guard(kinds)
            catalog = self._guard
            extra = {
                name: declared.session_loaders
                for name, declared in self._declared.items()
                if declared.session_loaders and name in kinds
            }
            if extra:
                catalog = {name: dict(values) for name, values in catalog.items()}
                for name, loaders in extra.items():
                    kind = kinds[name]
                    table = catalog.setdefault(name, {})
                    for loader in loaders:
                        loaded = _run(loader, kind, (session_id,))
                        table.update(_keyed(kind, loaded))
            self._sessions[session_id] = catalog
            if len(self._sessions) > SESSIONS_KEPT:
                self._sessions.popitem(last=False)
            return catalog

    def _keyed_guard(self, kinds: Mapping[str, Kind]) -> dict[str, Values]:
        """The guard's own operator ids (lists, texts, guard loaders), keyed."""
        catalog: dict[str, Values] = {}
        for name, declared in self._declared.items():
            kind = kinds.get(name)
            if kind is None:
                continue
            values = list(declared.values)
            for loader in declared.guard_loaders:
                loaded = self._loaded.get(id(loader))
                if loaded is None:
                    loaded = self._loaded[id(loader)] = _run(loader, kind, ())
                values.extend(loaded)
            catalog[name] = _keyed(kind, values)
        return catalog


class _View(Mapping[str, Mapping[str, str]]):
    """A session's catalog, keyed when first read; true when any kind has operator ids."""

    def __init__(self, ids: OperatorIds, session_id: str | None, kinds: Mapping[str, Kind]):
        self._ids = ids
        self._session = session_id
        self._kinds = kinds
        self._read: Catalog | None = None

    def _catalog(self) -> Catalog:
        if self._read is None:
            self._read = self._ids.catalog(self._session, self._kinds)
        return self._read

    def __bool__(self) -> bool:
        return bool(self._ids._declared)

    def get(self, kind: str, default: Any = None) -> Any:
        if kind not in self._ids._declared:  # no loader runs for a kind with no operator ids
            return default
        return self._catalog().get(kind, default)

    def __getitem__(self, kind: str) -> Mapping[str, str]:
        return self._catalog()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._catalog())

    def __len__(self) -> int:
        return len(self._catalog())


def _run(loader: Loader, kind: Kind, args: tuple[Any, ...]) -> list[str]:
    """A loader's values, checked; any failure a usage error naming the kind and the loader."""
    name = getattr(loader, "__qualname__", repr(loader))
    try:
        loaded = loader(*args)
    except Exception as exc:
        raise GuardrailUsageError(
            f"kind {kind.name!r}: the operator-id loader {name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return _checked(kind, loaded, f"the loader {name}")


def _checked(kind: Kind, values: object, origin: str) -> list[str]:
    """``values`` as a list of ids of ``kind``; a usage error for anything else."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise GuardrailUsageError(
            f"kind {kind.name!r}: {origin} must give a list of ids as strings, "
            f"not {type(values).__name__}"
        )
    checked = []
    for value in values:
        if not isinstance(value, str) or kind.key(value) in (None, ""):
            raise GuardrailUsageError(
                f"kind {kind.name!r}: {origin} gave {value!r}, which is no id of the kind "
                "(an id is a non-empty string its normaliser reads)"
            )
        checked.append(value)
    return checked


def _keyed(kind: Kind, values: Iterable[str]) -> Values:
    """``values`` by key; the first spelling of a key is the one kept."""
    keyed: Values = {}
    for value in values:
        key = kind.key(value)
        if key and key not in keyed:
            keyed[key] = value
    return keyed


def loader_named(reference: str, *, kind: str) -> Loader:
    """The loader a manifest names as ``module:function`` (imported now, called later)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise GuardrailUsageError(
            f"kind {kind!r}: operator_ids names a loader as 'module:function', not {reference!r}"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise GuardrailUsageError(
            f"kind {kind!r}: cannot find the operator-id loader {reference!r}: {exc}"
        ) from None
    if not callable(target):
        raise GuardrailUsageError(f"kind {kind!r}: {reference!r} is not a function")
    return target  # type: ignore[no-any-return]
