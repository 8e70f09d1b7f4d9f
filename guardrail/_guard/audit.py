"""Audit: every decision of the guard as an event, sent where the application sends its logs.

Events are namespaced (``guardrail.call_checked``, ``guardrail.ids_recorded``,
``guardrail.ids_dropped``, ``guardrail.id_evicted``, ``guardrail.id_relabeled``,
``guardrail.compacted``, ``guardrail.undeclared_tool``, ``guardrail.broad_pattern``)
with flat, JSON-safe fields: the session id, the tool, the parameter, the role, the problem,
and the identifier value (cut short past 200 characters), or a keyed hash of all of it where
the guard was built with ``redact=``. Other argument values are never logged. An event is
bounded: no list in it names more than :data:`LISTED` values (roles, ids, problems); an
event that left some out says how many in ``omitted``, so a result with 40,000 ids is one
event of a few kilobytes.

Where events go, first match wins (a library must never print by surprise):

1. the ``logger=`` the guard was built with (a structlog logger, a standard
   library ``logging.Logger``, or anything with ``debug``/``info``/
   ``warning``/``error(event, **fields)``);
2. the ``guardrail`` standard library logger, when :func:`audit_to_json`
   was called: one JSON object per line on the stream it was given;
3. ``structlog.get_logger("guardrail")``, when the application configured
   structlog (``structlog.is_configured()``);
4. otherwise the standard library logger ``logging.getLogger("guardrail")``,
   which has a ``NullHandler`` as libraries do: an application that
   configured ``logging`` sees the events (the message is the event name and
   its fields as ``key=value``; the event name and each field are also
   attributes of the record, for JSON formatters and filters), one that
   configured nothing sees nothing.

The library never configures structlog or the root logger, and imports
structlog only when the application already did. Levels: a refusal
(``outcome="refused"``, or ``"would_refuse"`` for a call observe mode lets
run) and ids not kept are warnings; an allowed ``write`` call and a
compaction are info; allowed ``read`` calls, records and evictions are
debug; a session that could not be saved (``guardrail.session_not_saved``)
is an error. The route is chosen and the levels are checked once, at the
guard's first event, so with a logger at warning the allowed path builds
no event at all (configure logging before the first guarded call).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Final, Protocol, TypeVar

from guardrail._data.text import shorten
from guardrail.errors import GuardrailUsageError

if TYPE_CHECKING:
    from guardrail._data.entry import Dropped, Entry
    from guardrail._data.verdict import ApprovalRequest, Finding, Verdict

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR
T = TypeVar("T")

#: The name of the standard library logger (and of the structlog logger) events go to.
LOGGER_NAME: Final = "guardrail"
#: The most values one list of an event names; the rest are counted in ``omitted``.
LISTED: Final = 50

# A library's logger gets a NullHandler: without one, the standard library's last-resort
# handler would print our warnings to stderr in a program that configured no logging.
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())

#: Attributes every LogRecord has: a field of that name goes on the record as ``guardrail_<name>``.
_RECORD_ATTRIBUTES: Final = frozenset(
    logging.LogRecord("", 0, "", 0, None, None, None).__dict__
) | {"message", "asctime"}
#: A value written bare in ``key=value``; anything else (spaces, quotes, newlines, non-ASCII
#: look-alikes) is written as a JSON string, so a logged id cannot forge a log line.
_BARE: Final = re.compile(r"[\w.:/@#+-]+", re.ASCII)


class _Routing:
    """Where events go when no logger was given: set by :func:`audit_to_json`."""

    to_stdlib = False


class _Levels(dict[int, bool]):
    """The enabled levels, resolving the audit's logger on the first look-up."""

    def __init__(self, audit: Audit) -> None:
        super().__init__()
        self._audit = audit

    def __missing__(self, level: int) -> bool:
        if self._audit._logger is not None:
            raise KeyError(level)
        self._audit._resolve()
        return self[level]


class SilentLogger:
    """A logger that drops everything, for guards that replay thousands of calls."""

    def is_enabled_for(self, level: int) -> bool:
        return False

    def debug(self, event: str, **fields: Any) -> None:
        return None

    info = warning = error = debug


