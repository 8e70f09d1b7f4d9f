"""Tool results that are failures: the flags each runtime sets, and the texts one writes.

A transcript read back (by compaction, by a replay) must never take a failed
call for a success: a lookup declared ``verifies="on_success"`` would confirm
the id it was given, and a ``re:`` producer would harvest the ids an error
text names. Each runtime says "this call failed" its own way:

- **a flag beside the result**: Anthropic's ``is_error``, MCP's ``isError``,
  LangChain's ``status="error"``, the ``error`` the adapters and recorded
  traces write on a chat message, a Responses ``status`` other than
  ``completed``. :func:`flagged` reads every one of them, in every shape, as
  the replay's trace reader does;
- **a part of its own**: Pydantic AI's ``RetryPromptPart`` and a
  ``ToolReturnPart`` whose ``outcome`` is not ``success``, read by the Pydantic
  AI adapter's history reader;
- **only the text**: the OpenAI Agents SDK answers a function call that raised,
  timed out, named no tool or was not approved with a ``function_call_output``
  item holding a sentence of its own and no ``status`` (its items never carry
  one). :func:`runtime_failure` knows those sentences.

Text is matched as narrowly as it can be. A fixed sentence matches only as the
whole text, and a template only anchored at both ends, its variable part held
to a tool's name or a number: a result whose whole text is the SDK's failure
sentence names no id, so nothing is lost on a genuine success that happens to
read so, while a success that merely begins alike ("An error occurred while
running the nightly report: orders W1 and W2 failed") keeps every id. The one
prefix is the SDK's default text of earlier releases, two whole sentences and
the SDK's own ``Error:`` separator after them (``... Please try again. Error:
<exception>``): a result that opens by saying it failed and asking to be tried
again is no success, and the exception text after it is exactly what must not
be harvested (histories recorded then are still read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["flagged", "runtime_failure"]

#: What the OpenAI Agents SDK writes, in place of a result, as the whole output text:
#: a tool that raised (the default ``failure_error_function``), a call a human did not
#: approve, and a second handoff of one turn that was ignored.
_SDK_SENTENCES = frozenset(
    {
        "An error occurred while running the tool. Please try again.",
        "Tool execution was not approved.",
        "Multiple handoffs detected, ignoring this one.",
    }
)
#: The SDK's default text for a tool that raised, or whose arguments were not JSON, in
#: earlier releases: the exception's own text follows the ``Error:`` separator.
_SDK_LEGACY_PREFIXES = (
    "An error occurred while running the tool. Please try again. Error: ",
    "An error occurred while parsing tool arguments. Please try again with valid JSON. Error: ",
)
#: The SDK's answer for a call that timed out (``timeout=``) or named a tool the agent
#: does not have: the tool's name (as a function tool's name may be spelled) and the
#: number of seconds are all that varies.
_SDK_TEMPLATES = re.compile(
    r"Tool '[A-Za-z0-9_.:/-]{1,256}' "
    r"(?:timed out after [0-9][0-9.]{0,30}(?:e[+-]?[0-9]{1,4})? seconds|not found)\."
)


def runtime_failure(text: str) -> bool:
    """Whether ``text`` is what a runtime writes in place of the result of a failed call.

    Only the OpenAI Agents SDK's sentences (see the module docstring); a few
    comparisons, no search.
    """
    text = text.strip()
    if text in _SDK_SENTENCES or text.startswith(_SDK_LEGACY_PREFIXES):
        return True
    return text.startswith("Tool '") and _SDK_TEMPLATES.fullmatch(text) is not None


def flagged(raw: Mapping[str, Any]) -> bool:
    """Whether a tool result's own fields mark it failed, whatever its message shape.

    A true ``error`` (some writers put the message there), ``is_error`` or
    ``isError``, or a ``status`` of ``"error"``.
    """
    return (
        bool(raw.get("error"))
        or bool(raw.get("is_error"))
        or bool(raw.get("isError"))
        or raw.get("status") == "error"
    )
