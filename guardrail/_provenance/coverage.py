"""Coverage: which declared result paths reach something in a result, and where a value sits.

A declared path that reaches nothing is silent at run time: ``variants[*].item_id``
where ``variants`` is an object (keyed by id) harvests nothing, and the ids
the model then uses are refused as invented. :func:`reached` tells, per
producer of a tool, whether it reached a value in one successful result
(``guardrail check`` prints the ones that did not; ``guardrail replay`` counts
them over a corpus). :func:`places` finds where a value sits in a result, in
result path syntax, so a report can name the declaration that would admit it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from guardrail._declare.paths import compile_path
from guardrail._declare.spec import ToolSpec
from guardrail._provenance.harvest import decode, leaves

_PLAIN_KEY = re.compile(r"[A-Za-z_]\w*")


def reached(spec: ToolSpec, result: Any) -> dict[str, bool]:
    """Per declared producer of ``spec`` (as written), whether it reached a value in ``result``."""
    value, text = decode(result, [])
    found: dict[str, bool] = {}
    for producer in spec.produces:
        try:
            values = leaves(producer, value, text).values
        except Exception:  # a path over a shape it cannot walk reaches nothing
            values = []
        hit = any(leaf is not None and leaf != "" for leaf in values)
        found[producer.source] = found.get(producer.source, False) or hit
    return found


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


def _repaired(spec: ToolSpec | None, output: Any, value: str, kind: str) -> tuple[str, str] | None:
    """A declared path of ``kind``, a list step read as an object's values or back, reaching it.

    ``variants[*].item_id`` over ``{"variants": {"v1": {"item_id": ...}}}`` is
    ``variants.*.item_id``: the one-step fix of the commonest slip.
    """
    if spec is None:
        return None
    decoded, _ = decode(output, [])
    for producer in spec.produces:
        if producer.kind != kind or producer.path is None:
            continue
        text = producer.path.text
        for candidate in (text.replace("[*]", ".*"), text.replace(".*", "[*]")):
            candidate = candidate.removeprefix(".")
            if candidate == text:
                continue
            try:
                found = compile_path(candidate).extract(decoded)
            except Exception:  # not a path after all: no repair
                continue
            if any(str(leaf).strip() == value for leaf in found):
                return candidate, text
    return None


def admitting(
    tool: str, output: Any, value: str, kind: str, spec: ToolSpec | None = None
) -> str | None:
    """The declaration that would admit ``value`` from ``tool``'s ``output`` (None: not there).

    Given the tool's ``spec``, a declared path of that kind one step off (a
    list read where the result has an object) is named as the fix.
    """
    repaired = _repaired(spec, output, value, kind)
    if repaired is not None:
        path, declared = repaired
        return f'write produces={{"{path}": "{kind}"}} on {tool} in place of {declared!r}'
    for path, whole in places(output, value):
        if whole:
            return f'declare produces={{"{path}": "{kind}"}} on {tool}'
        if path == "$":  # plain text output: a re: producer reads it
            return f'in its text: declare produces={{"re:PATTERN": "{kind}"}} on {tool}'
        return f"at {path}, inside a longer text: return it in a field of its own"
    return None
