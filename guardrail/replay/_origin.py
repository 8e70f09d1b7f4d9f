"""Where a refused identifier came from, when a tool result of the conversation returned it.

A *genuine* false refusal is a value some earlier tool result returned, in a place no
declaration reads: the manifest misses a path. The replay report says which result
returned it and which declaration would have admitted it, so the fix is one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guardrail._provenance.coverage import places


@dataclass(frozen=True)
class Returned:
    """One successful tool result of the conversation so far."""

    message: int  # the tool message's index in the trace
    tool: str
    output: Any  # the parsed result, else the text


def admitting(results: list[Returned], value: str, kind: str) -> str:
    """Which result returned ``value`` and the declaration that would admit it ('' if none)."""
    for returned in reversed(results):  # the latest result that returned it
        for path, whole in places(returned.output, value):
            where = f"{returned.tool} returned it (message {returned.message}) at {path}"
            if whole:
                return f'{where}: declare produces={{"{path}": "{kind}"}} on {returned.tool}'
            if path == "$":  # plain text output: a re: producer reads it
                return f'{where}, in its text: declare produces={{"re:PATTERN": "{kind}"}}'
            return f"{where}, inside a longer text: return it in a field of its own"
    return ""
