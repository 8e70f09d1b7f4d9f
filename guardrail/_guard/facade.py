"""The guard: what a program builds and calls; it composes the registry, sessions and engine.

A program builds one ``Guard``, declares its kinds and tools, and opens a
session per conversation. Each decorated tool call is then checked before
it runs (its identifier arguments must come from the ledger) and its result
harvested after (the ids it returned enter the ledger). Every decision is
an audit event.

The work happens in three parts, data flowing one way: the
:class:`~guardrail._guard.registry.Registry` (kinds, tool specs, compiled check
plans), the :class:`~guardrail._guard.sessions.Sessions` (which ledger is
current, the store) and the :class:`~guardrail._guard.engine.Engine` (check and
record against a given ledger, the audit). This class validates the
options, composes the three, and keeps every public method in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from guardrail._check.approvals import Scope, checked_scope
from guardrail._check.tokens import read_token, stale
from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._declare.failure import DEFAULT_FAILS, Fails, compile_fails
from guardrail._declare.spec import DeclareOptions, ToolOptions, ToolSpec, check_options
from guardrail._guard.audit import Audit, SilentLogger
from guardrail._guard.binding import bind_tools, tool_name
from guardrail._guard.decorator import guarded
from guardrail._guard.engine import MODES, Approver, Engine, Mode, Options
from guardrail._guard.patching import Patch
from guardrail._guard.registry import Registry
from guardrail._guard.sessions import Sessions, SessionScope, check_session_id
from guardrail._provenance.failure import result_failed
from guardrail._provenance.seal import check_sealable, seal_result
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind, KindOptions
from guardrail.ledger import DEFAULT_CAPACITY, Entry, Ledger
from guardrail.ledger._ledger import ledger_of, state_of
from guardrail.ledger._state import LedgerState
from guardrail.stores import AsyncStore, MemoryStore, Store

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MODES", "Guard", "GuardInternals", "Mode", "SessionScope", "internals"]

F = TypeVar("F", bound=Callable[..., Any])


class Guard:
    """Checks every identifier argument of every declared tool call against a ledger.

    A tool the guard does not know is allowed by default, and a guard with
    any ``write`` tool warns once per unknown name
    (``guardrail.undeclared_tool``); in production set
    ``refuse_undeclared=True``, so a tool added to the agent but not to the
    guard never runs unchecked. The options are fixed once the guard is
    built: they can be read back as attributes, not reassigned, except ``mode``
    (``guard.mode = "observe"`` to watch a new tool set before enforcing).

    Args:
        mode: What a refusal does. ``"raise"`` raises
            :class:`IdentifierViolation`; ``"reprompt"`` does not run the tool
            and returns a :class:`Rejection` whose text tells the model what
            to do (after ``max_reprompts`` refusals of one tool in one turn,
            :class:`RepromptLimitExceeded`; a turn starts at each
            :meth:`observe_user`, and an allowed call does not reset the
            count); ``"observe"`` runs the tool and logs
            ``outcome="would_refuse"``, but learns nothing from that call.
        capacity: The most entries each session's ledger keeps.
        store: Where sessions live between scopes (default: in memory).
        default_session: A session current wherever no scope is, for a
            single-conversation program (needs a synchronous store).
        redact: A key: the audit logs keyed hashes instead of identifiers.
        refuse_undeclared: Refuse a tool the guard does not know.
        max_reprompts: Refusals of one tool in one turn before raising.
        tombstones: How many evicted ids each ledger remembers (None: as
            many as ``capacity``).
        logger: Where audit events go (see :mod:`guardrail._guard.audit`).
        secret: What each session's seal key is derived from (an HMAC of the
            session id; never stored). Blocks compaction writes verify in
            every process with the same secret: give every worker that shares
            a store the same one. Without it the guard draws a random secret
            (its blocks verify in this process only). A block that does not
            verify (another or a rotated secret, another session) comes back
            as unverified ids. A guard given a secret also seals the results
            it records, and trusts only sealed ones read back
            (:meth:`seal_result`).
        max_ids_per_call: The most new ids one result (or user message) may
            add to a ledger (None: a tenth of ``capacity``); a later use of
            one beyond it is refused with "narrow the search".
        max_cached_sessions: How many sessions stay cached as live ledgers.
        approve: Answers a call that waits for the user on the spot (see the
            approvals page of the docs): called once per request with the
            :class:`ApprovalRequest`, a truthy answer approves it, a falsy
            one declines it. A coroutine function answers for async tools
            only. Without it such a call raises :class:`ApprovalRequired` in
            ``raise`` mode, or returns a :class:`Rejection` saying the call
            waits for the user in ``reprompt`` mode.
        fails: The failure rule of tools that declare no ``fails=``: a text
            prefix, ``"re:PATTERN"``, ``{"field": ..., "value": ...}``, a
            function ``(result) -> bool``, a list of these, or ``False``
            (default: a text starting ``Error:``; see :meth:`failed`).
    """

    _registry: Registry
    _sessions: Sessions
    _engine: Engine

    def __init__(
        self,
        mode: Mode = "raise",
        capacity: int = DEFAULT_CAPACITY,
        *,
        store: Store | AsyncStore | None = None,
        default_session: str | None = None,
        redact: bytes | str | None = None,
        refuse_undeclared: bool = False,
        max_reprompts: int = 3,
        tombstones: int | None = None,
        logger: Any = None,
        secret: bytes | str | None = None,
        max_ids_per_call: int | None = None,
        max_cached_sessions: int = 1024,
        approve: Approver | None = None,
        fails: Fails = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise GuardrailUsageError(f"capacity must be a positive integer, not {capacity!r}")
        options = Options.checked(
            mode, max_reprompts, refuse_undeclared, max_ids_per_call, capacity
        )
        if approve is not None and not callable(approve):
            raise GuardrailUsageError(
                f"approve= is a function taking an ApprovalRequest, not {approve!r}"
            )
        try:
            audit = Audit(logger, redact=redact)
        except ValueError as exc:
            raise GuardrailUsageError(str(exc)) from None
        rule = compile_fails(fails)
        self._registry = Registry(rule if rule is not None else DEFAULT_FAILS)
        self._sessions = Sessions(
            store=store if store is not None else MemoryStore(),
            kinds=self._registry.kinds,
            capacity=capacity,
            tombstones=tombstones,
            secret=secret,
            default_session=default_session,
            not_saved=audit.session_not_saved,
            max_cached=max_cached_sessions,
        )
        self._engine = Engine(
            self._registry,
            audit,
            options,
            approval_key=self._sessions.approval_key,
            approver=approve,
        )

    # -- what the guard was built with ----------------------------------------------------

    @property
    def mode(self) -> Mode:
        """What a refusal does: ``"raise"``, ``"reprompt"`` or ``"observe"``."""
        return self._engine.mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        """Change what a refusal does from the next call on (every session of this guard)."""
        if mode not in MODES:
            raise GuardrailUsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self._engine.mode = mode

    @property
    def capacity(self) -> int:
        """The capacity of each session's ledger."""
        return self._sessions.capacity

    @property
    def tombstones(self) -> int | None:
        """How many tombstones each ledger keeps (None: as many as its capacity)."""
        return self._sessions.tombstones

    @property
    def max_ids_per_call(self) -> int:
        """The most new ids one result (or one user message) may add to a ledger."""
        return self._engine.max_ids_per_call

    @property
    def max_reprompts(self) -> int:
        """Refusals of one tool in one turn that re-prompt before ``RepromptLimitExceeded``."""
        return self._engine.options.max_reprompts

    @property
    def refuse_undeclared(self) -> bool:
        """Whether a tool the guard does not know is refused (else allowed, and logged)."""
        return self._engine.options.refuse_undeclared

    @property
    def fails(self) -> Fails:
        """The failure rule of tools that declare none, as given (None: the default rule)."""
        return self._registry.fails.declared

    @property
    def default_session(self) -> str | None:
        """The session current wherever no ``with guard.session()`` is (None: none)."""
        return self._sessions.default_session

    @property
    def seals_results(self) -> bool:
        """Whether the guard seals the tool results it records (it was given a ``secret``).

        Such a guard trusts a tool result read back from a transcript (a
        compaction rebuilding a ledger) only when it carries its seal; see
        :meth:`seal_result`.
        """
        return self._sessions.has_secret

    @property
    def store(self) -> Store | AsyncStore:
        """Where sessions' ledgers are kept between scopes."""
        return self._sessions.store

    @property
    def audit(self) -> Audit:
        """The audit every decision of this guard is logged through."""
        return self._engine.audit

    @property
    def kinds(self) -> dict[str, Kind]:
        """The kinds declared so far, by name (the guard's own mapping: do not change it)."""
        return self._registry.kinds

    @property
    def specs(self) -> dict[str, ToolSpec]:
        """The tools declared so far, by name (the guard's own mapping: do not change it)."""
        return self._registry.specs

    # -- declaring ------------------------------------------------------------------------

    def add_kind(self, name: str, /, **options: Unpack[KindOptions]) -> Kind:
        """Declare (or redeclare) a kind of identifier; see :class:`guardrail.kinds.Kind`.

        Args:
            name: The kind's name (``order``): letters, digits and underscores.
            **options: See :class:`~guardrail.kinds.KindOptions`: ``pattern``,
                ``normalize``, ``examples``, ``enforce``, ``description``, the
                policies, and the kind's operator ids (``operator_ids``,
                ``operator_per``; see :meth:`add_operator_ids`).
        """
        return self._registry.add_kind(name, **options)

    def add_operator_ids(
        self,
        kind: str,
        values: Iterable[str] | Callable[..., Iterable[str]] | None = None,
        /,
        *,
        per: str = "guard",
        text: str | None = None,
    ) -> None:
        """Declare ids of ``kind`` the operator knows before any conversation (tier ``operator``).

        Plan codes from the business's catalog, SKUs, fare classes: values no
        tool returns, which the operator vouches for. ``values`` is a list,
        or a loader called once for the guard (``per="guard"``), or once per
        session with the session id (``per="session"``); ``text`` takes the
        ids of the kind's pattern from a text the operator passes in (a system
        prompt, a policy document). Nothing a user, model or tool writes is
        ever an operator id. Adds to what the kind declares already; the
        kind's ``operator`` policy says what they may do on a write.
        """
        if kind not in self._registry.kinds:
            raise GuardrailUsageError(
                f"no kind {kind!r}: declare it first with guard.add_kind({kind!r}, ...)"
            )
        self._registry.operator.add(self._registry.kinds[kind], values, per=per, text=text)

    def declare(self, name: str, /, **options: Unpack[DeclareOptions]) -> ToolSpec:
        """Declare a tool that has no Python function here (remote, MCP, recorded).

        A name already declared (by the decorator, ``declare`` or a manifest)
        is a usage error: the second spec would silently replace the first.

        Args:
            name: The tool's name, as the model calls it.
            **options: See :class:`~guardrail.DeclareOptions`: ``ids``,
                ``produces``, ``mints``, ``effect`` (absent: ``"write"``),
                ``verifies``, ``description``.
        """
        return self._registry.declare(name, origin="guard.declare", **options)

    @classmethod
    def from_manifest(cls, manifest: str | Any | Mapping[str, Any], **options: Any) -> Guard:
        """A guard whose kinds and tools come from a JSON or TOML file, or a mapping.

        Every key a manifest takes, with its default and an example, is in the
        manifest reference (docs/manifest.md). ``options`` are the guard's
        (``mode=``, ``capacity=``...). Functions guarded afterwards with
        :meth:`tool`, :meth:`patch` or :meth:`bind` under a name the manifest
        declares take the manifest's declaration.
        """
        guard = cls(**options)
        guard.load_manifest(manifest)
        return guard

    def load_manifest(self, manifest: str | Any | Mapping[str, Any]) -> None:
        """Add the kinds and tools of a manifest; nothing is added if any part is wrong.

        A tool the guard already declares is an error, as it is for ``declare``.
        """
        self._registry.load_manifest(manifest)

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(self, fn: None = None, /, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...

    def tool(self, fn: F | None = None, /, **options: Unpack[ToolOptions]) -> F | Callable[[F], F]:
        """Guard a tool function: check its identifier arguments, run it, record its result.

        Identifier parameters come from ``Annotated[..., Id(kind)]`` in the
        signature and from ``ids=``; result identifiers from the ``Id``
        fields of the returned type and from ``produces=``. An id parameter
        left at a default other than None is checked as if the default were
        passed, unless declared ``Id(kind, default_ok=True)``.

        Args:
            fn: The function (the bare form, ``@guard.tool``); a method, a
                class or static method, sync or async.
            **options: See :class:`~guardrail.ToolOptions`: ``name`` (default:
                the function's), ``ids`` and ``produces`` beyond the
                annotated ones, ``mints``, ``effect`` (absent: ``"write"``),
                ``verifies``, ``description`` (default: the docstring).
        """
        check_options("tool()", options, ToolOptions.__optional_keys__)

        def decorate(function: F) -> F:
            target = (
                function.__func__ if isinstance(function, (classmethod, staticmethod)) else function
            )
            spec = self._registry.declare_function(target, **options)
            get, current = self._sessions.var.get, self._sessions.current
            return guarded(function, spec, self._engine, session=get, current=current)

        return decorate(fn) if fn is not None else decorate

    def bind(
        self,
        tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]],
        /,
        *,
        definitions: Any = None,
    ) -> dict[str, Callable[..., Any]]:
        """Guard the callables that run tools this guard declares (by a manifest, say), by name.

        ``tools`` is a mapping of tool name to callable (functions, bound
        methods, static methods of tool classes), or a list of callables
        named by the guard's declarations (``FindPatient.invoke`` is the tool
        ``find_patient`` when the guard declares that name). Each is guarded
        as a bare :meth:`tool` would: it takes the declaration the guard
        holds; a callable the guard declares no tool for, and which marks no
        ``Id`` of its own, is an error. ``definitions`` are the tool
        definitions sent to the model (OpenAI, Anthropic or MCP shapes, or a
        JSON file of them): the placeholder ids their descriptions quote are
        refused as ``example``, and a declared id parameter a definition
        lacks is an error. Returns the guarded callables by tool name.
        """
        return bind_tools(
            self._registry,
            self._engine,
            lambda function, name: self.tool(name=name)(function),
            tools,
            definitions,
        )

    def patch(self, target: str, /, **options: Unpack[ToolOptions]) -> Patch:
        """Guard a tool function of a module you cannot edit, in place; ``undo()`` restores it.

        ``target`` is ``"module:function"`` or ``"module:Class.method"``; the
        options are :meth:`tool`'s, and so is everything a call does (the
        function goes through the decorator, and wrapt puts the result in
        the module). A module not imported yet is patched when it is
        imported. Code that imported the function by name before the patch
        keeps the original: patch first. A static or class method is named by
        its class (``"retail.tools:GetUserDetails.invoke"`` is the tool
        ``get_user_details``) unless the guard declares the method's own name.
        """
        check_options("patch()", options, ToolOptions.__optional_keys__)

        def decorate(function: Callable[..., Any], owner: type | None) -> Callable[..., Any]:
            if owner is None or options.get("name"):
                return self.tool(**options)(function)
            named: ToolOptions = {**options, "name": tool_name(function, self.specs, owner=owner)}
            return self.tool(**named)(function)

        return Patch(target, decorate)

    # -- sessions -------------------------------------------------------------------------

    def silenced(self) -> Guard:
        """This guard with its audit events dropped, for replays that check thousands of calls.

        The copy shares this guard's registry (kinds and tools, whichever of
        the two declares one, and whenever), sessions and store, and has its
        options. Only its audit differs: it logs nothing, and uses up no
        once-only warning.
        """
        quiet = object.__new__(Guard)
        quiet._registry = self._registry
        quiet._sessions = self._sessions
        engine = self._engine
        quiet._engine = Engine(
            self._registry,
            Audit(SilentLogger()),
            dataclasses.replace(engine.options, mode=engine.mode),
            approval_key=engine.approval_key,
            approver=engine.approver,
        )
        return quiet

    def new_ledger(self, session_id: str | None = None) -> Ledger:
        """An empty ledger with this guard's capacity and kinds, outside any store."""
        return self._sessions.new_ledger(session_id)

    def session(self, session_id: str, *, ledger: Ledger | None = None) -> SessionScope:
        """Make a conversation's ledger current (``with`` or ``async with``).

        The same id gives the same ledger (kept in the guard's store): scopes
        open at once share one live ledger, read from the store by the first
        and saved as each ends. ``ledger=`` starts the session from a saved
        one (merged into the live one if the session is open already).
        """
        check_session_id(session_id)
        if ledger is not None:
            state_of(ledger)  # a usage error now, for anything but a Ledger
        return SessionScope(self._sessions, session_id, ledger)

    @property
    def ledger(self) -> Ledger:
        """The current session's ledger."""
        return ledger_of(self._sessions.current())

    def ledger_for(self, session_id: str) -> Ledger:
        """The live ledger of a session, up to date with the store, without opening a scope.

        The ledger stays cached; what changes in it is written when a scope
        of the session ends, when it leaves the cache, or at
        :meth:`end_session`. To change a session outside a ``with`` block,
        pass ``session=`` to :meth:`check`, :meth:`enforce`, :meth:`record`
        or :meth:`observe_user` instead: each such call is a scope of its own.
        """
        check_session_id(session_id)
        return self._sessions.ledger_for(session_id)

    def end_session(self, session_id: str, *, delete: bool = False) -> None:
        """A conversation is over: write its ledger and drop it from the cache.

        ``delete=True`` deletes it from the store as well. A session still
        open in a ``with guard.session(...)`` block is a usage error.
        """
        check_session_id(session_id)
        self._sessions.end(session_id, delete=delete)

    async def ledger_for_async(self, session_id: str) -> Ledger:
        """:meth:`ledger_for` for a guard whose store is an asynchronous one (``AsyncStore``)."""
        check_session_id(session_id)
        return await self._sessions.ledger_for_async(session_id)

    async def end_session_async(self, session_id: str, *, delete: bool = False) -> None:
        """:meth:`end_session` for a guard whose store is an asynchronous one (``AsyncStore``)."""
        check_session_id(session_id)
        await self._sessions.end_async(session_id, delete=delete)

    async def expire_sessions_async(self, max_idle: float) -> list[str]:
        """:meth:`expire_sessions` for a guard with an asynchronous store (``AsyncStore``)."""
        return await self._sessions.expire_async(max_idle)

    def expire_sessions(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds, from the store and cache.

        Returns their ids. Run it now and then (a cron job, a background
        task): sessions are never deleted behind a program's back.
        """
        return self._sessions.expire(max_idle)

    def cached_sessions(self) -> list[str]:
        """The ids of the sessions this guard holds as live ledgers, least recently used first."""
        return self._sessions.cached()

    # -- the conversation -----------------------------------------------------------------

    def observe_user(
        self, text: str, *, ledger: Ledger | None = None, session: str | None = None
    ) -> list[Entry]:
        """Start a turn with what the user typed: ids of a kind's shape enter, unverified.

        Every method that works on "the current session" also takes
        ``ledger=`` to work on that ledger instead (replaying a transcript,
        say), or ``session=`` to work on that session as a scope of its own
        (``with guard.session(session): ...`` around the one call: a hook
        called once per message needs no ``with`` block).
        """
        if not isinstance(text, str):
            raise GuardrailUsageError(
                f"observe_user takes the user's text, not {type(text).__name__}"
            )
        if session is None:
            return self._engine.observe_user(text, self._ledger(ledger))
        with self._scope(ledger, session) as scoped:
            return self._engine.observe_user(text, state_of(scoped))

    def check(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> Verdict:
        """Check one call without running anything; only last-use times change when allowed.

        The verdict's ``arguments`` are the arguments as given (a mapping,
        where they were JSON text): the guard never rewrites an argument.
        """
        if session is None:  # no context manager on the way: this is the allowed path
            return self._engine.check(name, arguments, self._ledger(ledger))
        with self._scope(ledger, session) as scoped:
            return self._engine.check(name, arguments, state_of(scoped))

    def enforce(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> Verdict:
        """Check a call about to run, the way the guard's mode says.

        Returns the verdict: allowed, or refused in ``reprompt`` mode (send
        ``verdict.message`` back as the tool result) or in ``observe`` mode
        (run the tool anyway). Raises :class:`IdentifierViolation` in
        ``raise`` mode and :class:`RepromptLimitExceeded` when re-prompts
        run out. Runtimes call this, run the tool with
        ``verdict.arguments`` (the arguments as given, parsed where they
        were JSON text; never rewritten), then call :meth:`record`.
        """
        if session is None:
            return self._engine.enforce(name, arguments, self._ledger(ledger))
        with self._scope(ledger, session) as scoped:
            return self._engine.enforce(name, arguments, state_of(scoped))

    async def enforce_async(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> Verdict:
        """:meth:`enforce` for an async runtime: ``Guard(approve=...)`` may be a coroutine."""
        if session is None:
            return await self._engine.enforce_async(name, arguments, self._ledger(ledger))
        async with self._scope(ledger, session) as scoped:
            return await self._engine.enforce_async(name, arguments, state_of(scoped))

    def record(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        result: Any,
        error: bool = False,
        *,
        call_id: str | None = None,
        ledger: Ledger | None = None,
        session: str | None = None,
        trusted: bool = True,
    ) -> list[Entry]:
        """Harvest the result of a call that ran elsewhere; returns the entries added.

        Ids at the tool's declared result fields enter the ledger verified. A
        success of a ``read`` tool declared ``verifies="on_success"`` also
        verifies the ids it was given; a success of a ``write`` tool brings
        its ``mints`` into the ledger. In ``observe`` mode the arguments are
        checked again: a call the guard would have refused records nothing.

        Args:
            name: The tool that ran.
            arguments: What it was called with (a mapping, or JSON text).
            result: What it returned: any JSON-like value, model or text.
            error: The call failed: nothing is recorded. So is a result the
                tool's failure rule reads as a failure (see :meth:`failed`: by
                default a text starting ``Error:``, an error mapping or its
                JSON text, a refusal's text, a :class:`Rejection`).
            call_id: The call's id, kept as the entries' provenance.
            ledger: Record into this ledger, not the current session's.
            session: Record into this session, as a scope of its own.
            trusted: False for a result anyone could have written (a tool
                message of a transcript a client sent, without the server's
                seal): its ids enter unverified, as if typed, and nothing else
                (no confirmation, no mints, no status).
        """
        if session is None:
            state = self._ledger(ledger)
            return self._engine.record(
                name, arguments, result, state, error=error, call_id=call_id, trusted=trusted
            )
        with self._scope(ledger, session) as scoped:
            return self._engine.record(
                name,
                arguments,
                result,
                state_of(scoped),
                error=error,
                call_id=call_id,
                trusted=trusted,
            )

    def failed(self, name: str, result: Any) -> bool:
        """Whether the tool ``name``'s ``result`` is a failure, by the one rule every reader uses.

        Its ``fails=`` (else the guard's), or whatever fails under any rule (a
        refusal, an error shape, a runtime's failure text): a failed result
        yields nothing (:mod:`guardrail._provenance.failure`).
        """
        spec = self._registry.specs.get(name)
        return result_failed(spec.fails if spec is not None else self._registry.fails, result)

    # -- the user's answers ------------------------------------------------------------------

    def approve(
        self,
        request: ApprovalRequest | str,
        *,
        ledger: Ledger | None = None,
        scope: Scope = "value",
    ) -> Entry:
        """The user approved a request: its value is ``confirmed`` for that session, tool and kind.

        ``request`` is one of a verdict's ``approvals`` (or its ``token``), as
        the guard gave it; the call it came from is then allowed when made
        again (another tool asks again). ``scope="call"``: the held call
        alone; the approval is used up as the call runs, and the next call
        with the value asks again. A forged, altered or another guard's
        request is a usage error; one of a session that ended (or was
        deleted, or expired) is :class:`StaleApproval`. ``ledger=``: the
        ledger the request was made on, where it was checked on a ledger of
        no session.
        """
        return self._decide(request, True, ledger, checked_scope(scope))

    def deny(self, request: ApprovalRequest | str, *, ledger: Ledger | None = None) -> Entry:
        """The user declined a request: the value is refused for that tool (``declined``)."""
        return self._decide(request, False, ledger, False)

    async def approve_async(
        self,
        request: ApprovalRequest | str,
        *,
        ledger: Ledger | None = None,
        scope: Scope = "value",
    ) -> Entry:
        """:meth:`approve` for a guard whose store is an asynchronous one."""
        return await self._decide_async(request, True, ledger, checked_scope(scope))

    async def deny_async(
        self, request: ApprovalRequest | str, *, ledger: Ledger | None = None
    ) -> Entry:
        """:meth:`deny` for a guard whose store is an asynchronous one."""
        return await self._decide_async(request, False, ledger, False)

    def _decide(
        self, request: ApprovalRequest | str, approved: bool, ledger: Ledger | None, once: bool
    ) -> Entry:
        engine = self._engine
        session = self._grant_session(request, ledger)
        if session is None:
            return engine.decide(self._ledger(ledger), request, approved, once=once)
        with SessionScope(self._sessions, session, None) as scoped:
            return engine.decide(state_of(scoped), request, approved, once=once)

    async def _decide_async(
        self, request: ApprovalRequest | str, approved: bool, ledger: Ledger | None, once: bool
    ) -> Entry:
        engine = self._engine
        session = self._grant_session(request, ledger)
        if session is None:
            return engine.decide(self._ledger(ledger), request, approved, once=once)
        async with SessionScope(self._sessions, session, None) as scoped:
            return engine.decide(state_of(scoped), request, approved, once=once)

    def _grant_session(self, request: ApprovalRequest | str, ledger: Ledger | None) -> str | None:
        """The session a request's token names, once it verifies; None: decide on ``ledger``."""
        grant = read_token(self._engine.approval_key, request)
        if ledger is not None or grant.session is None:
            if ledger is None:
                raise GuardrailUsageError(
                    "the request was made on a ledger of no session: pass it as ledger="
                )
            return None
        if grant.session in self._sessions.ended:
            raise stale(grant.session)
        return grant.session

    def seal_result(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        content: str,
        *,
        call_id: str,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> str:
        """``content`` with this server's seal on a last line, for a tool result you write.

        A guard with a ``secret`` takes a tool result read back from a
        transcript for its own only when it carries the seal: a MAC keyed by
        the session (``session=``, ``ledger=``, or the current one) over the
        call id, ``name``, the ``arguments`` as the transcript shows them and
        ``content``, exactly (see :mod:`guardrail._provenance.seal`). Write the returned
        text as the message answering ``call_id``; ``run_tool_calls`` seals
        its answers itself. Without a secret, ``content`` comes back as it is.
        """
        check_sealable(content, call_id)
        if not self.seals_results:
            return content
        if session is not None:
            check_session_id(session)
            if ledger is not None:
                raise GuardrailUsageError("pass ledger= or session=, not both")
            target = state_of(self._sessions.new_ledger(session))  # the session's own key
        else:
            target = self._ledger(ledger)
        return seal_result(content, target, call_id=call_id, tool=name, arguments=arguments)

    def label(self, role: str, new_role: str, *, ledger: Ledger | None = None) -> Entry:
        """Give a ledger entry a meaningful role (``damaged_order``); the old one stays an alias."""
        return self._engine.label(role, new_role, self._ledger(ledger))

    def pin(self, role: str, pinned: bool = True, *, ledger: Ledger | None = None) -> Entry:
        """Keep (or stop keeping) an entry whatever the capacity; see :meth:`Ledger.pin`."""
        return self._engine.pin(role, pinned, self._ledger(ledger))

    def forget(self, role: str, *, ledger: Ledger | None = None) -> Entry:
        """Drop an entry now, leaving a tombstone (logged as an eviction)."""
        return self._engine.forget(role, self._ledger(ledger))

    def labeling_tool(self) -> Callable[[str, str], str]:
        """A small tool an agent can call to name a ledger entry by what it is for."""

        def label_identifier(role: str, label: str) -> str:
            """Name a ledger entry: label_identifier("order_2", "damaged_order")."""
            try:
                entry = self.label(role, label)
            except (GuardrailUsageError, KeyError) as exc:
                return f"not labelled: {exc}"
            return f"[{entry.role}] now names the {entry.kind} formerly [{role}]"

        return label_identifier

    def _ledger(self, given: Ledger | None) -> LedgerState:
        """The state of ``ledger=`` where given, else of the current session's ledger."""
        return state_of(given) if given is not None else self._sessions.current()

    def _scope(self, ledger: Ledger | None, session: str) -> SessionScope:
        """The scope of ``session=``, around the one call (``with`` or ``async with``).

        Only for ``session=``: a call on ``ledger=`` or the current ledger
        takes :meth:`_ledger` with no context manager in its way. ``ledger=``
        as well is a usage error.
        """
        if ledger is not None:
            raise GuardrailUsageError("pass ledger= or session=, not both")
        return self.session(session)


class GuardInternals(NamedTuple):
    """A guard's parts, for the runtime adapters: guardrail's own interface, not a program's.

    ``registry`` declares tools under an origin of the adapter's (a server's
    listing, a framework's ``Id`` annotations) and says who declared each;
    ``engine`` runs what a runtime with no program around it needs
    (``introduce``, ``observe_user_once``, ``stopped``) on a ledger's state;
    ``sessions`` is the current ledger and the store.
    """

    registry: Registry
    engine: Engine
    sessions: Sessions


def internals(guard: Guard) -> GuardInternals:
    """The parts ``guard`` is composed of (see :class:`GuardInternals`)."""
    return GuardInternals(guard._registry, guard._engine, guard._sessions)
