"""Walking a message's content: every string of it, mapped or collected, and how deep it goes.

Shape-blind: a message, an item or a content block is a dict whose keys say
what its strings are (a role, a type, an id, or text). Compaction masks the
text of the part it summarises with :func:`mask_content` (the copy
:func:`map_text` gives and :func:`strings` in one walk); the context's text for counting ids and
tokens is :func:`strings`; :func:`nesting_fault`
names the message whose content contains itself or nests absurdly deep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from guardrail.errors import TranscriptError

#: How deep content is walked before it is called absurd, when walking it has failed.
MAX_DEPTH = 200


def nesting_fault(messages: Any) -> TranscriptError | None:
    """The error for the first message whose content contains itself or is absurdly deep.

    For the error path only (after walking the messages ran out of stack): a
    walk with no recursion that finds the message at fault, or None.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None
    deepest: tuple[int, int] | None = None  # (depth, index)
    for index, message in enumerate(messages):
        depth = _depth(message)
        if depth is None:
            return TranscriptError(
                "its content contains itself (a cycle); pass plain JSON-like data", index=index
            )
        if depth > MAX_DEPTH and (deepest is None or depth > deepest[0]):
            deepest = (depth, index)
    if deepest is None:
        return None
    return TranscriptError(
        f"its content is nested {deepest[0]} levels deep (more than {MAX_DEPTH}); "
        "flatten it or pass it as text",
        index=deepest[1],
    )


_END = object()


def _depth(value: Any) -> int | None:
    """How many containers deep ``value`` goes, or None when it contains itself (no recursion).

    A container met twice (shared, not a cycle) is walked once.
    """
    if _children(value) is None:
        return 0
    heights: dict[int, int] = {}  # id -> height of containers already walked
    on_path = {id(value)}
    stack: list[tuple[Any, Iterator[Any], int]] = [(value, iter(_children(value) or ()), 1)]
    while stack:
        node, rest, height = stack[-1]
        child = next(rest, _END)
        if child is _END:
            stack.pop()
            on_path.discard(id(node))
            heights[id(node)] = height
            if stack:
                parent, siblings, tallest = stack[-1]
                stack[-1] = (parent, siblings, max(tallest, height + 1))
            continue
        if id(child) in on_path:
            return None
        known = heights.get(id(child))
        grandchildren = None if known is not None else _children(child)
        if known is None and grandchildren is None:
            continue  # a scalar
        if known is not None:
            stack[-1] = (node, rest, max(height, known + 1))
            continue
        on_path.add(id(child))
        stack.append((child, iter(grandchildren or ()), 1))
    return heights[id(value)]


def _children(value: Any) -> list[Any] | None:
    """The items of a container (a mapping's keys and values), or None for anything else."""
    # Keys too: a tuple key, or a frozenset, can be deep (their text is written by str()).
    try:
        if isinstance(value, Mapping):
            return [*value.keys(), *value.values()]
        if isinstance(value, (list, tuple, set, frozenset)):
            return list(value)
    except Exception:  # a mapping that cannot be walked: not what overflowed
        return None
    return None


# -- rewriting text -------------------------------------------------------------------------

# Keys whose string values are structure (roles, types, ids, tool names), never content.
_STRUCTURE = frozenset(
    {"role", "type", "id", "call_id", "tool_call_id", "tool_use_id", "name", "status", "is_error"}
)
# Keys holding further structure (calls, content blocks) rather than free data.
_CONTAINERS = frozenset({"tool_calls", "function", "content"})
# A dict with one of these keys is a message, item, block or call; any other dict is data.
_SHAPED = frozenset(
    {"role", "type", "function", "arguments", "input", "tool_call_id", "call_id", "tool_use_id"}
)


def map_text(raw: Any, fn: Callable[[str], str], left: list[str] | None = None) -> Any:
    """A copy of one message with ``fn`` applied to every string of content, arguments or results.

    Roles, types, call ids and tool names are left alone, so pairing and
    shape survive; inside arguments and results every string is mapped,
    dict keys included (ids are sometimes keys). ``left``, when given,
    receives the strings left alone: with those mapped, they are every
    string of :func:`strings`, each once. ``fn`` runs once per distinct
    string (and for each subclass of ``str``): it is a mapping of text.
    """
    memo: dict[str, str] = {}

    def miss(text: str) -> str:
        out = memo[text] = fn(text)
        return out

    return mask_content(raw, memo, miss, fn, [] if left is None else left, [], [])


