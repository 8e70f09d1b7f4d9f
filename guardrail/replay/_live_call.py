"""One live call: what the tool received, what it returned, and whether it failed.

A live replay wraps each tool (:func:`recording`) to keep a copy of the
arguments it received and what it returned or raised, and compares the
arguments with those the model wrote (:func:`rewrites`). Whether a call
failed is decided here, in :func:`call_failed`, for both sides of a live
replay alike: the one place the live replay reads success.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from guardrail._transcript.result_text import failure_text
from guardrail.replay._live_stats import Rewrite

if TYPE_CHECKING:
    from guardrail import Guard

#: ``{name: callable}``: the tools of one environment.
Tools: TypeAlias = Mapping[str, Callable[..., Any]]

#: A ledger as the harness compares it: ``(kind, key) -> (value, verified, tier rank)``.
Snapshot: TypeAlias = dict[tuple[str, str], tuple[str, bool, int]]


def call_failed(guard: Guard, ran: Ran) -> bool:
    """Whether a live call failed: the one place the live replay reads success.

    A call failed when its tool raised, or when the tool's failure rule reads
    its result as a failure (:meth:`guardrail.Guard.failed`: its ``fails=``,
    else the guard's; an error shape or a refusal under any rule): the rule
    every reader of results follows, so both sides of a live run, the guard
    itself and a replay of the recording judge a result alike.
    """
    return ran.raised is not None or guard.failed(ran.tool, ran.result)


def _text(result: Any) -> str:
    """A result as the text a model reads: text as it is, anything else as JSON (or its text)."""
    if isinstance(result, str):
        return result
    from pydantic_core import to_jsonable_python

    try:
        return json.dumps(to_jsonable_python(result), ensure_ascii=False)
    except Exception:  # not JSON-like: its text
        return str(result)


@dataclass
class Ran:
    """One tool run: the tool, what it received, and what it returned or raised."""

    tool: str
    received: dict[str, Any]
    result: Any = None
    raised: BaseException | None = None
    #: The ledger when the tool was called (guarded side only).
    before: Snapshot | None = None

    @property
    def text(self) -> str:
        """What it returned as text, or the exception it raised as its type and message."""
        if self.raised is not None:
            return f"{type(self.raised).__name__}: {self.raised}"
        return _text(self.result)

    @property
    def answer(self) -> str:
        """The text a runtime's loop answers the model with for this run (its seal apart)."""
        if self.raised is not None:
            return failure_text(f"{self.tool} failed: {self.text}")
        return self.text


def recording(
    name: str, function: Callable[..., Any], ran: list[Ran], snapshot: Callable[[], Snapshot]
) -> Callable[..., Any]:
    """``function``, keeping what each call received and returned, and the ledger before it.

    Its name, docstring, annotations and signature are the function's, so the toolbox
    validates and binds it as it would the function itself.
    """

    def tool(*args: Any, **kwargs: Any) -> Any:
        # A copy: a tool may change what it was given (append to a list it received).
        record = Ran(name, _copied(kwargs), before=snapshot())
        ran.append(record)
        try:
            record.result = function(*args, **kwargs)
        except Exception as exc:
            record.raised = exc
            raise
        return record.result

    functools.update_wrapper(tool, function, updated=())
    return tool


def _copied(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the tool received them, kept apart from what the tool may change."""
    try:
        return copy.deepcopy(dict(arguments))
    except Exception:  # an argument that cannot be copied: as it is
        return dict(arguments)


def _differences(written: Any, received: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """``(path, written, received)`` for each place where the two arguments differ."""
    if isinstance(written, Mapping) and isinstance(received, Mapping):
        for key in dict.fromkeys([*written, *received]):
            where = f"{path}.{key}" if path else str(key)
            yield from _differences(written.get(key), received.get(key), where)
    elif isinstance(written, list) and isinstance(received, list) and len(written) == len(received):
        for i, (w, r) in enumerate(zip(written, received, strict=True)):
            yield from _differences(w, r, f"{path}[{i}]")
    elif written != received or type(written) is not type(received):
        yield path, written, received


def rewrites(written: Mapping[str, Any], received: Mapping[str, Any]) -> tuple[Rewrite, ...]:
    """Each argument the tool received otherwise than the model wrote it."""
    return tuple(Rewrite(path, w, r) for path, w, r in _differences(dict(written), dict(received)))