class StdlibLogger:
    """Events as standard library log records.

    The message is the event name and its fields as ``key=value`` (what a
    plain ``logging.basicConfig`` shows); the record also carries ``event``
    and each field as an attribute (what JSON formatters and filters read).
    """

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.logger = logger

    def is_enabled_for(self, level: int) -> bool:
        return self.logger.isEnabledFor(level)

    def log(self, level: int, event: str, fields: dict[str, Any]) -> None:
        """One record at ``level``: ``event key=value ...``, the fields as attributes."""
        line = " ".join([event, *(f"{key}={_rendered(value)}" for key, value in fields.items())])
        extra = {"event": event}
        for key, value in fields.items():
            extra[f"guardrail_{key}" if key in _RECORD_ATTRIBUTES else key] = value
        self.logger.log(level, line, extra=extra)

    def debug(self, event: str, **fields: Any) -> None:
        self.log(DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self.log(INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.log(WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self.log(ERROR, event, fields)


def _rendered(value: Any) -> str:
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    return json.dumps(value, default=str)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: timestamp, level, logger, event and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        from datetime import datetime, timezone  # only once a JSON line is written

        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class _JsonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`audit_to_json` adds (and replaces when called again)."""


def audit_to_json(stream: IO[str] | None = None, *, level: int | str = "info") -> logging.Handler:
    """Write the guard's audit events as JSON lines to ``stream`` (standard error by default).

    The one line of setup for JSON audit logs: ``guardrail.audit_to_json()``.
    Events at ``level`` and above (``"debug"`` adds every allowed read and
    every record) go to the stream, and only there: to the ``guardrail``
    standard library logger, which stops passing them to the root logger,
    whatever structlog's configuration. Call it before the first guarded
    call; calling it again replaces the stream. Returns the handler (remove
    it from ``logging.getLogger("guardrail")`` to stop).
    """
    if isinstance(level, str):
        number = logging.getLevelName(level.upper())
        if not isinstance(number, int):
            raise GuardrailUsageError(
                f"level must be debug, info, warning or error (or a logging level), not {level!r}"
            )
        level = number
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if isinstance(h, _JsonHandler)]:
        logger.removeHandler(old)
    handler = _JsonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    _Routing.to_stdlib = True
    return handler


def default_logger() -> Any:
    """The logger of a guard built without ``logger=``: see the module docstring."""
    structlog = sys.modules.get("structlog")  # configured means imported: never import it here
    if not _Routing.to_stdlib and structlog is not None and structlog.is_configured():
        return structlog.get_logger(LOGGER_NAME)
    return StdlibLogger(logging.getLogger(LOGGER_NAME))


def listed(items: Sequence[T]) -> list[T]:
    """At most :data:`LISTED` of ``items``, for one list of an event."""
    return list(items[:LISTED])


def omitted(count: int) -> dict[str, int]:
    """``{"omitted": n}`` when an event's lists left ``n`` of ``count`` items out, else nothing."""
    return {"omitted": count - LISTED} if count > LISTED else {}


def _tiers(entries: Sequence[Entry]) -> dict[str, Any]:
    """``tiers`` of entries (``operator`` for an operator's), where ``verified`` does not say it."""
    if all(entry.tier == ("produced" if entry.verified else "user") for entry in entries):
        return {}
    return {"tiers": [entry.tier for entry in entries]}


class AuditListener(Protocol):
    """Something else that consumes audit events: an OpenTelemetry bridge, a metrics counter.

    ``events`` names the events it takes, each with the lowest level it
    wants (``{"guardrail.call_checked": logging.WARNING}``: refusals only).
    It is called with the event's name, level and fields (the same flat,
    JSON-safe fields the logger gets, redacted alike) whatever the logger's
    level, and must not raise.
    """

    events: Mapping[str, int]

    def __call__(self, event: str, level: int, fields: Mapping[str, Any]) -> None: ...


#: Higher than any level: the level at which an event no listener takes is wanted.
_NEVER: Final = sys.maxsize


class Audit:
    """Emits the guard's events through one logger, resolved at the first event.

    Listeners (:meth:`subscribe`) get the events they name as well, at the
    levels they name, whether or not the logger's level lets them through:
    one place where every decision leaves the guard.
    """

    def __init__(self, logger: Any = None, *, redact: bytes | str | None = None) -> None:
        self._given = logger
        self._logger: Any = None
        self._listeners: tuple[AuditListener, ...] = ()
        #: Per event name, the lowest level any listener wants it at.
        self._wanted: dict[str, int] = {}
        #: Level -> whether its events reach the logger; filled when the logger is resolved,
        #: on the first look-up. A plain subscript, so the allowed path pays no method call.
        self.levels: dict[int, bool] = _Levels(self)
        if isinstance(redact, str):
            redact = redact.encode()
        if redact is not None and not redact:
            raise ValueError("redact= needs a non-empty key")
        self._key = redact

    # -- plumbing -------------------------------------------------------------------------

    def _resolve(self) -> Any:
        logger = self._given
        if logger is None:
            logger = default_logger()
        elif isinstance(logger, (logging.Logger, logging.LoggerAdapter)):
            logger = StdlibLogger(logger)
        if hasattr(logger, "bind"):
            logger = logger.bind()
        self._logger = logger
        probe = getattr(logger, "is_enabled_for", None) or getattr(logger, "isEnabledFor", None)
        for level in (DEBUG, INFO, WARNING, ERROR):
            self.levels[level] = bool(probe(level)) if probe is not None else True
        return logger

    def enabled(self, level: int, event: str | None = None) -> bool:
        """Whether events at ``level`` reach the logger (resolved once), or ``event`` a listener."""
        return self.levels[level] or (
            event is not None and level >= self._wanted.get(event, _NEVER)
        )

    def subscribe(self, listener: AuditListener) -> Callable[[], None]:
        """Send the events ``listener.events`` names to ``listener`` too; returns an undo."""
        events = dict(listener.events)
        if not all(isinstance(name, str) and isinstance(lvl, int) for name, lvl in events.items()):
            raise GuardrailUsageError("a listener's events map event names to logging levels")
        self._listeners = (*self._listeners, listener)
        self._rewant()

        def unsubscribe() -> None:
            self._listeners = tuple(known for known in self._listeners if known is not listener)
            self._rewant()

        return unsubscribe

    def _rewant(self) -> None:
        wanted: dict[str, int] = {}
        for listener in self._listeners:
            for name, level in listener.events.items():
                wanted[name] = min(level, wanted.get(name, _NEVER))
        self._wanted = wanted

    def emit(self, level: int, event: str, **fields: Any) -> None:
        """Send one event at ``level``: to the logger, and to each listener that takes it."""
        for listener in self._listeners:
            if level >= listener.events.get(event, _NEVER):
                listener(event, level, fields)
        if not self.levels[level]:
            return  # only a listener wanted it
        logger = self._logger if self._logger is not None else self._resolve()
        if level >= ERROR:
            getattr(logger, "error", logger.warning)(event, **fields)
        elif level >= WARNING:
            logger.warning(event, **fields)
        elif level >= INFO:
            logger.info(event, **fields)
        else:
            logger.debug(event, **fields)

    def value(self, value: str) -> str:
        """An identifier as logged: verbatim but cut short, or a keyed hash of all of it."""
        if self._key is None:
            return shorten(value)
        digest = hmac.new(self._key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return "hmac:" + digest.hexdigest()[:16]

    def values(self, values: Iterable[str]) -> list[str]:
        """Several identifiers as logged (callers pass at most :data:`LISTED`)."""
        return [self.value(value) for value in values]

    # -- events ---------------------------------------------------------------------------

    def call_checked(
        self,
        session: str | None,
        verdict: Verdict,
        *,
        effect: str | None,
        mode: str,
        outcome: str,
    ) -> None:
        """``guardrail.call_checked``: one per checked call, allowed or refused."""
        clean = verdict.allowed and not verdict.findings
        asks = verdict.approvals
        if clean:
            level = INFO if effect == "write" else DEBUG
        elif asks:  # waits for the user: no one did anything wrong yet
            level = INFO
        elif not verdict.allowed:  # refused, or would_refuse in observe mode
            level = WARNING
        else:  # allowed, with findings of an advisory kind
            level = INFO
        if not self.enabled(level, "guardrail.call_checked"):
            return
        details = (
            {
                "roles": [e.role for e in listed(verdict.used)],
                "ids": len(verdict.used) + len(verdict.typed),
                **omitted(len(verdict.used)),
                **_tiers(listed(verdict.used)),
            }
            if clean
            else self._asks(asks)
            if asks
            else self._findings(verdict.findings)
        )
        self.emit(
            level,
            "guardrail.call_checked",
            session=session,
            tool=verdict.tool,
            effect=effect,
            mode=mode,
            outcome=outcome,
            **details,
        )

    def _asks(self, asks: Sequence[ApprovalRequest]) -> dict[str, Any]:
        """The fields of a call that waits for the user: what it asks, and each value's tier."""
        shown = listed(asks)
        return {
            "approvals": len(asks),
            "params": [r.param for r in shown],
            "kinds": [r.kind for r in shown],
            "values": self.values(r.value for r in shown),
            "tiers": [r.tier for r in shown],
            "outside": [r.outside for r in shown],
            **omitted(len(asks)),
        }

    def _findings(self, findings: Sequence[Finding]) -> dict[str, Any]:
        first, shown = findings[0], listed(findings)
        value = self.value(first.value)  # the first of "values" too: cut short (or hashed) once
        return {
            "problem": first.problem,
            "param": first.param,
            "kind": first.kind,
            "value": value,
            "nearest_role": first.nearest_role,
            "findings": len(findings),
            "problems": [f.problem for f in shown],
            "params": [f.param for f in shown],
            "values": [value, *self.values(f.value for f in shown[1:])],
            "nearest_roles": [f.nearest_role for f in shown],
            **omitted(len(findings)),
        }

    def ids_recorded(
        self,
        session: str | None,
        tool: str,
        *,
        call_id: str | None,
        added: Sequence[Entry],
        verified: Sequence[Entry],
        error: bool,
        problems: Sequence[str] = (),
        dropped: Sequence[Dropped] = (),
        limit: int | None = None,
    ) -> None:
        """``guardrail.ids_recorded``: one per recorded result.

        Problems reading it, and ids it named that were not kept
        (``dropped``, beyond ``limit`` or the capacity), are warnings.
        """
        if problems and self.enabled(WARNING):
            self.emit(
                WARNING,
                "guardrail.result_unreadable",
                session=session,
                tool=tool,
                call_id=call_id,
                problems=[shorten(problem) for problem in listed(problems)],
                **omitted(len(problems)),
            )
        self.ids_dropped(session, tool, dropped, limit)
        if not self.enabled(DEBUG):
            return
        shown = listed([*added, *verified])
        self.emit(
            DEBUG,
            "guardrail.ids_recorded",
            session=session,
            tool=tool,
            call_id=call_id,
            error=error,
            added=len(added),
            verified=len(verified),
            dropped=len(dropped),
            roles=[entry.role for entry in shown],
            values=self.values(entry.value for entry in shown),
            **_tiers(shown),
            **omitted(len(added) + len(verified)),
        )

    def ids_dropped(
        self, session: str | None, tool: str, dropped: Sequence[Dropped], limit: int | None
    ) -> None:
        """``guardrail.ids_dropped``: a result (or user message) named more new ids than kept.

        A warning: either a search too broad for the agent to act on, or a
        flood meant to push real ids out. The count, never the values.
        """
        if dropped and self.enabled(WARNING):
            self.emit(
                WARNING,
                "guardrail.ids_dropped",
                session=session,
                tool=tool,
                dropped=len(dropped),
                limit=limit,
            )

    def user_observed(self, session: str | None, added: Sequence[Entry]) -> None:
        """``guardrail.user_ids_observed``: ids found in what the user typed."""
        if added and self.enabled(DEBUG):
            self.emit(
                DEBUG,
                "guardrail.user_ids_observed",
                session=session,
                ids=len(added),
                roles=[entry.role for entry in listed(added)],
                values=self.values(entry.value for entry in listed(added)),
                **omitted(len(added)),
            )

    def evicted(self, session: str | None, entries: Sequence[Entry]) -> None:
        """``guardrail.id_evicted``: one per entry dropped for capacity."""
        if not entries or not self.enabled(DEBUG):
            return
        for entry in entries:
            self.emit(
                DEBUG,
                "guardrail.id_evicted",
                session=session,
                role=entry.role,
                kind=entry.kind,
                value=self.value(entry.value),
                last_used=entry.last_used,
            )

    def relabeled(self, session: str | None, entry: Entry, old_role: str) -> None:
        """``guardrail.id_relabeled``: a role renamed (the old name stays an alias)."""
        if self.enabled(INFO):
            self.emit(
                INFO,
                "guardrail.id_relabeled",
                session=session,
                role=entry.role,
                old_role=old_role,
                kind=entry.kind,
                value=self.value(entry.value),
            )

    def answered(self, session: str | None, tool: str, entry: Entry, approved: bool) -> None:
        """``guardrail.approved`` or ``guardrail.denied``: the user's answer to a request."""
        event = "guardrail.approved" if approved else "guardrail.denied"
        if self.enabled(INFO, event):
            self.emit(
                INFO,
                event,
                session=session,
                tool=tool,
                kind=entry.kind,
                role=entry.role,
                value=self.value(entry.value),
                tier=entry.tier,
                outside=entry.outside,
            )

    def compacted(self, session: str | None, **fields: Any) -> None:
        """``guardrail.compacted``: one per compaction, with the counts compaction hands in.

        The fields are plain, JSON-safe values (no identifier, no text): the
        audit knows nothing of the compaction's report type.
        """
        if self.enabled(INFO, "guardrail.compacted"):
            self.emit(INFO, "guardrail.compacted", session=session, **fields)

    def undeclared_tool(self, session: str | None, tool: str) -> None:
        """``guardrail.undeclared_tool``: a tool the guard does not know ran unchecked (once)."""
        if self.enabled(WARNING):
            self.emit(
                WARNING,
                "guardrail.undeclared_tool",
                session=session,
                tool=tool,
                advice=(
                    "declare the tool to the guard; in production build the guard with "
                    "refuse_undeclared=True so undeclared tools are refused"
                ),
            )

    def broad_pattern(self, session: str | None, kind: str, words: Sequence[str]) -> None:
        """``guardrail.broad_pattern``: a kind's pattern took plain words from user text (once).

        The words are common English words (``close``, ``please``), never
        identifiers, so they are logged as they are.
        """
        if self.enabled(WARNING):
            self.emit(
                WARNING,
                "guardrail.broad_pattern",
                session=session,
                kind=kind,
                words=[shorten(word, 40) for word in listed(words)],
                **omitted(len(words)),
                advice=(
                    "narrow the kind's pattern (a prefix, digits, a length) or use a "
                    "ready-made kind (like='email', 'uuid', 'url', 'phone', 'iban', "
                    "'prefixed:cus_'); try it with `guardrail check --kinds-only`"
                ),
            )

    def reprompt_limit(self, session: str | None, tool: str, limit: int) -> None:
        """``guardrail.reprompt_limit``: the guard stopped re-prompting and raised."""
        if self.enabled(WARNING):
            self.emit(WARNING, "guardrail.reprompt_limit", session=session, tool=tool, limit=limit)

    def session_not_saved(self, session: str | None, error: BaseException) -> None:
        """``guardrail.session_not_saved``: a session's ledger could not be saved (an error)."""
        self.emit(
            ERROR,
            "guardrail.session_not_saved",
            session=session,
            error=f"{type(error).__name__}: {error}",
        )
