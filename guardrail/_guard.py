"""The guard: what a program builds and calls; it composes the registry, sessions and engine.

A program builds one ``Guard``, declares its kinds and tools, and opens a
session per conversation. Each decorated tool call is then checked before
it runs (its identifier arguments must come from the ledger) and its result
harvested after (the ids it returned enter the ledger). Every decision is
an audit event.

The work happens in three parts, data flowing one way: the
:class:`~guardrail._registry.Registry` (kinds, tool specs, compiled check
plans), the :class:`~guardrail._sessions.Sessions` (which ledger is
current, the store) and the :class:`~guardrail._engine.Engine` (check and
record against a given ledger, the audit). This class validates the
options, composes the three, and keeps every public method in one place.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast, overload

from guardrail._audit import Audit, SilentLogger
from guardrail._decorator import GuardedTool, wrap
from guardrail._engine import MODES, Engine, Mode, Options
from guardrail._patching import Patch
from guardrail._registry import Registry
from guardrail._seal import seal_result
from guardrail._sessions import Sessions, SessionScope
from guardrail._spec import Effect, ParamDecl, ProducerDecl, ToolSpec, Verifies
from guardrail._verdict import Verdict
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind, NormalizeSpec
from guardrail.ledger import DEFAULT_CAPACITY, Entry, Ledger
from guardrail.stores import AsyncStore, MemoryStore, Store

__all__ = ["MODES", "Guard", "Mode", "SessionScope"]

F = TypeVar("F", bound=Callable[..., Any])


class Guard:
    """Checks every identifier argument of every declared tool call against a ledger.

    ``mode`` decides what a refusal does: ``"raise"`` raises
    :class:`IdentifierViolation`; ``"reprompt"`` does not run the tool and
    returns a :class:`Rejection` whose text tells the model what to do
    (after ``max_reprompts`` refusals of one tool in one turn it raises
    :class:`RepromptLimitExceeded`; a turn starts at each :meth:`observe_user`,
    and an allowed call of the tool does not reset the count); ``"observe"`` runs the tool and logs
    ``outcome="would_refuse"``, but learns nothing from that call (no
    confirmation, no mints, no harvest of its result). ``capacity`` bounds
    each session's ledger. ``redact`` (a key) logs keyed hashes instead of
    identifier values. ``secret`` derives each ledger's seal key from its
    session id, so a server that rebuilds the ledger from the transcript on
    every request still trusts its own ledger blocks (and a block of one
    session never verifies in another); such a guard also trusts a tool
    result read back from a transcript only when it carries the server's
    seal (:meth:`seal_result`). ``max_ids_per_call`` bounds the new
    ids one result (or one user message) may add to a ledger (None: a tenth
    of ``capacity``); those beyond it are not kept, and a later use is
    refused with "narrow the search".

    A tool the guard does not know is allowed by default
    (``refuse_undeclared=False``, convenient while declaring tools); a guard
    with any ``write`` tool then warns once per unknown tool name
    (``guardrail.undeclared_tool``). In production set
    ``refuse_undeclared=True``: an undeclared tool is refused like a bad id,
    so a tool added to the agent but not to the guard never runs unchecked.

    The options are fixed once the guard is built: ``mode``, ``capacity``
    and the others can be read back as attributes, not reassigned.
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
    ) -> None:
        if mode not in MODES:
            raise GuardrailUsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not isinstance(capacity, int) or capacity < 1:
            raise GuardrailUsageError(f"capacity must be a positive integer, not {capacity!r}")
        if max_ids_per_call is None:
            max_ids_per_call = max(1, capacity // 10)
        elif type(max_ids_per_call) is not int or max_ids_per_call < 1:
            raise GuardrailUsageError(
                f"max_ids_per_call must be a positive integer (or None for a tenth of the "
                f"capacity), not {max_ids_per_call!r}"
            )
        if type(max_cached_sessions) is not int or max_cached_sessions < 1:
            raise GuardrailUsageError(
                f"max_cached_sessions is how many sessions to keep as live ledgers (>= 1), "
                f"not {max_cached_sessions!r}"
            )
        if not isinstance(max_reprompts, int) or max_reprompts < 0:
            raise GuardrailUsageError("max_reprompts must be an integer >= 0")
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if secret is not None and (not isinstance(secret, bytes) or not secret):
            raise GuardrailUsageError("secret must be non-empty bytes or text (a server's key)")
        try:
            audit = Audit(logger, redact=redact)
        except ValueError as exc:
            raise GuardrailUsageError(str(exc)) from None
        self._registry = Registry()
        self._sessions = Sessions(
            store=store if store is not None else MemoryStore(),
            kinds=self._registry.kinds,
            capacity=capacity,
            tombstones=tombstones,
            secret=secret,
            default_session=default_session,
            max_cached=max_cached_sessions,
        )
        if self._sessions.is_async and default_session is not None:
            raise GuardrailUsageError(
                "default_session needs a synchronous store (a change outside any scope is "
                "written at once, with no coroutine to wait in); with an asynchronous store, "
                "open each conversation with `async with guard.session(id)`"
            )
        options = Options(mode, max_reprompts, refuse_undeclared, max_ids_per_call)
        self._engine = Engine(self._registry, audit, options, self._save_default)

    # -- what the guard was built with ----------------------------------------------------

    @property
    def mode(self) -> Mode:
        """What a refusal does: ``"raise"``, ``"reprompt"`` or ``"observe"``."""
        return self._engine.mode

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

    def add_kind(
        self,
        name: str,
        *,
        pattern: str | None = None,
        normalize: NormalizeSpec = None,
        examples: Iterable[str] = (),
        enforce: bool = True,
        description: str = "",
        like: str | None = None,
    ) -> Kind:
        """Declare (or redeclare) a kind of identifier; see :class:`guardrail.kinds.Kind`.

        ``like`` takes a ready-made kind's pattern and normaliser:
        ``guard.add_kind("email", like="email")``; also ``"uuid"``, ``"url"``,
        ``"phone"``, ``"iban"`` and ``"prefixed:cus_"`` (ids that start with
        ``cus_``). See :meth:`guardrail.kinds.Kind.build`.
        """
        return self._registry.add_kind(
            name,
            pattern=pattern,
            normalize=normalize,
            examples=examples,
            enforce=enforce,
            description=description,
            like=like,
        )

    def declare(
        self,
        name: str,
        *,
        ids: Mapping[str, ParamDecl] | None = None,
        produces: Mapping[str, ProducerDecl] | None = None,
        mints: Mapping[str, ParamDecl] | None = None,
        effect: Effect = "write",
        verifies: Verifies = True,
        description: str = "",
    ) -> ToolSpec:
        """Declare a tool that has no Python function here (remote, MCP, recorded).

        ``verifies`` is as for :meth:`tool`. A name already declared (by the
        decorator, ``declare`` or a manifest) is a usage error: the second
        spec would silently replace the first.
        """
        return self._registry.declare(
            name,
            origin="guard.declare",
            ids=ids,
            produces=produces,
            mints=mints,
            effect=effect,
            verifies=verifies,
            description=description,
        )

    @classmethod
    def from_manifest(cls, manifest: str | Any | Mapping[str, Any], **options: Any) -> Guard:
        """A guard whose kinds and tools come from a JSON or TOML file, or a mapping."""
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
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        ids: Mapping[str, ParamDecl] | None = None,
        produces: Mapping[str, ProducerDecl] | None = None,
        mints: Mapping[str, ParamDecl] | None = None,
        effect: Effect | None = None,
        verifies: Verifies = True,
        description: str | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        ids: Mapping[str, ParamDecl] | None = None,
        produces: Mapping[str, ProducerDecl] | None = None,
        mints: Mapping[str, ParamDecl] | None = None,
        effect: Effect | None = None,
        verifies: Verifies = True,
        description: str | None = None,
    ) -> F | Callable[[F], F]:
        """Guard a tool function: check its identifier arguments, run it, record its result.

        Identifier parameters come from ``Annotated[..., Id(kind)]`` in the
        signature and from ``ids=``; result identifiers from the ``Id``
        fields of the returned type and from ``produces=``. A tool with no
        ``effect`` is a ``write`` (the strict side). An id parameter left at
        a default other than None is checked as if the default were passed,
        unless declared ``Id(kind, default_ok=True)`` (or
        ``{"kind": ..., "default_ok": True}`` in ``ids=``).

        A successful ``read`` verifies a user-typed id argument only when a
        declared result field returns it (``verifies=True``, the default;
        ``False`` is accepted and means the same). ``verifies="on_success"``
        is for a read that fails for unknown ids: any success confirms every
        id it took.
        """

        def decorate(function: F) -> F:
            target = (
                function.__func__ if isinstance(function, (classmethod, staticmethod)) else function
            )
            spec, signature = self._registry.declare_function(
                target,
                name=name,
                ids=ids,
                produces=produces,
                mints=mints,
                effect=effect or "write",
                verifies=verifies,
                description=description,
            )
            leading = tuple(
                parameter.default
                for parameter in (signature.parameters.values() if signature is not None else ())
                if parameter.kind is inspect.Parameter.POSITIONAL_ONLY
            )
            sessions = self._sessions
            tool = GuardedTool(
                spec,
                self._engine,
                session=sessions.var.get,
                current=sessions.current,
                leading=leading,
            )
            return wrap(tool, function)

        return decorate(fn) if fn is not None else decorate

    def patch(
        self,
        target: str,
        /,
        *,
        name: str | None = None,
        ids: Mapping[str, ParamDecl] | None = None,
        produces: Mapping[str, ProducerDecl] | None = None,
        mints: Mapping[str, ParamDecl] | None = None,
        effect: Effect | None = None,
        verifies: Verifies = True,
        description: str | None = None,
    ) -> Patch:
        """Guard a tool function of a module you cannot edit, in place; ``undo()`` restores it.

        ``target`` is ``"module:function"`` or ``"module:Class.method"``; the
        options are :meth:`tool`'s, and so is everything a call does (the
        function goes through the decorator, and wrapt puts the result in
        the module). A module not imported yet is patched when it is
        imported. Code that imported the function by name before the patch
        keeps the original: patch first.
        """

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            return self.tool(
                name=name,
                ids=ids,
                produces=produces,
                mints=mints,
                effect=effect,
                verifies=verifies,
                description=description,
            )(function)

        return Patch(target, decorate)

    # -- sessions -------------------------------------------------------------------------

    def silenced(self) -> Guard:
        """This guard with its audit events dropped, for replays that check thousands of calls.

        The copy shares this guard's registry, so both always agree on the
        kinds and tools, whichever of them declares one and whenever (before
        or after ``silenced()``); it shares the sessions and the store too
        (one current ledger, one live ledger per session id). Its mode and
        other options are this guard's. Only its audit differs: it logs
        nothing, and uses up no once-only warning.
        """
        quiet = object.__new__(Guard)
        quiet._registry = self._registry
        quiet._sessions = self._sessions
        quiet._engine = Engine(
            self._registry, Audit(SilentLogger()), self._engine.options, quiet._save_default
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
        _check_session_id(session_id)
        return SessionScope(self, session_id, ledger)

    @property
    def ledger(self) -> Ledger:
        """The current session's ledger."""
        return self._sessions.current()

    def ledger_for(self, session_id: str) -> Ledger:
        """The live ledger of a session, up to date with the store, without opening a scope.

        The ledger stays cached; what changes in it is written when a scope
        of the session ends, when it leaves the cache, or at
        :meth:`end_session`. To change a session outside a ``with`` block,
        pass ``session=`` to :meth:`check`, :meth:`enforce`, :meth:`record`
        or :meth:`observe_user` instead: each such call is a scope of its own.
        """
        _check_session_id(session_id)
        return self._sessions.ledger_for(session_id)

    def end_session(self, session_id: str, *, delete: bool = False) -> None:
        """A conversation is over: write its ledger and drop it from the cache.

        ``delete=True`` deletes it from the store as well. A session still
        open in a ``with guard.session(...)`` block is a usage error.
        """
        _check_session_id(session_id)
        self._sessions.end(session_id, delete=delete)

    async def ledger_for_async(self, session_id: str) -> Ledger:
        """:meth:`ledger_for` for a guard whose store is an asynchronous one (``AsyncStore``)."""
        _check_session_id(session_id)
        return await self._sessions.ledger_for_async(session_id)

    async def end_session_async(self, session_id: str, *, delete: bool = False) -> None:
        """:meth:`end_session` for a guard whose store is an asynchronous one (``AsyncStore``)."""
        _check_session_id(session_id)
        await self._sessions.end_async(session_id, delete=delete)

    async def expire_sessions_async(self, max_idle: float) -> list[str]:
        """:meth:`expire_sessions` for a guard with an asynchronous store (``AsyncStore``)."""
        _check_idle(max_idle)
        if not self._sessions.is_async:
            return self.expire_sessions(max_idle)
        expired = await cast(AsyncStore, self._sessions.store).expire(float(max_idle))
        for session_id in expired:
            try:
                await self._sessions.end_async(session_id, delete=False)
            except GuardrailUsageError:
                continue
        return expired

    def expire_sessions(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds, from the store and cache.

        Returns their ids. Run it now and then (a cron job, a background
        task): sessions are never deleted behind a program's back.
        """
        _check_idle(max_idle)
        expired = self._sessions.sync_store().expire(float(max_idle))
        for session_id in expired:
            try:
                self._sessions.end(session_id, delete=False)
            except GuardrailUsageError:
                continue  # open in a scope right now: its next write starts it anew
        return expired

    def cached_sessions(self) -> list[str]:
        """The ids of the sessions this guard holds as live ledgers, least recently used first."""
        return self._sessions.cached()

    def _save_default(self, ledger: Ledger) -> None:
        """Save the default session after a change to it: no scope's end will."""
        try:
            self._sessions.save_default(ledger)
        except Exception as failure:
            self.audit.session_not_saved(self._sessions.default_session, failure)
            raise

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
        if session is not None:
            with self.session(session) as scoped:
                return self._engine.observe_user(text, self._given(ledger, scoped))
        return self._engine.observe_user(text, self._ledger(ledger))

    def check(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        ledger: Ledger | None = None,
        session: str | None = None,
    ) -> Verdict:
        """Check one call without running anything; only last-use times change when allowed.

        The verdict's ``arguments`` are the ones to run the tool with: each
        identifier as the ledger spells it.
        """
        if session is not None:
            with self.session(session) as scoped:
                return self._engine.check(name, arguments, self._given(ledger, scoped))
        return self._engine.check(name, arguments, self._ledger(ledger))

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
        ``verdict.arguments`` (each identifier as the ledger spells it),
        then call :meth:`record`.
        """
        if session is not None:
            with self.session(session) as scoped:
                return self._engine.enforce(name, arguments, self._given(ledger, scoped))
        return self._engine.enforce(name, arguments, self._ledger(ledger))

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
    ) -> list[Entry]:
        """Harvest the result of a call that ran elsewhere; returns the entries added.

        Ids at the tool's declared result fields enter the ledger verified. A
        success of a ``read`` tool declared ``verifies="on_success"`` also
        verifies the ids it was given; a success of a ``write`` tool brings
        its ``mints`` into the ledger. In ``observe`` mode the arguments are
        checked again: a call the guard would have refused records nothing.
        Neither does a failure: ``error=True``, or a result that is an error
        in success's clothing (see :func:`guardrail._harvest.failed`: an error
        mapping or its JSON text, a refusal's text, a :class:`Rejection`).
        """
        if session is not None:
            with self.session(session) as scoped:
                target = self._given(ledger, scoped)
                return self._engine.record(name, arguments, result, error, call_id, target)
        return self._engine.record(name, arguments, result, error, call_id, self._ledger(ledger))

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

        A guard with a ``secret`` reads a tool result back from a transcript
        (when compaction rebuilds a ledger from what a client sent) as the
        server's own only when it carries the seal: a MAC keyed by the
        session, over the call id, the tool's ``name``, the call's
        ``arguments`` as the transcript shows them (the model's, as JSON text
        or a mapping) and ``content``, exactly. Any other result adds its ids
        unverified at most. Write the returned text as the content of the
        message answering ``call_id``; ``run_tool_calls`` seals its answers
        itself. The session is ``session=`` (its id), ``ledger=``, or the
        current one. Without a secret there is nothing to seal with, and
        ``content`` comes back as it is.
        """
        if not isinstance(content, str):
            raise GuardrailUsageError(
                f"seal_result seals the text of a tool result, not {type(content).__name__}; "
                "write the result as the text you send, then seal that"
            )
        if not isinstance(call_id, str) or not call_id:
            raise GuardrailUsageError("seal_result needs the call_id the result answers")
        if not self.seals_results:
            return content
        if session is not None:
            _check_session_id(session)
            if ledger is not None:
                raise GuardrailUsageError("pass ledger= or session=, not both")
            target = self._sessions.new_ledger(session)  # the key is the session's own
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

    def _ledger(self, given: Ledger | None) -> Ledger:
        """``ledger=`` where given, else the current session's."""
        return given if given is not None else self._sessions.current()

    @staticmethod
    def _given(given: Ledger | None, scoped: Ledger) -> Ledger:
        """The scope's ledger for a ``session=`` call; ``ledger=`` as well is a usage error."""
        if given is not None:
            raise GuardrailUsageError("pass ledger= or session=, not both")
        return scoped


def _check_idle(max_idle: object) -> None:
    if isinstance(max_idle, bool) or not isinstance(max_idle, (int, float)) or max_idle < 0:
        raise GuardrailUsageError(f"max_idle is a number of seconds >= 0, not {max_idle!r}")


def _check_session_id(session_id: object) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise GuardrailUsageError("a session id is a non-empty string, e.g. a conversation id")
