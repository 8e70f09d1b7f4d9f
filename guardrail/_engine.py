"""The engine: checks calls and records results against a given ledger, and logs each decision.

It holds no session: every method takes the ledger to work on. Checks run
in the guard's mode (refusals raise, re-prompt, or are only logged in
observe mode; refusals of one tool are counted per turn of a ledger; undeclared
tools are refused or warned about once); records bring in the ids a
successful result declares, the ids a successful call vouches for first,
never more new ids per call than ``max_ids_per_call``. After a change to a
ledger it calls ``on_change`` (the guard saves its default session there).
Every decision is an event of its :class:`~guardrail._audit.Audit`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from guardrail._audit import Audit
from guardrail._check import (
    CheckPlan,
    check_arguments,
    malformed_arguments,
    parse_arguments,
    undeclared_verdict,
)
from guardrail._harvest import (
    Batch,
    Harvest,
    failed,
    recordable,
    unreadable_problem,
    yields_nothing,
)
from guardrail._registry import Registry
from guardrail._spec import ParamSpec, ToolSpec
from guardrail._verdict import Verdict
from guardrail._words import COMMON_WORDS
from guardrail.errors import IdentifierViolation, RepromptLimitExceeded
from guardrail.ledger import Entry, Ledger, Source

Mode = Literal["raise", "reprompt", "observe"]
MODES: tuple[str, ...] = ("raise", "reprompt", "observe")

_USER = "user"
#: The provenance of ids a read brought in that appear nowhere else (see :meth:`Engine.introduce`):
#: unverified like the user's, but a lookup's mere success never confirms them.
INTRODUCED = "introduced"
#: The declared path of the ids a call vouches for by taking them (its arguments).
_ARGUMENTS = "arguments"
#: Unknown tool names remembered for warning once each; beyond this many, no more warnings
#: (a model inventing tool names must not grow the guard's memory without bound).
_UNDECLARED_KEPT = 1000


@dataclass(frozen=True)
class Options:
    """How the engine decides and how much one call may add (validated by the guard)."""

    mode: Mode
    max_reprompts: int
    refuse_undeclared: bool
    max_ids_per_call: int


class Engine:
    """Checks and records calls against the ledger each method is given, in the guard's mode."""

    def __init__(
        self,
        registry: Registry,
        audit: Audit,
        options: Options,
        on_change: Callable[[Ledger], None],
    ) -> None:
        self.registry = registry
        #: The registry's plans (the same mapping), read by every call.
        self.plans = registry.plans
        self.audit = audit
        self.options = options
        self.mode: Mode = options.mode
        self.max_ids_per_call = options.max_ids_per_call
        self._on_change = on_change
        #: Unknown tool names already warned about (bounded), and the lock that makes it once.
        self._undeclared_seen: set[str] = set()
        self._undeclared_lock = threading.Lock()
        #: Kinds whose pattern was seen taking plain words from user text (warned once each).
        self._broad_seen: set[str] = set()

    # -- the check ------------------------------------------------------------------------

    def verdict(self, name: str, arguments: Any, ledger: Ledger) -> Verdict:
        """The verdict on one call, logged nowhere; an allowed call touches its entries."""
        plan = self.plans.get(name)
        if plan is None:
            if self.options.refuse_undeclared:
                return undeclared_verdict(name)
            if self.registry.has_writes and name not in self._undeclared_seen:
                self._warn_undeclared(name, ledger)
            given = arguments if type(arguments) is dict else parse_arguments(arguments)
            return Verdict(tool=name, allowed=True, arguments=given)
        args = arguments if type(arguments) is dict else parse_arguments(arguments)
        if args is None:
            return malformed_arguments(plan, arguments)
        return check_arguments(plan, args, ledger)

    def check(self, name: str, arguments: Mapping[str, Any] | str, ledger: Ledger) -> Verdict:
        """:meth:`verdict`, logged as a check (nothing is counted: no call is about to run)."""
        verdict = self.verdict(name, arguments, ledger)
        self.audit.call_checked(
            ledger.session_id,
            verdict,
            effect=self._effect(name),
            mode=self.mode,
            outcome=self._allowed_outcome(name) if verdict.allowed else "refused",
        )
        return verdict

    def enforce(self, name: str, arguments: Any, ledger: Ledger) -> Verdict:
        """Check a call about to run in the engine's mode: log, count re-prompts, maybe raise."""
        verdict = self.verdict(name, arguments, ledger)
        session = ledger.session_id
        if verdict.allowed:
            # An allowed call does not reset the count: a model that sends one good and one
            # bad call of a tool at every step would otherwise be re-prompted for ever.
            self.audit.call_checked(
                session,
                verdict,
                effect=self._effect(name),
                mode=self.mode,
                outcome=self._allowed_outcome(name),
            )
            return verdict
        effect = self._effect(name)
        if self.mode == "observe":
            self.audit.call_checked(
                session, verdict, effect=effect, mode="observe", outcome="would_refuse"
            )
            return verdict
        count = ledger._refusals.get(name, 0) + 1
        ledger._refusals[name] = count
        self.audit.call_checked(session, verdict, effect=effect, mode=self.mode, outcome="refused")
        if self.mode == "raise":
            raise IdentifierViolation(verdict)
        limit = self.options.max_reprompts
        if count > limit:
            self.audit.reprompt_limit(session, name, limit)
            raise RepromptLimitExceeded(verdict, limit=limit)
        return verdict

    def log_allowed(self, plan: CheckPlan, ledger: Ledger, used: list[Entry]) -> None:
        """The audit event of a call whose ids were all allowed outright."""
        self.audit.call_checked(
            ledger.session_id,
            Verdict(plan.spec.name, True, used=tuple(used)),
            effect=plan.spec.effect,
            mode=self.mode,
            outcome="allowed",
        )

    def _warn_undeclared(self, name: str, ledger: Ledger) -> None:
        """Warn once per unknown tool name: a guard with write tools lets it run unchecked."""
        if not self.audit.levels[logging.WARNING]:
            return  # nothing would be seen: a silenced copy must not use up the warning
        with self._undeclared_lock:
            if name in self._undeclared_seen or len(self._undeclared_seen) >= _UNDECLARED_KEPT:
                return
            self._undeclared_seen.add(name)
        self.audit.undeclared_tool(ledger.session_id, name)

    def _warn_broad(self, ledger: Ledger, plain: Mapping[str, list[str]]) -> None:
        """Warn once per kind whose pattern took plain words from what the user wrote."""
        if not self.audit.levels[logging.WARNING]:
            return  # nothing would be seen: a silenced copy must not use up the warning
        with self._undeclared_lock:
            new = {name: words for name, words in plain.items() if name not in self._broad_seen}
            self._broad_seen.update(new)
        for name, words in new.items():
            self.audit.broad_pattern(ledger.session_id, name, words)

    def _allowed_outcome(self, name: str) -> str:
        # A tool the guard does not know declares no ids: allowed, and logged as undeclared.
        return "allowed" if name in self.plans else "undeclared"

    def _effect(self, name: str) -> str | None:
        spec = self.registry.specs.get(name)
        return spec.effect if spec is not None else None

    # -- recording ------------------------------------------------------------------------

    def record(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        result: Any,
        error: bool,
        call_id: str | None,
        ledger: Ledger,
        *,
        trusted: bool = True,
    ) -> list[Entry]:
        """Harvest the result of a call that ran elsewhere; returns the entries added.

        In observe mode the arguments are checked again: a call the engine
        would have refused records nothing. A result that is not ``trusted``
        (read from a transcript without the server's seal) adds its ids
        unverified, and nothing else: no confirmation, no mints, no status.
        """
        plan = self.plans.get(name)
        if plan is None:
            return []
        args = parse_arguments(arguments) or {}
        # Observe mode lets a call it would refuse run; what that call touched or returned
        # belongs to someone else's record, so it is checked again and then left unrecorded.
        verdict = self.verdict(name, args, ledger) if self.mode == "observe" else None
        return self.record_call(
            plan, args, result, error, call_id, ledger, verdict, trusted=trusted
        )

    def record_call(
        self,
        plan: CheckPlan,
        arguments: Mapping[str, Any],
        result: Any,
        error: bool,
        call_id: str | None,
        ledger: Ledger,
        verdict: Verdict | None,
        *,
        trusted: bool = True,
    ) -> list[Entry]:
        """Record one call's result, given the verdict it ran under (None: not checked here)."""
        spec = plan.spec
        if error:
            self.audit.ids_recorded(
                ledger.session_id, spec.name, call_id=call_id, added=(), verified=(), error=True
            )
            return []
        if verdict is not None and not verdict.allowed:
            # Observe mode ran a call it would have refused: it confirms, mints and
            # harvests nothing (its call_checked event already says would_refuse).
            if self.audit.enabled(logging.DEBUG):
                self.log_nothing_recorded(ledger, spec.name, call_id)
            return []
        try:
            # A failure that came back as a result (an error mapping, a refusal) teaches
            # nothing: it may echo the very id that was not found. Tested only where the
            # result could bring something in.
            harvested: Harvest | None
            if not yields_nothing(spec, result):
                harvested = recordable(spec, result, self.registry.kinds)
            elif spec.mints or spec.confirms_arguments:
                harvested = None if failed(result) else Harvest([], [])
            else:
                harvested = Harvest([], [])
            if harvested is None:
                self.audit.ids_recorded(
                    ledger.session_id, spec.name, call_id=call_id, added=(), verified=(), error=True
                )
                return []
            batches, problems = harvested
            if trusted:
                taken = self._taken_ids(spec, arguments, verdict, problems, ledger)
            else:
                # Anyone could have written it: the ids it names, as if typed, and no more.
                taken = []
                batches = [batch._replace(statuses=None) for batch in batches]
        except Exception as exc:  # a user normaliser failed: the tool's result must still return
            problem = f"nothing recorded: {type(exc).__name__}: {exc}"
            self.log_nothing_recorded(ledger, spec.name, call_id, [problem])
            return []
        if not batches and not taken and not problems:
            if self.audit.enabled(logging.DEBUG):
                self.log_nothing_recorded(ledger, spec.name, call_id)
            return []
        turn = ledger.turn
        # The call's own ids first: a result naming more ids than one call may add must not
        # crowd out what the call confirmed or minted.
        batches[:0] = taken
        paths = {batch.path for batch in batches}
        sources = {path: Source(spec.name, call_id, path, turn) for path in paths}
        limit = self.max_ids_per_call
        admitted = ledger._admit(
            batches, source=sources, verified=trusted, limit=limit, tool=spec.name
        )
        self.audit.ids_recorded(
            ledger.session_id,
            spec.name,
            call_id=call_id,
            added=admitted.added,
            verified=admitted.verified,
            error=False,
            problems=problems,
            dropped=admitted.dropped,
            limit=limit,
        )
        self.audit.evicted(ledger.session_id, admitted.evicted)
        if admitted.added or admitted.verified:
            self._on_change(ledger)
        return admitted.added

    def log_nothing_recorded(
        self, ledger: Ledger, name: str, call_id: str | None = None, problems: Sequence[str] = ()
    ) -> None:
        """The event of a record that brought nothing in (and why, where something failed)."""
        self.audit.ids_recorded(
            ledger.session_id,
            name,
            call_id=call_id,
            added=(),
            verified=(),
            error=False,
            problems=problems,
        )

    def _taken_ids(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        verdict: Verdict | None,
        problems: list[str],
        ledger: Ledger,
    ) -> list[Batch]:
        """Ids a successful call vouches for: a write's mints, an ``on_success`` read's arguments.

        Any other read confirms only what its result returns, which the harvest reads. An
        introduced id is no argument the user gave: only a result that returns it confirms it.
        """
        if spec.confirms_arguments:
            if verdict is None or not verdict.allowed:
                return _unintroduced(self._argument_ids(spec.params, arguments, problems), ledger)
            taken: list[Batch] = []
            for typed in verdict.typed:
                _append(taken, typed.kind, _ARGUMENTS, typed.value, typed.key)
            for entry in verdict.used:
                if not entry.verified:
                    _append(taken, entry.kind, _ARGUMENTS, entry.value, entry.key)
            return _unintroduced(taken, ledger)
        if spec.effect == "write" and spec.mints:
            return self._argument_ids(spec.mints, arguments, problems)
        return []

    def _argument_ids(
        self, params: Sequence[ParamSpec], arguments: Mapping[str, Any], problems: list[str]
    ) -> list[Batch]:
        """The ids a successful call took, each of the kind it fits best, in order.

        A value the kind's normaliser cannot read is skipped and reported in ``problems``.
        """
        taken: list[Batch] = []
        unreadable = 0
        for param in params:
            kinds = [self.registry.kinds[name] for name in param.kinds]
            for value in param.path.extract(arguments, parse_json_strings=True):
                texts = (
                    [part.strip() for part in value.split(param.sep) if part.strip()]
                    if param.sep and isinstance(value, str)
                    else [value]
                )
                for text in texts:
                    if isinstance(text, bool) or not isinstance(text, (str, int)):
                        continue
                    text = str(text)
                    kind = next((k for k in kinds if k.has_pattern and k.matches(text)), kinds[0])
                    key = kind.key(text)
                    if key is None:
                        unreadable += 1
                    elif key and key not in kind.examples:
                        _append(taken, kind.name, param.path.text, text, key)
        if unreadable:
            problems.append(unreadable_problem(unreadable))
        return taken

    # -- the conversation -----------------------------------------------------------------

    def observe_user(self, text: str, ledger: Ledger) -> list[Entry]:
        """Start a turn with what the user typed: ids of a kind's shape enter, unverified."""
        with ledger._lock:
            turn = ledger._next_turn()
            ledger._observe_text(text)
            found: list[Batch] = []
            plain: dict[str, list[str]] = {}
            for kind in self.registry.kinds.values():
                values: list[str] = []
                keys: list[str] = []
                for token, key in kind.ids_in(text):
                    values.append(token)
                    keys.append(key)
                    if token.casefold() in COMMON_WORDS:
                        plain.setdefault(kind.name, []).append(token)
                if values:
                    found.append(Batch(kind.name, "text", None, values, keys, None))
            admitted = ledger._admit(
                found,
                source=Source(_USER, None, "text", turn),
                verified=False,
                limit=self.max_ids_per_call,
                tool=_USER,
            )
        self.audit.user_observed(ledger.session_id, admitted.added)
        if plain:
            self._warn_broad(ledger, plain)
        self.audit.ids_dropped(ledger.session_id, _USER, admitted.dropped, self.max_ids_per_call)
        self.audit.evicted(ledger.session_id, admitted.evicted)
        if admitted.added:
            self._on_change(ledger)
        return admitted.added

    def observe_user_once(self, text: str, ledger: Ledger) -> list[Entry]:
        """:meth:`observe_user`, unless ``text`` is the last user text the ledger keeps.

        A host that forwards the user's message with every call of a turn starts one turn.
        """
        kept = ledger._user_texts
        if kept and kept[-1] == text:
            return []
        return self.observe_user(text, ledger)

    def introduce(self, name: str, arguments: Any, ledger: Ledger) -> list[Entry]:
        """Bring in, unverified, the ids a ``read`` call takes that appear nowhere yet.

        For a runtime that never sees the user's messages (an MCP server): its
        reads are where a conversation's ids first appear. Only a call whose
        every refused id is ``unknown`` qualifies (a near miss, a placeholder
        or an id of another kind stays refused). The ids enter with the
        provenance ``introduced``: a read may take them, a write refuses them,
        and only a declared result field that returns them verifies them (a
        lookup's success does not, whatever its ``verifies``). No turn starts.
        """
        spec = self.registry.specs.get(name)
        if spec is None or spec.effect != "read":
            return []
        verdict = self.verdict(name, arguments, ledger)  # logged by the check that follows
        findings = verdict.findings
        if verdict.allowed or not findings or any(f.problem != "unknown" for f in findings):
            return []
        kinds = self.registry.kinds
        batches: list[Batch] = []
        for finding in findings:
            key = kinds[finding.kind].key(finding.value)
            if key:
                _append(batches, finding.kind, finding.param, finding.value, key)
        turn = ledger.turn
        sources = {batch.path: Source(INTRODUCED, None, batch.path, turn) for batch in batches}
        admitted = ledger._admit(
            batches, source=sources, verified=False, limit=self.max_ids_per_call, tool=name
        )
        self.audit.ids_recorded(
            ledger.session_id,
            name,
            call_id=None,
            added=admitted.added,
            verified=(),
            error=False,
            dropped=admitted.dropped,
            limit=self.max_ids_per_call,
        )
        self.audit.evicted(ledger.session_id, admitted.evicted)
        if admitted.added:
            self._on_change(ledger)
        return admitted.added

    def stopped(self, ledger: Ledger) -> str | None:
        """The tool whose re-prompts ran out this turn (the first), or None.

        A runtime with no program to raise to (a server) answers every later
        call of the turn with the stop instead of running it.
        """
        if self.mode != "reprompt":
            return None
        limit = self.options.max_reprompts
        return next((tool for tool, count in ledger._refusals.items() if count > limit), None)

    def label(self, role: str, new_role: str, ledger: Ledger) -> Entry:
        """Rename an entry's role, logged; the old one stays an alias."""
        old = ledger[role].role
        entry = ledger.label(role, new_role)
        self.audit.relabeled(ledger.session_id, entry, old)
        self._on_change(ledger)
        return entry

    def pin(self, role: str, pinned: bool, ledger: Ledger) -> Entry:
        """Keep (or stop keeping) an entry whatever the capacity."""
        entry = ledger.pin(role, pinned)
        self._on_change(ledger)
        return entry

    def forget(self, role: str, ledger: Ledger) -> Entry:
        """Drop an entry now, leaving a tombstone (logged as an eviction)."""
        entry = ledger.forget(role)
        self.audit.evicted(ledger.session_id, [entry])
        self._on_change(ledger)
        return entry


def _unintroduced(batches: list[Batch], ledger: Ledger) -> list[Batch]:
    """``batches`` without the ids that entered as introduced and that the user never typed.

    An introduced id came from a runtime that could not tell the user's ids
    from the model's: a lookup's success proves it exists, not that it is
    this conversation's, so only a result that returns it may confirm it.
    """
    kept: list[Batch] = []
    for batch in batches:
        table = ledger._by_kind.get(batch.kind)
        pairs = [
            (value, key)
            for value, key in zip(batch.values, batch.keys, strict=True)
            if table is None
            or (entry := table.get(key)) is None
            or entry.verified
            or entry.source.tool != INTRODUCED
            or ledger._typed_by_user(value)
        ]
        if pairs:
            values, keys = (list(column) for column in zip(*pairs, strict=True))
            kept.append(batch._replace(values=values, keys=keys, statuses=None))
    return kept


def _append(batches: list[Batch], kind: str, path: str, value: str, key: str) -> None:
    """Add one id to ``batches``, in order: to the last batch when its kind and path are these."""
    last = batches[-1] if batches else None
    if last is None or last.kind != kind or last.path != path:
        batches.append(Batch.one(kind, value, key, path))
    else:
        last.values.append(value)
        last.keys.append(key)
