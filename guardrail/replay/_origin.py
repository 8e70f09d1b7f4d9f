"""Where a refused identifier came from, when a tool result of the conversation returned it.

A *genuine* false refusal is a value some earlier tool result returned, in a place no
declaration reads: the manifest misses a path. The replay report says which result
returned it and which declaration would have admitted it, so the fix is one line.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Returned:
    """One successful tool result of the conversation so far."""

    message: int  # the tool message's index in the trace
    tool: str
    output: Any  # the parsed result, else the text


def places(output: Any, value: str) -> Iterator[tuple[str, bool]]:
    """``(path, whole)`` for each place of ``output`` holding ``value``, in result path syntax.

    ``whole`` is false where the value is only part of a longer string. Text holding a JSON
    object or array is read as it, as the guard reads a result.
    """
    if isinstance(output, str) and output.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            output = json.loads(output)
    yield from _walk(output, "", value)


def _walk(node: Any, path: str, value: str) -> Iterator[tuple[str, bool]]:
    if isinstance(node, Mapping):
        for key, child in node.items():
            if key == value:
                yield (f"{path}.~" if path else "~"), True
            name = key if _PLAIN_KEY.fullmatch(str(key)) else f"[{json.dumps(str(key))}]"
            joined = name if not path else (f"{path}{name}" if name[0] == "[" else f"{path}.{name}")
            yield from _walk(child, joined, value)
    elif isinstance(node, (list, tuple)):
        for child in node:
            yield from _walk(child, f"{path}[*]", value)
    elif isinstance(node, str):
        if node.strip() == value:
            yield path or "$", True
        elif value in node:
            yield path or "$", False
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and str(node) == value:
        yield path or "$", True


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
