"""Where identifier arguments sit in a call, and the same arguments with one of them changed.

A tool spec names its identifier parameters by path (``order_id``,
``flights[*].flight_number``, a separator-packed ``"a, b"``). :func:`leaves`
walks a call's arguments along those paths and yields every identifier it
reaches as a :class:`Leaf`: the parameter, the concrete keys and indexes
leading to it, and its text. :func:`with_value` writes a new value at a
leaf's place; the replay corrupts arguments with it, and scripted agents
fill in the arguments they need.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from guardrail._declare.paths import EACH, INDEX, KEY, KEYS, VALUES, Step, maybe_json
from guardrail._declare.spec import ParamSpec, ToolSpec
from guardrail.kinds import Kind, id_text

RENAME: Final = "rename"  # a location step: an identifier used as a key of an object

#: The concrete steps from the arguments to one leaf: ``(("key", "flights"), ("index", 0), ...)``.
Location: TypeAlias = tuple[tuple[str, Any], ...]


def _locate(steps: tuple[Step, ...], value: Any, at: Location) -> Iterator[tuple[Location, Any]]:
    """Every leaf a parameter path reaches, with the concrete keys and indexes leading to it."""
    if not steps:
        yield at, value
        return
    (op, arg), rest = steps[0], steps[1:]
    value = maybe_json(value)
    if op == KEY:
        if isinstance(value, Mapping) and arg in value:
            yield from _locate(rest, value[arg], (*at, (KEY, arg)))
    elif op == EACH:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from _locate(rest, item, (*at, (INDEX, i)))
        elif value is not None:  # one value where a list was declared: the check reads it too
            yield from _locate(rest, value, at)
    elif op == INDEX:
        if isinstance(value, (list, tuple)) and -len(value) <= arg < len(value):
            yield from _locate(rest, value[arg], (*at, (INDEX, arg % len(value))))
    elif op == VALUES:
        if isinstance(value, Mapping):
            for key, item in value.items():
                yield from _locate(rest, item, (*at, (KEY, key)))
    elif op == KEYS and isinstance(value, Mapping):
        for key in value:
            yield (*at, (RENAME, key)), key


def replace(value: Any, at: Location, new: Any) -> Any:
    """A copy of ``value`` with the leaf at ``at`` replaced (JSON-string containers parsed)."""
    if not at:
        return new
    (op, arg), rest = at[0], at[1:]
    value = maybe_json(value)
    if op == KEY:
        changed = dict(value)
        changed[arg] = replace(value[arg], rest, new)
        return changed
    if op == INDEX:
        items = list(value)
        items[arg] = replace(items[arg], rest, new)
        return items
    # RENAME: the id is a key; keep the order of the object
    return {(new if key == arg else key): item for key, item in value.items()}


def locate_one(value: Any, at: Location) -> Any:
    """The value at ``at``."""
    for op, arg in at:
        value = maybe_json(value)
        value = arg if op == RENAME else value[arg]
    return value


@dataclass(frozen=True)
class Leaf:
    """One identifier argument: the parameter, where it sits, and its text."""

    param: ParamSpec
    kinds: tuple[Kind, ...]
    at: Location
    text: str
    part: int | None  # index within a separator-packed string

    @property
    def place(self) -> tuple[str, Location, int | None]:
        """What names this argument's place in any call of the same tool."""
        return self.param.path.text, self.at, self.part

    @property
    def label(self) -> str:
        """``flights[0].flight_number``: the place as a reader writes it."""
        text = ""
        for op, arg in self.at:
            if op == INDEX:
                text += f"[{arg}]"
            elif op == RENAME:
                text += f".~{arg}"
            else:
                text += f".{arg}" if text else str(arg)
        text = text or self.param.path.text
        return text if self.part is None else f"{text}[part {self.part}]"

    def same(self, other: str) -> bool:
        """Whether ``other`` names the same identifier (in any form one of the kinds accepts)."""
        if other == self.text:
            return True
        for kind in self.kinds:
            try:
                if kind.normalize(other) == kind.normalize(self.text):
                    return True
            except Exception:  # a user-supplied normaliser that fails: not the same
                continue
        return False


def leaves(spec: ToolSpec, kinds: Mapping[str, Kind], arguments: Any) -> Iterator[Leaf]:
    """Every identifier argument of a call of ``spec``, in declaration order."""
    arguments = arguments or {}
    for param in spec.params:
        param_kinds = tuple(kinds[name] for name in param.kinds)
        for at, value in _locate(param.path.steps, arguments, ()):
            text = id_text(value)
            if text is None:
                continue
            if param.sep and isinstance(value, str):
                for index, part in enumerate(value.split(param.sep)):
                    if part.strip():
                        yield Leaf(param, param_kinds, at, part.strip(), index)
            else:
                yield Leaf(param, param_kinds, at, text, None)


def with_value(arguments: Mapping[str, Any], leaf: Leaf, new: str | None) -> Any:
    """A copy of ``arguments`` with ``new`` in the place of ``leaf``.

    ``None`` leaves the place empty: ``null`` for a value, ``""`` for a part
    of a packed string or for a key.
    """
    if leaf.part is None:
        empty = "" if leaf.at and leaf.at[-1][0] == RENAME else None
        return replace(arguments, leaf.at, empty if new is None else new)
    sep = leaf.param.sep or ","
    parts = str(locate_one(arguments, leaf.at)).split(sep)
    old = parts[leaf.part]
    parts[leaf.part] = old.replace(old.strip(), new or "")
    return replace(arguments, leaf.at, sep.join(parts))
