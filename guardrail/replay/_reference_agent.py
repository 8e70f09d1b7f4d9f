"""The reference agent: the recorded call, made with identifier values read from the context.

:func:`reference_agent` stands for a careful model that knows what it wants
to do (the :class:`~guardrail.replay._agent.Intent` says) and copies every
identifier from what is in front of it: the ID LEDGER block, else the value
verbatim, else its closest look-alike. Being deterministic, it proves the
harness: any difference its calls show after compaction is what the
compaction left in the context.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from guardrail._data.text import ELLIPSES, TOKEN_BREAKS, has_token
from guardrail._transcript.content import strings
from guardrail.compaction import ledger_values
from guardrail.errors import GuardrailUsageError
from guardrail.replay._agent import Intent


def reference_agent(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    intent: Intent | None = None,
) -> dict[str, Any] | None:
    """A deterministic agent that makes the recorded call with values read from the context.

    It stands for a careful model that knows what it wants to do: from the
    ``intent`` it knows the tool, the other arguments, and for each
    identifier argument its kind and its ledger role in the uncompacted
    run. Every identifier value it uses it takes from ``messages``:

    1. the value of the role in the ID LEDGER block, when the context has one
       naming that role (read with :func:`guardrail.compaction.ledger_values`);
    2. else the recorded value where the context has it verbatim, as a whole
       token;
    3. else the closest look-alike the context has (one character changed,
       inserted, deleted or swapped, or a cut-short copy ending in an
       ellipsis), as a model copies what a summary left;
    4. else nothing: the argument is left empty (``null``), and the call is
       made with the rest, so each argument's fate is seen on its own.

    So on an uncompacted context it repeats the recorded call wherever the
    ids are there to copy, and any difference after compaction is what the
    compaction left in the context.
    """
    if intent is None:
        raise GuardrailUsageError(
            "reference_agent replays a recorded call and needs intent=; run it through "
            "replay(..., agent=reference_agent) or guardrail replay --agent"
        )
    block = ledger_values(messages)
    text = "\n".join(strings(list(messages)))
    values = []
    for slot in intent.slots:
        value = block.get(slot.role) if slot.role is not None else None
        values.append(value if value is not None else _verbatim_or_look_alike(slot.recorded, text))
    return {"name": intent.tool, "arguments": intent.fill(values)}


#: A token of a tool output or a message as the reference agent reads one: a token of prose
#: (:data:`~guardrail._data.text.TOKEN`) that ``|`` and ``=`` end as well, so a value in a table
#: cell or on a ``key=value`` line is a token of its own. The summary lint judges such a
#: token whole (what it flags would change with it).
_TOKEN = re.compile(f"[^{TOKEN_BREAKS}|=]+")
_TRAILING = ".:!?"


def _tokens(text: str) -> Iterator[str]:
    for match in _TOKEN.finditer(text):
        token = match.group()
        if not token.endswith(ELLIPSES):
            token = token.rstrip(_TRAILING)
        if token:
            yield token


def _verbatim_or_look_alike(wanted: str, text: str) -> str | None:
    if has_token(text, wanted):
        return wanted
    best: tuple[int, str] | None = None
    for token in _tokens(text):
        score = _likeness(token, wanted)
        if score is not None and (best is None or score < best[0]):
            best = (score, token)
    return best[1] if best is not None else None


def _likeness(token: str, wanted: str) -> int | None:
    """1 for one edit or swap away, 2 for a cut-short copy; None when not alike."""
    for ellipsis in ELLIPSES:
        if token.endswith(ellipsis):
            stem = token[: -len(ellipsis)]
            return 2 if len(stem) >= 2 and wanted.startswith(stem) else None
    if abs(len(token) - len(wanted)) > 1 or len(wanted) < 4:  # three letters: another code
        return None
    return 1 if _one_edit(token, wanted) else None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one substitution, insertion, deletion or adjacent swap."""
    if a == b:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        return (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]
