"""The engine: checks calls and records results against a given ledger, and logs each decision.

It holds no session: every method takes the ledger's state to work on.
Checks run in the guard's mode (refusals raise, re-prompt, or are only
logged; a call that waits for the user is put to the inline approver, if
any; refusals of one tool are counted per turn); records bring in the ids a
successful result declares (and its mentions), the ids a successful call
vouches for first, never more new ids per call than ``max_ids_per_call``; a
result the tool's failure rule reads as a failure brings nothing in.
After a change it asks the state to persist it. Every decision is an event
of its :class:`~guardrail._guard.audit.Audit`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from guardrail._check.approvals import answer_async, answer_now, decide_request, use_up
from guardrail._check.plan import (
    CheckPlan,
    check_arguments,
    malformed_arguments,
    undeclared_verdict,
)
from guardrail._check.reprompt import touch_named
from guardrail._check.tokens import Keys, signed
from guardrail._data.batch import Batch
from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._declare.arguments import parse_arguments
from guardrail._guard.audit import Audit
from guardrail._guard.registry import Registry
from guardrail._provenance.failure import recordable
from guardrail._provenance.harvest import Harvest, append_id, yields_nothing
from guardrail._provenance.mentions import admit_mentions, mentioned_in
from guardrail._provenance.recall import Recall, Recalls, as_record, settles
from guardrail._provenance.taken import INTRODUCED, taken_ids
from guardrail.errors import (
    ApprovalRequired,
    GuardrailUsageError,
    IdentifierViolation,
    RepromptLimitExceeded,
)
from guardrail.kinds._words import COMMON_WORDS
from guardrail.ledger import Entry, Source
from guardrail.ledger._state import LedgerState

Mode = Literal["raise", "reprompt", "observe"]
#: ``Guard(approve=...)``: answers one request, truthy to approve (a coroutine for async tools).
Approver = Callable[[ApprovalRequest], object]
MODES: tuple[str, ...] = ("raise", "reprompt", "observe")

_USER = "user"
#: Unknown tool names warned about once each, at most (a model inventing names costs no memory).
_UNDECLARED_KEPT = 1000
Answers = Callable[[Approver, tuple[ApprovalRequest, ...]], list[bool]]


#: An engine made without the guard's keys (a test's): requests are signed with an empty key.
_UNSIGNED = Keys(b"", from_secret=False)


@dataclass(frozen=True)
class Options:
    """How the engine decides and how much one call may add (:meth:`checked` builds them)."""

    mode: Mode
    max_reprompts: int
    refuse_undeclared: bool
    max_ids_per_call: int

    @classmethod
    def checked(
        cls,
        mode: object,
        max_reprompts: object,
        refuse_undeclared: bool,
        max_ids_per_call: object,
        capacity: int,
    ) -> Options:
        """The guard's options, checked; ``max_ids_per_call=None``: a tenth of ``capacity``."""
        if mode not in MODES:
            raise GuardrailUsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if max_ids_per_call is None:
            max_ids_per_call = max(1, capacity // 10)
        elif type(max_ids_per_call) is not int or max_ids_per_call < 1:
            raise GuardrailUsageError(
                f"max_ids_per_call must be a positive integer (or None for a tenth of the "
                f"capacity), not {max_ids_per_call!r}"
            )
        if not isinstance(max_reprompts, int) or max_reprompts < 0:
            raise GuardrailUsageError("max_reprompts must be an integer >= 0")
        return cls(cast(Mode, mode), max_reprompts, refuse_undeclared, max_ids_per_call)


class Engine:
    """Checks and records calls against the ledger each method is given, in the guard's mode."""

    def __init__(
        self,
        registry: Registry,
        audit: Audit,
        options: Options,
        *,
        approval_key: Keys = _UNSIGNED,
        approver: Approver | None = None,
    ) -> None:
        self.registry = registry
        #: Signs approval requests; the user's inline answer (``Guard(approve=...)``), if any.
        self.approval_key = approval_key
        self.approver = approver
        #: The registry's plans (the same mapping), read by every call.
        self.plans = registry.plans
        self.audit = audit
        self.options = options
        self.mode: Mode = options.mode
        self.max_ids_per_call = options.max_ids_per_call
        #: Unknown tool names already warned about (bounded), and the lock that makes it once.
        self._undeclared_seen: set[str] = set()
        self._undeclared_lock = threading.Lock()
        #: Kinds whose pattern was seen taking plain words from user text (warned once each).
        self._broad_seen: set[str] = set()
        #: Each tool's kept records (see :meth:`recall`).
        self.recalls = Recalls()

    # -- the check ------------------------------------------------------------------------

    def verdict(self, name: str, arguments: Any, state: LedgerState) -> Verdict:
        """The verdict on one call, logged nowhere; an allowed call touches its entries."""
        plan = self.plans.get(name)
        if plan is None:
            if self.options.refuse_undeclared:
                return undeclared_verdict(name)
            if self.registry.has_writes and name not in self._undeclared_seen:
                self._warn_undeclared(name, state)
            given = arguments if type(arguments) is dict else parse_arguments(arguments)
            return Verdict(tool=name, allowed=True, arguments=given)
        args = arguments if type(arguments) is dict else parse_arguments(arguments)
        if args is None:
            return malformed_arguments(plan, arguments)
        catalog = self.registry.operator.view(state.session_id, self.registry.kinds)
        verdict = check_arguments(plan, args, state, catalog)
        return signed(self.approval_key, verdict, state) if verdict.approvals else verdict

    def check(self, name: str, arguments: Mapping[str, Any] | str, state: LedgerState) -> Verdict:
        """:meth:`verdict`, logged as a check (nothing is counted: no call is about to run)."""
        verdict = self.verdict(name, arguments, state)
        self.audit.call_checked(
            state.session_id,
            verdict,
            effect=self._effect(name),
            mode=self.mode,
            outcome=self._allowed_outcome(name) if verdict.allowed else verdict.outcome,
        )
        return verdict

    def enforce(self, name: str, arguments: Any, state: LedgerState) -> Verdict:
        """Check a call about to run (a call that waits for the user goes to the approver)."""
        verdict = self.verdict(name, arguments, state)
        if verdict.approvals and self.approver is not None and self.mode != "observe":
            verdict = self._answered(name, arguments, state, verdict, answer_now)
        return self.enforced(name, verdict, state)

    async def enforce_async(self, name: str, arguments: Any, state: LedgerState) -> Verdict:
        """:meth:`enforce` for an async tool: ``Guard(approve=...)`` may be a coroutine function."""
        verdict = self.verdict(name, arguments, state)
        if verdict.approvals and self.approver is not None and self.mode != "observe":
            answers = await answer_async(self.approver, verdict.approvals)
            verdict = self._answered(name, arguments, state, verdict, lambda _, __: answers)
        return self.enforced(name, verdict, state)

    def _answered(
        self, name: str, arguments: Any, state: LedgerState, verdict: Verdict, answer: Answers
    ) -> Verdict:
        """The verdict once the inline approver answered each request (truthy: approved)."""
        assert self.approver is not None
        answers = answer(self.approver, verdict.approvals)
        for request, ok in zip(verdict.approvals, answers, strict=True):
            self.decide(state, request, ok)
        return self.verdict(name, arguments, state)

    def decide(
        self,
        state: LedgerState,
        request: ApprovalRequest | str,
        approved: bool,
        *,
        once: bool = False,
    ) -> Entry:
        """Record the user's answer to a request of this ledger's session; logged."""
        grant, entry = decide_request(self.approval_key, state, request, approved, once=once)
        self.audit.answered(grant.session, grant.tool, entry, approved)
        return entry

    def enforced(self, name: str, verdict: Verdict, state: LedgerState) -> Verdict:
        """Act on a checked call in the engine's mode: log, count re-prompts, maybe raise."""
        session = state.session_id
        if verdict.allowed:
            if self.mode != "observe" and any(entry.approved for entry in verdict.used):
                use_up(state, name, verdict.used)  # the call runs: one-call approvals are spent
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
        effect, outcome = self._effect(name), verdict.outcome
        if self.mode == "observe":
            would = "would_ask" if outcome == "ask" else "would_refuse"
            self.audit.call_checked(session, verdict, effect=effect, mode="observe", outcome=would)
            return verdict
        count = state.reprompts.add(name, state.turn)
        touch_named(verdict, state)
        self.audit.call_checked(session, verdict, effect=effect, mode=self.mode, outcome=outcome)
        if self.mode == "raise":
            raise ApprovalRequired(verdict) if outcome == "ask" else IdentifierViolation(verdict)
        limit = self.options.max_reprompts
        if count > limit:
            self.audit.reprompt_limit(session, name, limit)
            raise RepromptLimitExceeded(verdict, limit=limit)
        return verdict

    def log_allowed(self, plan: CheckPlan, state: LedgerState, used: list[Entry]) -> None:
        """The audit event of a call whose ids were all allowed outright."""
        self.audit.call_checked(
            state.session_id,
            Verdict(plan.spec.name, True, used=tuple(used)),
            effect=plan.spec.effect,
            mode=self.mode,
            outcome="allowed",
        )

    def _warn_undeclared(self, name: str, state: LedgerState) -> None:
        """Warn once per unknown tool name: a guard with write tools lets it run unchecked."""
        if not self.audit.levels[logging.WARNING]:
            return  # nothing would be seen: a silenced copy must not use up the warning
        with self._undeclared_lock:
            if name in self._undeclared_seen or len(self._undeclared_seen) >= _UNDECLARED_KEPT:
                return
            self._undeclared_seen.add(name)
        self.audit.undeclared_tool(state.session_id, name)

    def _warn_broad(self, state: LedgerState, plain: Mapping[str, list[str]]) -> None:
        """Warn once per kind whose pattern took plain words from what the user wrote."""
        if not self.audit.levels[logging.WARNING]:
            return  # nothing would be seen: a silenced copy must not use up the warning
        with self._undeclared_lock:
            new = {name: words for name, words in plain.items() if name not in self._broad_seen}
            self._broad_seen.update(new)
        for name, words in new.items():
            self.audit.broad_pattern(state.session_id, name, words)

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
        state: LedgerState,
        *,
        error: bool = False,
        call_id: str | None = None,
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
        verdict = self.verdict(name, args, state) if self.mode == "observe" else None
        recall = self.recall(plan)
        if recall is not None:
            result = as_record(result)
            if (
                trusted
                and not error
                and (verdict is None or verdict.allowed)
                and not self.audit.enabled(logging.DEBUG)
                and settles(recall, result, state)
            ):
                return []
        return self.record_call(
            plan,
            args,
            result,
            state,
            error=error,
            call_id=call_id,
            verdict=verdict,
            trusted=trusted,
            recall=recall,
        )

    def recall(self, plan: CheckPlan) -> Recall | None:
        """The records kept of ``plan``'s tool's results (:mod:`guardrail._provenance.recall`).

        One per tool, shared by its decorated function and :meth:`record`.
        """
        registry = self.registry
        mentions = bool(registry.mentions or registry.text_kinds)
        return self.recalls.of(plan.spec, plan, mentions=mentions)

    def record_call(
        self,
        plan: CheckPlan,
        arguments: Mapping[str, Any],
        result: Any,
        state: LedgerState,
        *,
        error: bool = False,
        call_id: str | None = None,
        verdict: Verdict | None = None,
        trusted: bool = True,
        recall: Recall | None = None,
    ) -> list[Entry]:
        """Record one call's result, given the verdict it ran under (None: not checked here).

        ``recall``: the plan's kept records (:mod:`guardrail._provenance.recall`): one
        equal to the result (or to the object its short JSON text holds) is not walked
        again.
        """
        spec = plan.spec
        if recall is not None:
            result = as_record(result)  # what the record reads a JSON object text as
        if error:
            self.audit.ids_recorded(
                state.session_id, spec.name, call_id=call_id, added=(), verified=(), error=True
            )
            return []
        if verdict is not None and not verdict.allowed:
            # Observe mode ran a call it would have refused: it confirms, mints and
            # harvests nothing (its call_checked event already says would_refuse).
            if self.audit.enabled(logging.DEBUG):
                self.log_nothing_recorded(state, spec.name, call_id)
            return []
        try:
            # A failure that came back as a result (an "Error: ..." text, an error mapping, a
            # refusal) teaches nothing: it may echo the very id that was not found. The tool's
            # failure rule decides (guardrail._provenance.failure), read only where the result
            # could bring something in: a declared field, a mint, a confirmation, a mention.
            harvested: Harvest | None
            rule_problems: list[str] = []
            decoded: Any = result  # the result decoded once, for the mentions too
            mentions_wanted = trusted and bool(self.registry.mentions or self.registry.text_kinds)
            if yields_nothing(spec, result) and not (
                spec.mints or spec.confirms_arguments or mentions_wanted
            ):
                harvested = Harvest([], [])
            elif recall is not None and type(result) is dict:
                kept = recall.get(result)
                if kept is not None:
                    harvested = Harvest(list(kept.batches), [])
                else:
                    harvested, decoded = recordable(
                        spec, result, self.registry.kinds, rule_problems
                    )
                    if harvested is not None and not harvested.problems:
                        recall.keep(result, harvested.batches)
            else:
                harvested, decoded = recordable(spec, result, self.registry.kinds, rule_problems)
            if not mentions_wanted:
                decoded = None  # a large result's objects go now, not after the admission
            if harvested is None:
                self.audit.ids_recorded(
                    state.session_id,
                    spec.name,
                    call_id=call_id,
                    added=(),
                    verified=(),
                    error=True,
                    problems=rule_problems,
                )
                return []
            batches, problems = harvested
            mentions = None
            if trusted:
                taken = taken_ids(self.registry.kinds, spec, arguments, verdict, problems, state)
                if mentions_wanted:
                    limit = self.max_ids_per_call
                    mentions = mentioned_in(
                        spec, arguments, decoded, self.registry, state, call_id, limit=limit
                    )
            else:
                # Anyone could have written it: the ids it names, as if typed, and no more.
                taken = []
                batches = [batch._replace(statuses=None, notes=None) for batch in batches]
        except Exception as exc:  # a user normaliser failed: the tool's result must still return
            problem = f"nothing recorded: {type(exc).__name__}: {exc}"
            self.log_nothing_recorded(state, spec.name, call_id, [problem])
            return []
        if not batches and not taken and not problems and not (mentions and mentions[0]):
            if self.audit.enabled(logging.DEBUG):
                self.log_nothing_recorded(state, spec.name, call_id)
            return []
        turn = state.turn
        # The call's own ids first: a result naming more ids than one call may add must not
        # crowd out what the call confirmed or minted.
        batches[:0] = taken
        paths = {batch.path for batch in batches}
        sources = {path: Source(spec.name, call_id, path, turn) for path in paths}
        limit = self.max_ids_per_call
        admitted = state.admit(
            batches, source=sources, verified=trusted, limit=limit, tool=spec.name
        )
        if mentions and mentions[0]:  # counted against the same cap, after the declared ids
            room = limit - len(admitted.added)
            admitted.added.extend(
                admit_mentions(state, mentions, tool=spec.name, call_id=call_id, room=room)
            )
        self.audit.ids_recorded(
            state.session_id,
            spec.name,
            call_id=call_id,
            added=admitted.added,
            verified=admitted.verified,
            error=False,
            problems=problems,
            dropped=admitted.dropped,
            limit=limit,
        )
        self.audit.evicted(state.session_id, admitted.evicted)
        if admitted.added or admitted.verified:
            state.persist()
        return admitted.added

    def log_nothing_recorded(
        self,
        state: LedgerState,
        name: str,
        call_id: str | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        """The event of a record that brought nothing in (and why, where something failed)."""
        self.audit.ids_recorded(
            state.session_id,
            name,
            call_id=call_id,
            added=(),
            verified=(),
            error=False,
            problems=problems,
        )

    # -- the conversation -----------------------------------------------------------------

    def observe_user(self, text: str, state: LedgerState) -> list[Entry]:
        """Start a turn with what the user typed: ids of a kind's shape enter, unverified."""
        with state.lock:
            turn = state.next_turn()
            state.observe_text(text)
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
            admitted = state.admit(
                found,
                source=Source(_USER, None, "text", turn),
                verified=False,
                tier=_USER,
                limit=self.max_ids_per_call,
                tool=_USER,
            )
        self.audit.user_observed(state.session_id, admitted.added)
        if plain:
            self._warn_broad(state, plain)
        self.audit.ids_dropped(state.session_id, _USER, admitted.dropped, self.max_ids_per_call)
        self.audit.evicted(state.session_id, admitted.evicted)
        if admitted.added:
            state.persist()
        return admitted.added

    def observe_user_once(self, text: str, state: LedgerState) -> list[Entry]:
        """:meth:`observe_user`, unless ``text`` is the last user text the ledger keeps.

        A host that forwards the user's message with every call of a turn starts one turn.
        """
        if state.user_texts.last() == text:
            return []
        return self.observe_user(text, state)

    def introduce(self, name: str, arguments: Any, state: LedgerState) -> list[Entry]:
        """Bring in, unverified, the ids a ``read`` call takes that appear nowhere yet.

        For a runtime that never sees the user's messages (an MCP server).
        Only a call whose every refused id is ``unknown`` qualifies. The ids
        enter as ``introduced``: a read may take them, a write refuses them,
        and only a declared result field that returns them verifies them. No
        turn starts.
        """
        spec = self.registry.specs.get(name)
        if spec is None or spec.effect != "read":
            return []
        verdict = self.verdict(name, arguments, state)  # logged by the check that follows
        findings = verdict.findings
        if verdict.allowed or not findings or any(f.problem != "unknown" for f in findings):
            return []
        kinds = self.registry.kinds
        batches: list[Batch] = []
        for finding in findings:
            key = kinds[finding.kind].key(finding.value)
            if key:
                append_id(batches, finding.kind, finding.param, finding.value, key)
        turn = state.turn
        sources = {batch.path: Source(INTRODUCED, None, batch.path, turn) for batch in batches}
        admitted = state.admit(
            batches, source=sources, verified=False, limit=self.max_ids_per_call, tool=name
        )
        self.audit.ids_recorded(
            state.session_id,
            name,
            call_id=None,
            added=admitted.added,
            verified=(),
            error=False,
            dropped=admitted.dropped,
            limit=self.max_ids_per_call,
        )
        self.audit.evicted(state.session_id, admitted.evicted)
        if admitted.added:
            state.persist()
        return admitted.added

    def stopped(self, state: LedgerState) -> str | None:
        """The tool whose re-prompts ran out this turn (the first), or None.

        A runtime with no program to raise to (a server) answers every later
        call of the turn with the stop instead of running it.
        """
        if self.mode != "reprompt":
            return None
        limit = self.options.max_reprompts
        return next(
            (tool for tool, count in state.reprompts.of(state.turn).items() if count > limit), None
        )

    def label(self, role: str, new_role: str, state: LedgerState) -> Entry:
        """Rename an entry's role, logged; the old one stays an alias."""
        old = state.role(role).role
        entry = state.label(role, new_role)
        self.audit.relabeled(state.session_id, entry, old)
        state.persist()
        return entry

    def pin(self, role: str, pinned: bool, state: LedgerState) -> Entry:
        """Keep (or stop keeping) an entry whatever the capacity."""
        entry = state.pin(role, pinned)
        state.persist()
        return entry

    def forget(self, role: str, state: LedgerState) -> Entry:
        """Drop an entry now, leaving a tombstone (logged as an eviction)."""
        entry = state.forget(role)
        self.audit.evicted(state.session_id, [entry])
        state.persist()
        return entry
