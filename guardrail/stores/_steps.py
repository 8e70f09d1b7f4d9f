"""A store's sequence written once for its sync and its asyncio class: steps and two drivers.

The sequence (a write's merge-and-retry, a read that may find the session
expired) is a generator that yields the arguments of each call it needs and
is sent the answer; :func:`run` makes the calls, :func:`run_async` awaits
them. A call's error propagates from the driver: no sequence has anything to
undo.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

_T = TypeVar("_T")
#: A store's sequence: yields each call's arguments, is sent its answer, returns the result.
Steps = Generator[tuple[Any, ...], Any, _T]


def run(steps: Steps[_T], call: Callable[..., Any]) -> _T:
    """Take ``steps``, answering each with ``call(*arguments)``."""
    reply = None
    while True:
        try:
            need = steps.send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result
        reply = call(*need)


async def run_async(steps: Steps[_T], call: Callable[..., Awaitable[Any]]) -> _T:
    """Take ``steps``, answering each with ``await call(*arguments)``."""
    reply = None
    while True:
        try:
            need = steps.send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result
        reply = await call(*need)
