"""The guard: kinds and tool specs, sessions, ``check`` and ``record``, and the decorator.

A program builds one ``Guard``, declares its kinds and tools, and opens a
session per conversation. Each decorated tool call is then checked before
it runs (its identifier arguments must come from the ledger) and its result
harvested after (the ids it returned enter the ledger). Every decision is
an audit event.
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import hmac
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast, overload

from guardrail._audit import Audit, SilentLogger
from guardrail._check import (
    CheckPlan,
    check_arguments,
    compile_plan,
    malformed_arguments,
    parse_arguments,
    undeclared_verdict,
)
from guardrail._decorator import GuardedTool, positions, wrap
from guardrail._harvest import (
    Batch,
    Found,
    batches_of,
    failed,
    recordable_batches,
    unreadable_problem,
    yields_nothing,
)
from guardrail._manifest import read_manifest
from guardrail._spec import (
    EFFECTS,
    ON_SUCCESS,
    Effect,
    ParamDecl,
    ParamSpec,
    Producer,
    ProducerDecl,
    ToolSpec,
    Verifies,
    param_specs,
    producers,
    signature_ids,
)
from guardrail._verdict import Verdict
from guardrail.errors import (
    GuardrailUsageError,
    IdentifierViolation,
    ManifestError,
    RepromptLimitExceeded,
)
from guardrail.kinds import Kind, NormalizeSpec
from guardrail.ledger import DEFAULT_CAPACITY, Entry, Ledger, Source
from guardrail.stores import MemoryStore, Store

Mode = Literal["raise", "reprompt", "observe"]
MODES: tuple[str, ...] = ("raise", "reprompt", "observe")
F = TypeVar("F", bound=Callable[..., Any])

_USER = "user"
#: Unknown tool names remembered for warning once each; beyond this many, no more warnings
#: (a model inventing tool names must not grow the guard's memory without bound).
_UNDECLARED_KEPT = 1000


class SessionScope:
    """``with guard.session(id) as ledger`` (or ``async with``): makes a ledger current.

    Scopes of one session id open at the same time (threads, tasks) share
    one ledger object. Each scope saves it to the guard's store as it ends;
    if the save fails while the block is already leaving by an exception,
    that exception goes on (the failure is logged and added as a note),
    else the :class:`~guardrail.errors.StoreError` is raised.
    """

    def __init__(self, guard: Guard, session_id: str, ledger: Ledger | None) -> None:
        self._guard = guard
        self.session_id = session_id
        self._given = ledger
        self._tokens: list[tuple[contextvars.Token[Ledger | None], Ledger]] = []

    @property
    def guard(self) -> Guard:
        """The guard whose session this is (its kinds and tool specs)."""
        return self._guard

    def __enter__(self) -> Ledger:
        ledger = self._guard._open(self.session_id, self._given)
        self._tokens.append((self._guard._var.set(ledger), ledger))
        return ledger

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        token, ledger = self._tokens.pop()
        self._guard._var.reset(token)
        self._guard._close(self.session_id, ledger, exc)

    async def __aenter__(self) -> Ledger:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: object, exc: BaseException | None, traceback: object
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


class _Live:
    """A session open in one guard: its one ledger, and how many scopes hold it."""

    __slots__ = ("ledger", "lock", "scopes")

    def __init__(self) -> None:
        self.ledger: Ledger | None = None
        self.lock = threading.Lock()  # held while the ledger is read from the store
        self.scopes = 0


class Guard:
    """Checks every identifier argument of every declared tool call against a ledger.

    ``mode`` decides what a refusal does: ``"raise"`` raises
    :class:`IdentifierViolation`; ``"reprompt"`` does not run the tool and
    returns a :class:`Rejection` whose text tells the model what to do
    (after ``max_reprompts`` refusals of one tool in a row it raises
    :class:`RepromptLimitExceeded`); ``"observe"`` runs the tool and logs
    ``outcome="would_refuse"``, but learns nothing from that call (no
    confirmation, no mints, no harvest of its result). ``capacity`` bounds
    each session's ledger. ``redact`` (a key) logs keyed hashes instead of
    identifier values. ``secret`` derives each ledger's seal key from its
    session id, so a server that rebuilds the ledger from the transcript on
    every request still trusts its own ledger blocks (and a block of one
    session never verifies in another). ``max_ids_per_call`` bounds the new
    ids one result (or one user message) may add to a ledger (None: a tenth
    of ``capacity``); those beyond it are not kept, and a later use is
    refused with "narrow the search".

    A tool the guard does not know is allowed by default
    (``refuse_undeclared=False``, convenient while declaring tools); a guard
    with any ``write`` tool then warns once per unknown tool name
    (``guardrail.undeclared_tool``). In production set
    ``refuse_undeclared=True``: an undeclared tool is refused like a bad id,
    so a tool added to the agent but not to the guard never runs unchecked.
    """

    def __init__(
        self,
        mode: Mode = "raise",
        capacity: int = DEFAULT_CAPACITY,
        *,
        store: Store | None = None,
        default_session: str | None = None,
        redact: bytes | str | None = None,
        refuse_undeclared: bool = False,
        max_reprompts: int = 3,
        tombstones: int | None = None,
        logger: Any = None,
        secret: bytes | str | None = None,
        max_ids_per_call: int | None = None,
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
        self.max_ids_per_call = max_ids_per_call
        if not isinstance(max_reprompts, int) or max_reprompts < 0:
            raise GuardrailUsageError("max_reprompts must be an integer >= 0")
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if secret is not None and (not isinstance(secret, bytes) or not secret):
            raise GuardrailUsageError("secret must be non-empty bytes or text (a server's key)")
        self._secret: bytes | None = secret
        self.mode: Mode = mode
        self.capacity = capacity
        self.tombstones = tombstones
        self.max_reprompts = max_reprompts
        self.refuse_undeclared = refuse_undeclared
        self.default_session = default_session
        self.store: Store = store if store is not None else MemoryStore()
        try:
            self.audit = Audit(logger, redact=redact)
        except ValueError as exc:
            raise GuardrailUsageError(str(exc)) from None
        self.kinds: dict[str, Kind] = {}
        self.specs: dict[str, ToolSpec] = {}
        #: Where each tool was declared (a function's module and qualname, guard.declare or
        #: a manifest), for the error that refuses a second tool of the same name.
        self._origins: dict[str, str] = {}
        self._plans: dict[str, CheckPlan] = {}
        self._var: contextvars.ContextVar[Ledger | None] = contextvars.ContextVar(
            "guardrail.session", default=None
        )
        self._open_lock = threading.Lock()
        self._live: dict[str, _Live] = {}  # sessions open in some scope, by id
        self._default: Ledger | None = None
        #: Whether any write tool is declared: then an unknown tool is worth a warning.
        self._has_writes = False
        #: Unknown tool names already warned about (bounded), and the lock that makes it once.
        self._undeclared_seen: set[str] = set()
        self._undeclared_lock = threading.Lock()

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
    ) -> Kind:
        """Declare (or redeclare) a kind of identifier; see :class:`guardrail.kinds.Kind`."""
        kind = Kind.build(
            name,
            pattern=pattern,
            normalize=normalize,
            examples=examples,
            enforce=enforce,
            description=description,
        )
        self.kinds[name] = kind
        self._recompile()
        return kind

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
        return self._declare(
            name,
            origin="guard.declare",
            ids=ids,
            produces=produces,
            mints=mints,
            effect=effect,
            verifies=verifies,
            description=description,
        )

    def _declare(
        self,
        name: str,
        *,
        origin: str,
        ids: Mapping[str, ParamDecl] | None = None,
        produces: Mapping[str, ProducerDecl] | None = None,
        mints: Mapping[str, ParamDecl] | None = None,
        effect: Effect = "write",
        verifies: Verifies = True,
        description: str = "",
    ) -> ToolSpec:
        self._require_new_name(name, origin)
        spec = self._build_spec(
            name,
            params=param_specs(ids, tool=name),
            produced=producers(produces, tool=name),
            mints=param_specs(mints, tool=name),
            effect=effect,
            verifies=verifies,
            description=description,
        )
        self._register(spec, origin)
        return spec

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
        data = read_manifest(manifest)
        where = "manifest" if isinstance(manifest, Mapping) else str(manifest)
        origin = "manifest" if isinstance(manifest, Mapping) else f"manifest {where}"
        trial = Guard(capacity=self.capacity)
        trial.kinds = dict(self.kinds)
        trial.specs = dict(self.specs)
        trial._origins = dict(self._origins)
        try:
            for name, options in data.get("kinds", {}).items():
                trial.add_kind(name, **options)
            for name, options in data["tools"].items():
                trial._declare(name, origin=origin, **options)
        except GuardrailUsageError as exc:
            raise ManifestError(str(exc), where=where, tool=exc.tool) from None
        # In place: open ledgers hold this very mapping for normalising.
        self.kinds.update(trial.kinds)
        for name, spec in trial.specs.items():
            if name not in self.specs:
                self.specs[name] = spec
                self._origins[name] = trial._origins[name]
        self._recompile()

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
            return self._decorate(
                function,
                name=name,
                ids=ids,
                produces=produces,
                mints=mints,
                effect=effect or "write",
                verifies=verifies,
                description=description,
            )

        return decorate(fn) if fn is not None else decorate

    # -- sessions -------------------------------------------------------------------------

    def silenced(self) -> Guard:
        """This guard's kinds, tools and store with its audit events dropped.

        A snapshot for replays and evaluations that check thousands of
        calls: tools declared on the original later are not seen.
        """
        quiet = copy.copy(self)
        quiet.audit = Audit(SilentLogger())
        return quiet

    def new_ledger(self, session_id: str | None = None) -> Ledger:
        """An empty ledger with this guard's capacity and kinds, outside any store."""
        ledger = Ledger(
            capacity=self.capacity,
            tombstones=self.tombstones,
            kinds=self.kinds,
            session_id=session_id,
        )
        if self._secret is not None:
            session = (session_id or "").encode("utf-8", "surrogatepass")
            message = b"guardrail seal\0" + session
            ledger.seal_key = hmac.new(self._secret, message, hashlib.sha256).digest()
        return ledger

    def session(self, session_id: str, *, ledger: Ledger | None = None) -> SessionScope:
        """Make a conversation's ledger current (``with`` or ``async with``).

        The same id gives the same ledger (kept in the guard's store): scopes
        open at once share one live ledger, read from the store by the first
        and saved as each ends. ``ledger=`` starts the session from a saved
        one (merged into the live one if the session is open already).
        """
        if not isinstance(session_id, str) or not session_id:
            raise GuardrailUsageError("a session id is a non-empty string, e.g. a conversation id")
        return SessionScope(self, session_id, ledger)

    @property
    def ledger(self) -> Ledger:
        """The current session's ledger."""
        return self._current()

    def _open(self, session_id: str, given: Ledger | None) -> Ledger:
        """The live ledger of ``session_id``, read from the store by its first scope only."""
        with self._open_lock:
            live = self._live.get(session_id)
            if live is None:
                live = self._live[session_id] = _Live()
            live.scopes += 1
        try:
            with live.lock:
                if live.ledger is None:
                    live.ledger = self._load(session_id, given)
                elif given is not None and given is not live.ledger:
                    live.ledger.merge(given)  # open already: one ledger, which only grows
                return live.ledger
        except BaseException:
            self._release(session_id)
            raise

    def _load(self, session_id: str, given: Ledger | None) -> Ledger:
        """A session's ledger as a scope starts: ``given``, the stored one, or a new one."""
        ledger = given if given is not None else self.store.load(session_id)
        if ledger is None:
            return self.new_ledger(session_id)
        if ledger.kinds is not self.kinds:  # keyed by this guard's normalisers from now on
            ledger._use_kinds(self.kinds)
        ledger.session_id = session_id
        return ledger

    def _release(self, session_id: str) -> None:
        """One scope of ``session_id`` ended: the last one lets the live ledger go."""
        with self._open_lock:
            live = self._live.get(session_id)
            if live is not None:
                live.scopes -= 1
                if live.scopes <= 0:
                    del self._live[session_id]

    def _close(self, session_id: str, ledger: Ledger, exc: BaseException | None) -> None:
        """Save a session as a scope ends, never hiding the exception it ends by."""
        try:
            self.store.save(session_id, ledger)
        except Exception as failure:
            self.audit.session_not_saved(session_id, failure)
            if exc is None:
                raise
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note(f"guardrail: session {session_id!r} was not saved: {failure}")
        finally:
            self._release(session_id)

    def _save_default(self, ledger: Ledger) -> None:
        """Save the default session after a change to it: no scope's end will."""
        if ledger is self._default and self.default_session is not None:
            try:
                self.store.save(self.default_session, ledger)
            except Exception as failure:
                self.audit.session_not_saved(self.default_session, failure)
                raise

    def _current(self) -> Ledger:
        ledger = self._var.get()
        if ledger is not None:
            return ledger
        if self.default_session is None:
            raise GuardrailUsageError(
                "a guarded call ran outside any session. Wrap each conversation in "
                "`with guard.session(conversation_id):` (or `async with`), or build the guard "
                "with Guard(default_session='default') for a single-conversation program."
            )
        if self._default is None:
            # Opened as a scope that never ends: one live ledger, shared with any
            # `with guard.session(default_session)`, saved after each change.
            self._default = self._open(self.default_session, None)
        return self._default

    # -- the conversation -----------------------------------------------------------------

    def observe_user(self, text: str, *, ledger: Ledger | None = None) -> list[Entry]:
        """Start a turn with what the user typed: ids of a kind's shape enter, unverified.

        Every method that works on "the current session" also takes
        ``ledger=`` to work on that ledger instead (replaying a transcript,
        say).
        """
        if not isinstance(text, str):
            raise GuardrailUsageError(
                f"observe_user takes the user's text, not {type(text).__name__}"
            )
        ledger = ledger if ledger is not None else self._current()
        with ledger.lock:
            turn = ledger.next_turn()
            ledger.observe_text(text)
            found = []
            for kind in self.kinds.values():
                for token in kind.find(text):
                    key = kind.key(token)  # None: a token its normaliser cannot read is no id
                    if key and key not in kind.examples:
                        found.append(Found(kind.name, token, key, "text"))
            admitted = ledger.admit(
                found,
                source=Source(_USER, None, "text", turn),
                verified=False,
                limit=self.max_ids_per_call,
                tool=_USER,
            )
        self.audit.user_observed(ledger.session_id, admitted.added)
        self.audit.ids_dropped(ledger.session_id, _USER, admitted.dropped, self.max_ids_per_call)
        self.audit.evicted(ledger.session_id, admitted.evicted)
        if admitted.added:
            self._save_default(ledger)
        return admitted.added

    def check(
        self, name: str, arguments: Mapping[str, Any] | str, *, ledger: Ledger | None = None
    ) -> Verdict:
        """Check one call without running anything; only last-use times change when allowed.

        The verdict's ``arguments`` are the ones to run the tool with: each
        identifier as the ledger spells it.
        """
        ledger = ledger if ledger is not None else self._current()
        verdict = self._check(name, arguments, ledger)
        self.audit.call_checked(
            ledger.session_id,
            verdict,
            effect=self._effect(name),
            mode=self.mode,
            outcome=self._allowed_outcome(name) if verdict.allowed else "refused",
        )
        return verdict

    def enforce(
        self, name: str, arguments: Mapping[str, Any] | str, *, ledger: Ledger | None = None
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
        return self._enforce(name, arguments, ledger if ledger is not None else self._current())

    def record(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        result: Any,
        error: bool = False,
        *,
        call_id: str | None = None,
        ledger: Ledger | None = None,
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
        ledger = ledger if ledger is not None else self._current()
        plan = self._plans.get(name)
        if plan is None:
            return []
        args = parse_arguments(arguments) or {}
        # Observe mode lets a call it would refuse run; what that call touched or returned
        # belongs to someone else's record, so it is checked again and then left unrecorded.
        verdict = self._check(name, args, ledger) if self.mode == "observe" else None
        return self._record(plan, args, result, error, call_id, ledger, verdict)

    def label(self, role: str, new_role: str, *, ledger: Ledger | None = None) -> Entry:
        """Give a ledger entry a meaningful role (``damaged_order``); the old one stays an alias."""
        ledger = ledger if ledger is not None else self._current()
        old = ledger[role].role
        entry = ledger.label(role, new_role)
        self.audit.relabeled(ledger.session_id, entry, old)
        self._save_default(ledger)
        return entry

    def pin(self, role: str, pinned: bool = True, *, ledger: Ledger | None = None) -> Entry:
        """Keep (or stop keeping) an entry whatever the capacity; see :meth:`Ledger.pin`."""
        ledger = ledger if ledger is not None else self._current()
        entry = ledger.pin(role, pinned)
        self._save_default(ledger)
        return entry

    def forget(self, role: str, *, ledger: Ledger | None = None) -> Entry:
        """Drop an entry now, leaving a tombstone (logged as an eviction)."""
        ledger = ledger if ledger is not None else self._current()
        entry = ledger.forget(role)
        self.audit.evicted(ledger.session_id, [entry])
        self._save_default(ledger)
        return entry

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

    # -- internals ------------------------------------------------------------------------

    def _warn_undeclared(self, name: str, ledger: Ledger) -> None:
        """Warn once per unknown tool name: a guard with write tools lets it run unchecked."""
        if not self.audit.levels[logging.WARNING]:
            return  # nothing would be seen: a silenced copy must not use up the warning
        with self._undeclared_lock:
            if name in self._undeclared_seen or len(self._undeclared_seen) >= _UNDECLARED_KEPT:
                return
            self._undeclared_seen.add(name)
        self.audit.undeclared_tool(ledger.session_id, name)

    def _allowed_outcome(self, name: str) -> str:
        # A tool the guard does not know declares no ids: allowed, and logged as undeclared.
        return "allowed" if name in self._plans else "undeclared"

    def _effect(self, name: str) -> str | None:
        spec = self.specs.get(name)
        return spec.effect if spec is not None else None

    def _check(self, name: str, arguments: Any, ledger: Ledger) -> Verdict:
        plan = self._plans.get(name)
        if plan is None:
            if self.refuse_undeclared:
                return undeclared_verdict(name)
            if self._has_writes and name not in self._undeclared_seen:
                self._warn_undeclared(name, ledger)
            given = arguments if type(arguments) is dict else parse_arguments(arguments)
            return Verdict(tool=name, allowed=True, arguments=given)
        args = arguments if type(arguments) is dict else parse_arguments(arguments)
        if args is None:
            return malformed_arguments(plan, arguments)
        return check_arguments(plan, args, ledger)

    def _enforce(self, name: str, arguments: Any, ledger: Ledger) -> Verdict:
        verdict = self._check(name, arguments, ledger)
        session = ledger.session_id
        if verdict.allowed:
            if ledger.refusals:
                ledger.refusals.pop(name, None)
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
        count = ledger.refusals.get(name, 0) + 1
        ledger.refusals[name] = count
        self.audit.call_checked(session, verdict, effect=effect, mode=self.mode, outcome="refused")
        if self.mode == "raise":
            raise IdentifierViolation(verdict)
        if count > self.max_reprompts:
            self.audit.reprompt_limit(session, name, self.max_reprompts)
            raise RepromptLimitExceeded(verdict, limit=self.max_reprompts)
        return verdict

    def _record(
        self,
        plan: CheckPlan,
        arguments: Mapping[str, Any],
        result: Any,
        error: bool,
        call_id: str | None,
        ledger: Ledger,
        verdict: Verdict | None,
    ) -> list[Entry]:
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
                self._log_nothing_recorded(ledger, spec.name, call_id)
            return []
        batches: list[Batch]
        problems: list[str]
        try:
            # A failure that came back as a result (an error mapping, a refusal) teaches
            # nothing: it may echo the very id that was not found. Tested only where the
            # result could bring something in.
            if not yields_nothing(spec, result):
                harvested = recordable_batches(spec, result, self.kinds)
            elif spec.mints or spec.confirms_arguments:
                harvested = None if failed(result) else ([], [])
            else:
                harvested = ([], [])
            if harvested is None:
                self.audit.ids_recorded(
                    ledger.session_id, spec.name, call_id=call_id, added=(), verified=(), error=True
                )
                return []
            batches, problems = harvested
            taken = self._taken_ids(spec, arguments, verdict, problems)
        except Exception as exc:  # a user normaliser failed: the tool's result must still return
            problem = f"nothing recorded: {type(exc).__name__}: {exc}"
            self._log_nothing_recorded(ledger, spec.name, call_id, [problem])
            return []
        if not batches and not taken and not problems:
            if self.audit.enabled(logging.DEBUG):
                self._log_nothing_recorded(ledger, spec.name, call_id)
            return []
        turn = ledger.turn
        # The call's own ids first: a result naming more ids than one call may add must not
        # crowd out what the call confirmed or minted.
        batches[:0] = batches_of(taken)
        paths = {batch.path for batch in batches}
        sources = {path: Source(spec.name, call_id, path, turn) for path in paths}
        admitted = ledger.admit_batches(
            batches, source=sources, limit=self.max_ids_per_call, tool=spec.name
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
            limit=self.max_ids_per_call,
        )
        self.audit.evicted(ledger.session_id, admitted.evicted)
        if admitted.added or admitted.verified:
            self._save_default(ledger)
        return admitted.added

    def _log_allowed(self, plan: CheckPlan, ledger: Ledger, used: list[Entry]) -> None:
        """The audit event of a call whose ids were all allowed outright."""
        self.audit.call_checked(
            ledger.session_id,
            Verdict(plan.spec.name, True, used=tuple(used)),
            effect=plan.spec.effect,
            mode=self.mode,
            outcome="allowed",
        )

    def _log_nothing_recorded(
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
    ) -> list[Found]:
        """Ids a successful call vouches for: a write's mints, an ``on_success`` read's arguments.

        Any other read confirms only what its result returns, which the harvest reads.
        """
        if spec.confirms_arguments:
            if verdict is None or not verdict.allowed:
                return self._argument_ids(spec.params, arguments, problems)
            taken = [Found(kind, value, key, "arguments") for kind, value, key in verdict.typed]
            taken.extend(
                Found(entry.kind, entry.value, entry.key, "arguments")
                for entry in verdict.used
                if not entry.verified
            )
            return taken
        if spec.effect == "write" and spec.mints:
            return self._argument_ids(spec.mints, arguments, problems)
        return []

    def _argument_ids(
        self, params: Sequence[ParamSpec], arguments: Mapping[str, Any], problems: list[str]
    ) -> list[Found]:
        """The ids a successful call took, as Found items of the kind they fit best.

        A value the kind's normaliser cannot read is skipped and reported in ``problems``.
        """
        taken: list[Found] = []
        unreadable = 0
        for param in params:
            kinds = [self.kinds[name] for name in param.kinds]
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
                        taken.append(Found(kind.name, text, key, param.path.text))
        if unreadable:
            problems.append(unreadable_problem(unreadable))
        return taken

    def _build_spec(
        self,
        name: str,
        *,
        params: Sequence[ParamSpec],
        produced: Sequence[Producer],
        mints: Sequence[ParamSpec],
        effect: str,
        verifies: Verifies,
        description: str,
        positions: Mapping[str, int] | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> ToolSpec:
        if not isinstance(name, str) or not name:
            raise GuardrailUsageError(f"a tool needs a non-empty name, not {name!r}")
        if effect not in EFFECTS:
            raise GuardrailUsageError(
                f"tool {name!r}: effect must be 'read' or 'write', not {effect!r}", tool=name
            )
        for param in (*params, *mints):
            for kind in param.kinds:
                self._require_kind(kind, tool=name, where=param.path.text)
        for producer in produced:
            self._require_kind(producer.kind, tool=name, where=producer.source)
        if verifies not in (True, False, ON_SUCCESS) or (
            verifies == ON_SUCCESS and effect != "read"
        ):
            raise GuardrailUsageError(
                f"tool {name!r}: verifies is True, False or 'on_success' (a read tool that fails "
                f"for unknown ids), not {verifies!r} on a {effect} tool",
                tool=name,
            )
        if mints and effect != "write":
            raise GuardrailUsageError(
                f"tool {name!r}: only a write tool mints ids (mints= needs effect='write')",
                tool=name,
            )
        spec = ToolSpec(
            name=name,
            params=tuple(params),
            produces=tuple(produced),
            mints=tuple(mints),
            effect=cast(Effect, effect),
            verifies=verifies,
            description=description or "",
            positions=dict(positions or {}),
            defaults=dict(defaults or {}),
        )
        return spec

    def _require_kind(self, kind: str, *, tool: str, where: str) -> None:
        if kind not in self.kinds:
            known = ", ".join(sorted(self.kinds)) or "none yet"
            raise GuardrailUsageError(
                f"tool {tool!r}: {where!r} names unknown kind {kind!r} (known: {known}); "
                f"declare it first with guard.add_kind({kind!r}, ...)",
                tool=tool,
                param=where,
            )

    def _learn_examples(self, spec: ToolSpec) -> None:
        """Ids of a parameter's kind quoted in a tool description are placeholders."""
        if not spec.description:
            return
        for param in spec.params:
            for name in param.kinds:
                kind = self.kinds[name]
                if kind.has_pattern:
                    self.kinds[name] = kind.with_examples(kind.find(spec.description))

    def _require_new_name(self, name: str, origin: str, spec: ToolSpec | None = None) -> None:
        """Refuse a second tool of one name: it would replace the first and take its checks.

        The same tool again (the same origin and, once built, an equal spec:
        a module or notebook cell run twice) is no second tool.
        """
        if name not in self.specs:
            return
        first = self._origins.get(name, "an earlier declaration")
        if first == origin and (spec is None or spec == self.specs[name]):
            return
        raise GuardrailUsageError(
            f"tool {name!r} is declared twice: already declared by {first}, now again by "
            f"{origin}. The second would replace the first, whose calls would then be checked "
            f"against the wrong spec. Pass name= to give one of them its own name "
            f"(@guard.tool(name=...)), or declare it under another name.",
            tool=name,
        )

    def _register(self, spec: ToolSpec, origin: str) -> None:
        self._require_new_name(spec.name, origin, spec)
        self._learn_examples(spec)
        self.specs[spec.name] = spec
        self._origins[spec.name] = origin
        self._recompile()

    def _recompile(self) -> None:
        lookups: dict[str, list[str]] = {}
        for spec in self.specs.values():
            if spec.effect == "read":
                for producer in spec.produces:
                    lookups.setdefault(producer.kind, []).append(spec.name)
                for param in spec.params:
                    for kind in param.kinds:
                        if spec.name not in lookups.get(kind, []):
                            lookups.setdefault(kind, []).append(spec.name)
        frozen = {kind: tuple(names) for kind, names in lookups.items()}
        self._has_writes = any(spec.effect == "write" for spec in self.specs.values())
        self._plans = {
            name: compile_plan(spec, self.kinds, frozen) for name, spec in self.specs.items()
        }

    # -- the decorator --------------------------------------------------------------------

    def _decorate(
        self,
        function: F,
        *,
        name: str | None,
        ids: Mapping[str, ParamDecl] | None,
        produces: Mapping[str, ProducerDecl] | None,
        mints: Mapping[str, ParamDecl] | None,
        effect: str,
        verifies: Verifies,
        description: str | None,
    ) -> F:
        target = (
            function.__func__ if isinstance(function, (classmethod, staticmethod)) else function
        )
        if not callable(target):
            raise GuardrailUsageError(f"@guard.tool decorates a function, not {function!r}")
        tool_name = name or getattr(target, "__name__", None)
        if not tool_name:
            raise GuardrailUsageError("this callable has no __name__; pass name=")
        module = getattr(target, "__module__", None) or "?"
        origin = f"{module}.{getattr(target, '__qualname__', tool_name)}"
        self._require_new_name(tool_name, origin)
        sig_params, sig_produced = signature_ids(target)
        params = [*sig_params, *param_specs(ids, tool=tool_name)]
        minted = param_specs(mints, tool=tool_name)
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            signature = None
        at = positions(signature, [*params, *minted], tool=tool_name)
        # An omitted id argument takes the function's default: it is checked like one given.
        defaults: dict[str, Any] = {}
        for param in params:
            found = signature.parameters.get(param.name) if signature is not None else None
            default = None if found is None or param.default_ok else found.default
            if default is not inspect.Parameter.empty and default is not None:
                defaults[param.name] = default
        spec = self._build_spec(
            tool_name,
            params=params,
            produced=[*sig_produced, *producers(produces, tool=tool_name)],
            mints=minted,
            effect=effect,
            verifies=verifies,
            description=description if description is not None else inspect.getdoc(target) or "",
            positions=at,
            defaults=defaults,
        )
        self._register(spec, origin)
        leading = tuple(
            parameter.default
            for parameter in (signature.parameters.values() if signature is not None else ())
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY
        )
        return wrap(GuardedTool(self, spec, leading), function)
