"""Compiled paths into tool results and tool arguments.

The syntax, shared by result producers and parameter declarations:

- ``$``      the whole value
- ``a.b``    key ``b`` of object ``a`` (an attribute on models and dataclasses)
- ``a[*]``   every element of list ``a``; a leading ``[*]`` means the value is a list
- ``a[2]``   one element of list ``a``
- ``a.*``    every value of object ``a``
- ``a.~``    every key of object ``a`` (ids used as dict keys); a bare ``~`` is the root's keys
- ``a["odd key"]`` a key that is not a plain name

Paths are compiled once, when a tool is declared; walking one is a few list
comprehensions, with no parsing at call time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from guardrail.errors import GuardrailUsageError

KEY: Final = "key"
EACH: Final = "each"
INDEX: Final = "index"
VALUES: Final = "values"
KEYS: Final = "keys"

Step = tuple[str, Any]

_TOKEN = re.compile(
    r"""
      (?P<dot>\.)
    | (?P<each>\[\*\])
    | (?P<index>\[-?\d+\])
    | (?P<quoted>\[(?P<q>["'])(?P<qkey>(?:(?!(?P=q)).)*)(?P=q)\])
    | (?P<star>\*)
    | (?P<tilde>~)
    | (?P<name>[^.\[\]*~]+)
    """,
    re.VERBOSE,
)
_SCALARS = (str, bytes, bytearray, int, float, bool, type(None))


@dataclass(frozen=True)
class Path:
    """A compiled path: its source text and its steps."""

    text: str
    steps: tuple[Step, ...]

    @property
    def is_root(self) -> bool:
        """Whether the path is ``$``, the whole value."""
        return not self.steps

    @property
    def head(self) -> str | None:
        """The first key when the path starts with one (a top-level parameter name)."""
        if self.steps and self.steps[0][0] == KEY:
            return str(self.steps[0][1])
        return None

    def extract(self, root: Any, *, parse_json_strings: bool = False) -> list[Any]:
        """Every value the path reaches in ``root``; missing keys reach nothing."""
        return _walk(self.steps, [root], parse_json_strings)

    def extract_with_parents(self, root: Any) -> list[tuple[Any, Any]]:
        """``(value, holder)`` pairs, where holder is the object that holds the value.

        For ``a.~`` the holder of a key is the value stored under it, so a
        status can be read beside an id used as a dict key.
        """
        if not self.steps:
            return [(root, None)]
        *parent_steps, (op, arg) = self.steps
        pairs: list[tuple[Any, Any]] = []
        for parent in _walk(tuple(parent_steps), [root], False):
            if op == KEY:
                value = _get(parent, arg)
                if value is not _MISSING:
                    pairs.append((value, parent))
            elif op == KEYS:
                if isinstance(parent, Mapping):
                    pairs.extend((key, held) for key, held in parent.items())
            else:
                pairs.extend((value, parent) for value in _walk(((op, arg),), [parent], False))
        return pairs

    def __str__(self) -> str:
        return self.text


class _Missing:
    pass


_MISSING: Final = _Missing()


def _get(holder: Any, key: str) -> Any:
    if isinstance(holder, Mapping):
        return holder.get(key, _MISSING)
    if isinstance(holder, (*_SCALARS, list, tuple)):
        return _MISSING
    # Models, dataclasses and plain objects expose fields as attributes.
    value = getattr(holder, key, _MISSING)
    return _MISSING if callable(value) else value


def _values(holder: Any) -> list[Any]:
    if isinstance(holder, Mapping):
        return list(holder.values())
    fields = getattr(type(holder), "model_fields", None) or getattr(
        holder, "__dataclass_fields__", None
    )
    if fields is not None and not isinstance(holder, type):
        return [getattr(holder, name, None) for name in fields]
    return []


def maybe_json(value: Any) -> Any:
    """A JSON string holding a list or an object, parsed; anything else as it is.

    Models often send a list parameter as a JSON string (``"[\"a\", \"b\"]"``).
    """
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _maybe_json(value: Any, parse: bool) -> Any:
    return maybe_json(value) if parse else value


def _walk(steps: tuple[Step, ...], frontier: list[Any], parse: bool) -> list[Any]:
    nxt: list[Any]
    for op, arg in steps:
        if not frontier:
            break
        if op == KEY:
            nxt = []
            for item in frontier:
                if parse:
                    item = _maybe_json(item, parse)
                # A plain dict is by far the common holder: read it without the Mapping check.
                value = item.get(arg, _MISSING) if type(item) is dict else _get(item, arg)
                if value is not _MISSING:
                    nxt.append(value)
            frontier = nxt
        elif op == EACH:
            nxt = []
            for item in frontier:
                item = _maybe_json(item, parse)
                if isinstance(item, (list, tuple)):
                    nxt.extend(item)
                elif parse and item is not None:
                    # One value where a list was declared: check it rather than drop it.
                    nxt.append(item)
            frontier = nxt
        elif op == INDEX:
            nxt = []
            for item in frontier:
                item = _maybe_json(item, parse)
                if isinstance(item, (list, tuple)) and -len(item) <= arg < len(item):
                    nxt.append(item[arg])
            frontier = nxt
        elif op == VALUES:
            nxt = []
            for item in frontier:
                nxt.extend(_values(_maybe_json(item, parse)))
            frontier = nxt
        else:  # KEYS
            nxt = []
            for item in frontier:
                item = _maybe_json(item, parse)
                if isinstance(item, Mapping):
                    nxt.extend(item.keys())
            frontier = nxt
    return frontier


def compile_path(text: str, *, tool: str | None = None, param: str | None = None) -> Path:
    """Compile ``text``; a malformed path is a usage error naming the tool and the position."""
    if not isinstance(text, str):
        raise GuardrailUsageError(
            f"path {text!r} must be a string such as 'orders[*].order_id'", tool=tool, param=param
        )
    source = text.strip()
    body = source
    if body == "$":
        return Path(source, ())
    if body.startswith("$."):
        body = body[2:]
    elif body.startswith("$["):
        body = body[1:]
    steps: list[Step] = []
    position = 0
    expect_name = True  # after the start or a dot, a name (or * or ~) must follow
    while position < len(body):
        match = _TOKEN.match(body, position)
        if match is None:
            _bad_path(source, position, "unexpected character", tool, param)
        assert match is not None
        kind = match.lastgroup
        if kind == "dot":
            if expect_name:
                _bad_path(source, position, "a name must come before '.'", tool, param)
            expect_name = True
        elif kind == "name":
            if not expect_name:
                _bad_path(source, position, "'.' expected before a name", tool, param)
            name = match.group("name")
            if name != name.strip():
                _bad_path(source, position, "spaces around a key name", tool, param)
            steps.append((KEY, name))
            expect_name = False
        elif kind == "star":
            if not expect_name:
                _bad_path(source, position, "'.*' expected, not '*'", tool, param)
            steps.append((VALUES, None))
            expect_name = False
        elif kind == "tilde":
            if not expect_name:
                _bad_path(source, position, "'.~' expected, not '~'", tool, param)
            steps.append((KEYS, None))
            expect_name = False
        else:
            if expect_name and steps:
                _bad_path(source, position, "a name must follow '.'", tool, param)
            if kind == "each":
                steps.append((EACH, None))
            elif kind == "index":
                steps.append((INDEX, int(match.group(0)[1:-1])))
            else:
                steps.append((KEY, match.group("qkey")))
            expect_name = False
        position = match.end()
    if expect_name:
        _bad_path(source, len(body), "the path ends where a name was expected", tool, param)
    for index, (op, _) in enumerate(steps[:-1]):
        if op == KEYS:
            _bad_path(
                source, index, "'~' (the keys of an object) must be the last step", tool, param
            )
    return Path(source, tuple(steps))


def _bad_path(source: str, position: int, why: str, tool: str | None, param: str | None) -> None:
    where = f"tool {tool!r}: " if tool else ""
    raise GuardrailUsageError(
        f"{where}malformed path {source!r} at character {position}: {why}. "
        "Paths look like 'order_id', 'orders[*].order_id', 'payment_methods.~' or '$'.",
        tool=tool,
        param=param,
    )
