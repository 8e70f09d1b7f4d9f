"""The decorator: a tool function with the check before it and the record after it.

``@guard.tool`` compiles everything once (the spec, where each identifier
parameter sits in the signature) into a :class:`GuardedTool`, then wraps the
function in a plain function whose sync and async forms differ only by
``await``. A plain function rather than an object proxy: a call costs what a
pass-through costs, and methods, class and static methods, signatures,
annotations and ``iscoroutinefunction`` behave as the undecorated
function's do. Nothing on the per-call path inspects anything. A plain
Python tool's guarded function is written with the tool's own parameters
(:func:`_own_parameters`), so a call is bound once, by Python, as the tool's
own call would be.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import keyword
import linecache
import logging
import textwrap
import types
from collections.abc import Callable, Mapping
from logging import DEBUG
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from guardrail._check.allowed import BUILTINS, FastParams, writes_out, written_checks
from guardrail._check.plan import CheckPlan
from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import Verdict
from guardrail._declare.spec import ToolSpec
from guardrail._provenance.harvest import plain_text
from guardrail._provenance.recall import Recall, as_record, settles
from guardrail.ledger import Entry
from guardrail.ledger._state import LedgerState

if TYPE_CHECKING:
    from guardrail._guard.engine import Engine

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute of a guarded function holding its :class:`GuardedTool`.
GUARDED_ATTRIBUTE = "__guardrail_tool__"


class GuardedTool:
    """One decorated tool: its spec and argument positions, and the halves of a call.

    What a call needs is resolved once, here: the ``engine`` that checks and
    records (and its compiled plans and audit levels), ``session`` (the
    ledger state of the innermost open scope, or None: the cheap look-up every
    call makes) and ``current`` (the full resolution, with the default
    session and the error outside any). The tool always runs with the
    arguments the call was given: the guard allows or refuses, it never
    rewrites an argument.
    """

    __slots__ = (
        "allowed_level",
        "current",
        "engine",
        "heads",
        "levels",
        "name",
        "plans",
        "recalled",
        "session",
        "spec",
    )

    def __init__(
        self,
        spec: ToolSpec,
        engine: Engine,
        *,
        session: Callable[[], LedgerState | None],
        current: Callable[[], LedgerState],
    ) -> None:
        self.engine = engine
        self.plans = engine.plans
        self.levels = engine.audit.levels
        self.session = session
        self.current = current
        self.name = spec.name
        self.spec = spec
        self.heads = tuple(spec.positions.items())
        self.allowed_level = logging.INFO if spec.effect == "write" else logging.DEBUG
        #: The plan the recall was made for, and the recall of its records (or None).
        self.recalled: tuple[CheckPlan | None, Recall | None] = (None, None)

    def recall(self, plan: CheckPlan) -> Recall | None:
        """The records kept of this tool's results under ``plan`` (made at its first call)."""
        made_for, recall = self.recalled
        if made_for is not plan:
            recall = self.engine.recall(plan)
            self.recalled = (plan, recall)
        return recall

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The identifier arguments of one call, by parameter name."""
        # The wrapper is a plain function, so a method's self (or cls) is args[0], just as
        # in the signature the positions were read from.
        arguments = {}
        for head, position in self.heads:
            if head in kwargs:
                arguments[head] = kwargs[head]
            elif 0 <= position < len(args):
                arguments[head] = args[position]
        return arguments

    def enforce(
        self, state: LedgerState, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Verdict]:
        """The full check in the guard's mode (which may raise), for any other call."""
        arguments = self.bind(args, kwargs)
        return arguments, self.engine.enforce(self.name, arguments, state)

    async def enforce_async(
        self, state: LedgerState, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Verdict]:
        """:meth:`enforce` for an async tool (an async ``Guard(approve=...)`` may answer)."""
        arguments = self.bind(args, kwargs)
        return arguments, await self.engine.enforce_async(self.name, arguments, state)

    def record(
        self, state: LedgerState, arguments: Mapping[str, Any], verdict: Verdict, result: Any
    ) -> None:
        """Record the result of a call that went through :meth:`enforce`."""
        plan = self.plans[self.name]
        recall = self.recall(plan)
        self.engine.record_call(plan, arguments, result, state, verdict=verdict, recall=recall)

    def after(
        self,
        plan: CheckPlan,
        state: LedgerState,
        used: list[Entry],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> None:
        """Record what a call allowed outright brought in, as the full path records it.

        The wrapper skips it for a result of a type the plan calls quiet,
        unless DEBUG is on: then the record says what it found, as always. A
        record kept from an earlier call (:mod:`guardrail._provenance.recall`)
        whose ids the ledger holds as it would leave them
        (:func:`guardrail.ledger._settled.settled`) only marks them used: the
        full record would change nothing else and log nothing below DEBUG.
        """
        made_for, recall = self.recalled
        if made_for is not plan:
            recall = self.recall(plan)
        if recall is not None:
            result = as_record(result)
            if not self.levels[DEBUG] and settles(recall, result, state):
                return
        verdict = Verdict(self.name, True, used=tuple(used))
        self.engine.record_call(
            plan, self.bind(args, kwargs), result, state, verdict=verdict, recall=recall
        )


def guarded(
    function: F,
    spec: ToolSpec,
    engine: Engine,
    *,
    session: Callable[[], LedgerState | None],
    current: Callable[[], LedgerState],
) -> F:
    """``function`` guarded as the tool ``spec`` declares."""
    tool = GuardedTool(spec, engine, session=session, current=current)
    return wrap(tool, function)


#: The first characters with which :func:`~guardrail._provenance.harvest.plain_text` holds
#: whatever follows (``""``: the empty text), so a ``str`` result starting with one is known
#: plain without the call. Any other start asks :func:`plain_text`.
PLAIN_HEADS: frozenset[str] = frozenset(
    {""} | {chr(c) for c in range(0x21, 0x7F)} - set('{["-0123456789tfn')
)

#: The guarded function of a tool whose allowed path :mod:`guardrail._check.allowed` writes
#: out, written out with it, so an allowed call runs in one frame: the session, the plan
#: (when it is no longer the one this was written for, the call goes the general way), the
#: look-ups, the tool, and the result's type. ``{a}``: ``async `` or nothing; ``{w}``:
#: ``await `` or nothing. Everything else goes to ``_call`` (:func:`wrap`'s general path).
#: ``{params}``: the parameter list, ``*_args, **_kwargs`` or, for a plain function, the
#: tool's own (:func:`_own_parameters`: Python binds the call straight into them and the
#: tool is called with each value in the place its own binding would have put it);
#: ``{call}``: the arguments of the tool's call; ``{args}`` and ``{kwargs}``: the same as
#: a tuple and a dict. Every other name it uses starts with ``_``, so no parameter hides
#: one.
_GUARDED = """\
{a}def guarded({params}):
    _state = _session()
    if _state is None:
        _state = _current()
    _plan = _plans[_name]
    if _plan.allowed is _ALLOWED:
        _tables = _state.tables
        try:
{checks}\
        except _Exception:
            pass
        else:
            _epoch = _state.epoch
{touches}\
            if _levels[_allowed_level]:
                _engine.log_allowed(_plan, _state, {used})
            _result = {w}_target({call})
            _tp = _type(_result)
            if (
                _tp not in _plan.quiet
                or (_tp is _str and _result[:1] not in _PLAIN_HEADS and not _plain_text(_result))
                or _levels[_DEBUG]
            ):
                _after(_plan, _state, {used}, {args}, {kwargs}, _result)
            return _result
    return {w}_call(_state, {args}, {kwargs})
"""

#: The parameters of :data:`_GUARDED` for any callable: ``*args, **kwargs``, passed on.
_ANY_PARAMETERS = ("*_args, **_kwargs", "*_args, **_kwargs", "_args", "_kwargs")


#: Numbers the written functions' file names, one per guarded tool written.
_WRITTEN = itertools.count(1)


class OwnParameters(NamedTuple):
    """A tool's parameters as :data:`_GUARDED` takes them (see :func:`_own_parameters`)."""

    params: str
    call: str
    args: str
    kwargs: str
    defaults: dict[str, Any]


def _own_parameters(target: Callable[..., Any], fast: FastParams) -> OwnParameters | None:
    """``target``'s parameters written out for :data:`_GUARDED`, or None to keep the rest.

    Only for a plain Python function (not a callable object, not a wrapper of
    another function or one given a ``__signature__``, whose real parameters
    may differ from the signature it shows) whose parameters are all
    positional-or-keyword or keyword-only, none starting with ``_`` (the
    written code's own names do). Defaults are the function's own
    objects. Such a function cannot tell whether an argument came by position
    or by keyword, so calling it with each value in its own slot is calling it
    with the arguments as given. An id parameter whose default is left
    unchecked (``default_ok``) keeps the rest too: here an omitted argument
    and one passed equal to the default look the same.
    """
    if (
        type(target) is not types.FunctionType
        or hasattr(target, "__wrapped__")
        or "__signature__" in target.__dict__  # shows parameters its code may not have
        or target.__code__.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    ):
        return None
    signature = inspect.signature(target, follow_wrapped=False).parameters
    for name, _, _, _, _, default in fast:
        parameter = signature.get(name)
        if parameter is None or (
            parameter.default is not inspect.Parameter.empty and parameter.default is not default
        ):
            return None
    params, call, positional, keywords = [], [], [], []
    defaults: dict[str, Any] = {}
    star = False
    for parameter in signature.values():
        name = parameter.name
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            return None
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if not star:
                params.append("*")
                star = True
            call.append(f"{name}={name}")
            keywords.append(f"{name!r}: {name}")
        elif parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            call.append(name)
            positional.append(name)
        else:
            return None
        if parameter.default is inspect.Parameter.empty:
            params.append(name)
        else:
            defaults[f"_default_{name}"] = parameter.default
            params.append(f"{name}=_default_{name}")
    args = f"({', '.join(positional)},)" if positional else "()"
    return OwnParameters(
        ", ".join(params), ", ".join(call), args, "{" + ", ".join(keywords) + "}", defaults
    )


def wrap(tool: GuardedTool, function: F) -> F:
    """The guarded function: sync or async as ``function`` is, methods kept methods.

    The two forms differ only by ``await``. On the allowed path a call costs
    the session look-up, the plan's allowed path and, for the few results
    that may hold ids, :meth:`GuardedTool.after`; a tool whose allowed path is
    written out (:func:`guardrail._check.allowed.written_checks`) runs it all
    in one function written with it. An allowed call runs with its arguments
    exactly as given: the guard never rewrites one.
    """
    target = function.__func__ if isinstance(function, classmethod | staticmethod) else function
    engine = tool.engine
    session = tool.session
    current = tool.current
    levels = tool.levels
    plans = tool.plans
    name = tool.name
    allowed_level = tool.allowed_level
    wrapper: Callable[..., Any]
    is_async = inspect.iscoroutinefunction(target)
    if is_async:

        async def call_async(state: LedgerState, args: Any, kwargs: Any) -> Any:
            plan = plans[name]
            used = plan.allowed(args, kwargs, state)
            if used is not None:
                if levels[allowed_level]:
                    engine.log_allowed(plan, state, used)
                result = await target(*args, **kwargs)
                tp = type(result)
                if (
                    tp not in plan.quiet
                    or (tp is str and result[:1] not in PLAIN_HEADS and not plain_text(result))
                    or levels[DEBUG]
                ):
                    tool.after(plan, state, used, args, kwargs, result)
                return result
            arguments, verdict = await tool.enforce_async(state, args, kwargs)
            if not verdict.allowed and engine.mode == "reprompt":
                return Rejection(verdict)
            result = await target(*args, **kwargs)
            tool.record(state, arguments, verdict, result)
            return result

        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            state = session()
            if state is None:
                state = current()
            return await call_async(state, args, kwargs)

        call: Callable[..., Any] = call_async
        wrapper = guarded_async
    else:

        def call_sync(state: LedgerState, args: Any, kwargs: Any) -> Any:
            plan = plans[name]
            used = plan.allowed(args, kwargs, state)
            if used is not None:
                if levels[allowed_level]:
                    engine.log_allowed(plan, state, used)
                result = target(*args, **kwargs)
                tp = type(result)
                if (
                    tp not in plan.quiet
                    or (tp is str and result[:1] not in PLAIN_HEADS and not plain_text(result))
                    or levels[DEBUG]
                ):
                    tool.after(plan, state, used, args, kwargs, result)
                return result
            arguments, verdict = tool.enforce(state, args, kwargs)
            if not verdict.allowed and engine.mode == "reprompt":
                return Rejection(verdict)
            result = target(*args, **kwargs)
            tool.record(state, arguments, verdict, result)
            return result

        def guarded(*args: Any, **kwargs: Any) -> Any:
            state = session()
            if state is None:
                state = current()
            return call_sync(state, args, kwargs)

        call = call_sync
        wrapper = guarded
    plan = plans[name]
    if writes_out(plan.fast):
        wrapper = _written(tool, target, call, plan, is_async=is_async)
    functools.update_wrapper(wrapper, target)
    # Runtimes that check and record calls themselves (guardrail.integrations.loops) run
    # the function underneath instead, so a call is never checked twice.
    wrapper.__dict__[GUARDED_ATTRIBUTE] = tool
    if isinstance(function, classmethod):
        return cast(F, classmethod(wrapper))
    if isinstance(function, staticmethod):
        return cast(F, staticmethod(wrapper))
    return cast(F, wrapper)


def _written(
    tool: GuardedTool,
    target: Callable[..., Any],
    call: Callable[..., Any],
    plan: CheckPlan,
    *,
    is_async: bool,
) -> Callable[..., Any]:
    """The guarded function of ``plan``'s tool with its allowed path written in (``_GUARDED``)."""
    assert plan.fast is not None
    own = _own_parameters(target, plan.fast)
    written = written_checks(plan.fast, plan.read, local=own is not None)
    parts = {
        "a": "async " if is_async else "",
        "w": "await " if is_async else "",
        "checks": textwrap.indent(written.checks, " " * 12),
        "touches": textwrap.indent(written.touches, " " * 12),
        "used": written.used,
    }
    params, call_with, args, kwargs = _ANY_PARAMETERS if own is None else own[:4]
    source = _GUARDED.format(**parts, params=params, call=call_with, args=args, kwargs=kwargs)
    # The function's globals are its own: what it reads per call, bound once (a global
    # read costs no more than a closure's, and a call copies no cells).
    namespace: dict[str, Any] = {
        **BUILTINS,
        "_session": tool.session,
        "_current": tool.current,
        "_plans": tool.plans,
        "_name": tool.name,
        "_ALLOWED": plan.allowed,
        "_levels": tool.levels,
        "_allowed_level": tool.allowed_level,
        "_DEBUG": DEBUG,
        "_engine": tool.engine,
        "_after": tool.after,
        "_target": target,
        "_call": call,
        "_PLAIN_HEADS": PLAIN_HEADS,
        "_plain_text": plain_text,
        **written.bound,
        **(own.defaults if own is not None else {}),
    }
    # As in guardrail._check.allowed: declared names only as repr literals, nothing run.
    filename = f"<guardrail guarded tool {tool.name!r} #{next(_WRITTEN)}>"
    code = compile(source, filename, "exec")
    exec(code, namespace)  # noqa: S102
    # A traceback through the written function shows its lines, as dataclasses' do.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    wrapper: Callable[..., Any] = namespace["guarded"]
    return wrapper
