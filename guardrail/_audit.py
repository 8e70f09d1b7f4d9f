"""Audit: every decision of the guard as a structlog event.

Events are namespaced (``guardrail.call_checked``, ``guardrail.ids_recorded``,
``guardrail.ids_dropped``, ``guardrail.id_evicted``, ``guardrail.id_relabeled``,
``guardrail.compacted``, ``guardrail.undeclared_tool``)
with flat, JSON-safe fields: the session id, the tool, the parameter, the
role, the problem, and the identifier value (cut short past 200
characters), or a keyed hash of all of it where the guard was built with
``redact=``. Other argument values are never logged. The library never
configures structlog: events go wherever the program sends them.

Levels: a refusal (``outcome="refused"``, or ``"would_refuse"`` for a call
observe mode lets run) and ids not kept are warnings; an allowed ``write``
call and a compaction are info; allowed ``read`` calls, records and evictions
are debug; a session that could not be saved (``guardrail.session_not_saved``)
is an error. The
logger is resolved on first use and its level checked once, so with a
production logger at warning the allowed path builds no event at all.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from guardrail._text import shorten

if TYPE_CHECKING:
    from guardrail._verdict import Finding, Verdict
    from guardrail.compaction import CompactionReport
    from guardrail.ledger import Dropped, Entry

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR


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


class Audit:
    """Emits the guard's events through one structlog logger."""

    def __init__(self, logger: Any = None, *, redact: bytes | str | None = None) -> None:
        self._given = logger
        self._logger: Any = None
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
        logger = self._given if self._given is not None else structlog.get_logger("guardrail")
        if hasattr(logger, "bind"):
            logger = logger.bind()
        self._logger = logger
        probe = getattr(logger, "is_enabled_for", None) or getattr(logger, "isEnabledFor", None)
        for level in (DEBUG, INFO, WARNING):
            self.levels[level] = bool(probe(level)) if probe is not None else True
        return logger

    def enabled(self, level: int) -> bool:
        """Whether events at ``level`` reach the logger (resolved once)."""
        return self.levels[level]

    def emit(self, level: int, event: str, **fields: Any) -> None:
        """Send one event at ``level``."""
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
        """Several identifiers as logged."""
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
        if clean:
            level = INFO if effect == "write" else DEBUG
        elif not verdict.allowed:  # refused, or would_refuse in observe mode
            level = WARNING
        else:  # allowed, with findings of an advisory kind
            level = INFO
        if not self.enabled(level):
            return
        details = (
            {"roles": [e.role for e in verdict.used], "ids": len(verdict.used) + len(verdict.typed)}
            if clean
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

    def _findings(self, findings: Sequence[Finding]) -> dict[str, Any]:
        first = findings[0]
        return {
            "problem": first.problem,
            "param": first.param,
            "kind": first.kind,
            "value": self.value(first.value),
            "nearest_role": first.nearest_role,
            "findings": len(findings),
            "problems": [f.problem for f in findings],
            "params": [f.param for f in findings],
            "values": self.values(f.value for f in findings),
            "nearest_roles": [f.nearest_role for f in findings],
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
                problems=list(problems),
            )
        self.ids_dropped(session, tool, dropped, limit)
        if not self.enabled(DEBUG):
            return
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
            roles=[entry.role for entry in (*added, *verified)],
            values=self.values(entry.value for entry in (*added, *verified)),
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
                roles=[entry.role for entry in added],
                values=self.values(entry.value for entry in added),
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

    def compacted(self, session: str | None, report: CompactionReport) -> None:
        """``guardrail.compacted``: one per compaction, with its counts (no values, no text)."""
        if self.enabled(INFO):
            self.emit(
                INFO,
                "guardrail.compacted",
                session=session,
                shape=report.shape,
                keep_recent=report.keep_recent,
                messages_before=report.messages_before,
                messages_after=report.messages_after,
                summarised=report.summarized,  # the event key keeps its name: log queries use it
                identifiers_before=report.identifiers_before,
                identifiers_after=report.identifiers_after,
                ledger_entries=report.ledger_entries,
                harvested=report.harvested,
                masked=report.masked,
                scrubbed=report.scrubbed,
                flagged=report.flagged,
                tokens_before=report.tokens_before,
                tokens_after=report.tokens_after,
                repairs=[repair.problem for repair in report.repairs],
            )

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
