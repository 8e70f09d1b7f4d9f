"""CrewAI: a tool of a guarded crew, checked before it runs and recorded after.

Private to :mod:`guardrail.integrations.crewai` (its docstring says what a
guarded crew does). :class:`GuardedTool` stands in for one of the crew's
tools under the same name and arguments; each time an agent's executor
builds its tools, :meth:`GuardedTool.to_structured_tool` gives it a
:class:`_Call` of its own, which checks a call, runs the tool the crew was
given, records its result, and stops the run where the guard says so. It
imports CrewAI, so it is only imported from there, after the import check.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from crewai.tools import BaseTool
from crewai.tools.structured_tool import CrewStructuredTool
from pydantic import ConfigDict, Field

from guardrail.errors import GuardrailError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations._common import asking
from guardrail.integrations._common.tools import Bound

#: Every name of CrewAI's that is not its public API and that the adapter relies on, in one
#: place (tests/integrations/test_crewai.py fails with the name when a release drops one):
#: (object, attribute, what the adapter does with it).
PRIVATE_NAMES: Final[tuple[tuple[str, str, str], ...]] = (
    (
        "crewai.tools.BaseTool",
        "_run",
        "runs the tool the crew was given, as CrewAI's own structured tool does",
    ),
    (
        "crewai.tools.structured_tool.CrewStructuredTool",
        "func",
        "the function CrewAI calls with the validated arguments: the guarded call",
    ),
)

#: The attribute of a structured tool that CrewAI's tool runner asks, after a call and outside
#: its own error handling, whether to cache the result (``hasattr`` duck typing, not documented).
CACHE_HOOK: Final = "cache_function"


class Withheld(str):
    """The text an agent reads in place of a result: a refusal, or a call waiting for the user.

    A ``str`` as CrewAI's tool results are; its type keeps it out of the crew's
    result cache, so the same call made again is checked again, not answered
    from the cache.
    """

    __slots__ = ()


class CrewIdentifierViolation(IdentifierViolation, TimeoutError):
    """An :class:`IdentifierViolation` that ends the crew's run (``raise`` mode).

    CrewAI runs a task again after any other exception (``max_retry_limit``)
    and lets only a ``TimeoutError`` through at once: as one, the refusal
    reaches the program from ``crew.kickoff()`` the first time, and the
    tools that ran before it do not run again.
    """


class CrewRepromptLimitExceeded(RepromptLimitExceeded, TimeoutError):
    """A :class:`RepromptLimitExceeded` that ends the crew's run, as above."""


def _stopping(error: GuardrailError) -> GuardrailError:
    """The guard's exception as one CrewAI lets through unretried (others as they are)."""
    if isinstance(error, RepromptLimitExceeded):
        stop: GuardrailError = CrewRepromptLimitExceeded(error.verdict, limit=error.limit)
    elif isinstance(error, IdentifierViolation):
        stop = CrewIdentifierViolation(error.verdict)
    else:
        return error
    stop.__cause__ = error
    return stop


class GuardedTool(BaseTool):
    """One tool of a guarded crew: the tool it was given, checked by the crew's guard.

    Same name, arguments and settings as the tool it guards; the description
    the agent reads says, on every id argument, to copy the value exactly.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    guarded: BaseTool = Field(exclude=True, description="The tool the crew was given.")
    crew_guard: Any = Field(exclude=True, description="The guarded crew's adapter.")

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        """Run outside an agent's executor (``tool.run(...)``): checked and recorded alike."""
        return _Call(self).run(*args, **kwargs)

    def to_structured_tool(self) -> CrewStructuredTool:
        """The tool an agent's executor runs: a call of its own, which can stop the run."""
        structured = super().to_structured_tool()
        call = _Call(self)
        structured.func = call.run
        setattr(structured, CACHE_HOOK, call.cache)
        return structured


class _Call:
    """The guarded calls of one executor's copy of a tool, and the stop it owes the run."""

    __slots__ = ("pending", "tool")

    def __init__(self, tool: GuardedTool) -> None:
        self.tool = tool
        self.pending: GuardrailError | None = None

    def cache(self, arguments: Any = None, result: Any = None) -> bool:
        """Asked by CrewAI after each call: raise the guard's stop here; never cache a refusal.

        CrewAI turns an exception of the tool itself into text for the agent
        and calls it again; this is asked after the call, where an exception
        leaves the agent's loop.
        """
        pending, self.pending = self.pending, None
        if pending is not None:
            raise pending
        if isinstance(result, Withheld):
            return False
        own: Callable[..., Any] | None = getattr(self.tool.guarded, CACHE_HOOK, None)
        return bool(own(arguments, result)) if callable(own) else True

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Check the call, ask the user where it waits, run the tool, record what it returned."""
        tool = self.tool
        crew = tool.crew_guard  # the CrewGuard of _crew, which imports this module
        guard = crew.guard
        name = tool.name
        if args:  # CrewAI passes arguments by name; positional ones are read as its legacy path
            kwargs = {**dict(zip(tool.args_schema.model_fields, args, strict=False)), **kwargs}
        ledger = crew.ledger()
        bound: Bound = crew.bound(tool)
        checked, undo = bound.to_check(kwargs)
        try:
            verdict = asking.enforce(guard, name, checked, ledger=ledger)
            if asking.waiting(guard, verdict):
                answered = crew.answer(name, checked, verdict, ledger)
                if isinstance(answered, str):
                    return Withheld(answered)
                verdict = answered
        except GuardrailError as stop:
            self.pending = _stopping(stop)
            return Withheld(str(stop))
        if not verdict.allowed and guard.mode != "observe":
            return Withheld(verdict.message)
        arguments = verdict.arguments if verdict.arguments is not None else checked
        run_with = bound.to_run(verdict.arguments, undo, kwargs)
        try:
            result = _ran(tool.guarded._run(**run_with))
        except Exception:
            guard.record(name, arguments, None, error=True, ledger=ledger)
            raise
        guard.record(name, arguments, result, ledger=ledger)
        return result


def _ran(result: Any) -> Any:
    """A tool's result; a coroutine run to its end, as CrewAI runs an async tool."""
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


def described(tool: BaseTool, bound: Bound) -> str:
    """The description the agent reads: CrewAI's, each id argument saying to copy it exactly.

    CrewAI writes a tool's arguments into its description
    (``Tool Arguments: {name: {description, type}}``); the line is written
    again with the descriptions of the schema the guard gave the model.
    """
    given = tool.description
    properties = (bound.schema or {}).get("properties")
    if not isinstance(properties, Mapping) or bound.spec is None:
        return given
    fields = tool.args_schema.model_fields
    arguments = {
        name: {
            "description": node.get("description") if isinstance(node, Mapping) else None,
            "type": _type_name(fields[name].annotation) if name in fields else "Any",
        }
        for name, node in properties.items()
    }
    lines = given.splitlines()
    line = f"Tool Arguments: {arguments}"
    for index, text in enumerate(lines):
        if text.startswith("Tool Arguments: "):
            lines[index] = line
            return "\n".join(lines)
    return f"{given}\n{line}"


def _type_name(annotation: Any) -> str:
    """A field's type as CrewAI names it in a description (``str``, ``list[str]``)."""
    args: Sequence[Any] = getattr(annotation, "__args__", None) or ()
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and args:
        inner = ", ".join(_type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))