def _nested(item: Any) -> bool:
    """Whether ``item`` is a mapping or a list (None, numbers and lists first: no ABC check)."""
    kind = type(item)
    if kind is list or kind is dict:
        return True
    if item is None or kind in _SCALARS:
        return False
    return isinstance(item, (Mapping, list))


_SCALARS = frozenset({bool, int, float})


def mask_content(
    raw: Any,
    memo: dict[str, str],
    miss: Callable[[str], str],
    odd: Callable[[str], str],
    left: list[str],
    given: list[str],
    every: list[str],
) -> Any:
    """:func:`map_text` of one message and :func:`strings` of it, in one walk, masking by memo.

    The copy and ``left`` are what ``map_text(raw, fn, left)`` gives; ``every``
    receives what ``strings(raw)`` gives, in its order. A string to map is
    looked up in ``memo`` (``miss(text)`` maps one not there and keeps it in
    ``memo``) and appended to ``given``, repeats included; a subclass of str
    is mapped by ``odd`` each time, and not put in ``given``. No call is made
    for a string seen before: most strings of a conversation repeat.
    """

    def mask(text: str) -> str:
        if type(text) is str:
            out = memo.get(text)
            if out is None:
                out = miss(text)
            given.append(text)
            return out
        return odd(text)

    def structure(value: Any) -> Any:
        if type(value) is dict or isinstance(value, Mapping):
            if _SHAPED.isdisjoint(value):
                return data(value)
            out: dict[str, Any] = {}
            left.extend([key for key in value if isinstance(key, str)])
            for key, item in value.items():
                if isinstance(key, str):
                    every.append(key)
                if type(item) is str:
                    every.append(item)
                    if key in _STRUCTURE:
                        out[key] = item
                        left.append(item)
                    else:
                        masked = memo.get(item)
                        if masked is None:
                            masked = miss(item)
                        given.append(item)
                        out[key] = masked
                elif key in _STRUCTURE and not _nested(item):
                    out[key] = item
                    _collect(item, left)
                    _collect(item, every)
                elif key in _CONTAINERS and _nested(item):
                    out[key] = structure(item)
                else:
                    out[key] = data(item)
            return out
        if isinstance(value, list):
            return [structure(item) for item in value]
        return data(value)

    def data(value: Any) -> Any:
        if isinstance(value, str):
            every.append(value)
            return mask(value)
        if value is None or type(value) in _SCALARS:
            return value
        if type(value) is dict or isinstance(value, Mapping):
            out = {}
            for key, item in value.items():
                if type(key) is str:
                    every.append(key)
                    masked = memo.get(key)
                    if masked is None:
                        masked = miss(key)
                    given.append(key)
                    key = masked
                elif isinstance(key, str):
                    every.append(key)
                    key = odd(key)
                if type(item) is str:
                    every.append(item)
                    masked = memo.get(item)
                    if masked is None:
                        masked = miss(item)
                    given.append(item)
                    out[key] = masked
                elif item is None or type(item) in _SCALARS:
                    out[key] = item
                else:
                    out[key] = data(item)
            return out
        if isinstance(value, (list, tuple)):
            items = []
            for item in value:
                if type(item) is str:
                    every.append(item)
                    masked = memo.get(item)
                    if masked is None:
                        masked = miss(item)
                    given.append(item)
                    items.append(masked)
                else:
                    items.append(data(item))
            return items
        return value

    return structure(raw)


def strings(value: Any) -> list[str]:
    """Every string in a message (keys included), for searching a context for a value."""
    out: list[str] = []
    _collect(value, out)
    return out


def _collect(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                out.append(key)
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, (dict, list, tuple)) or (
                item is not None and type(item) not in _SCALARS and isinstance(item, Mapping)
            ):
                _collect(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, out)
    elif isinstance(value, Mapping):
        _collect(dict(value), out)
