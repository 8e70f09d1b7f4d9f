"""What a tool result's text says of itself: a refusal, a failure guardrail wrote, a seal.

A runtime may drop a result's flags (chat completions has no error field),
never its text, so guardrail writes these marks into the text and reads
them back in every message shape: a refusal begins :data:`REFUSAL_PREFIX`
(or is ``Rejection.to_dict()`` as JSON, ``error`` :data:`REFUSED_ERROR`), a
failure it wrote for a call that failed or never ran begins
:data:`FAILURE_PREFIX`, and a result a server sealed ends in its seal line.
"""

from __future__ import annotations

import re

#: The ``error`` field of a refusal written as JSON (``Rejection.to_dict()``).
REFUSED_ERROR = "identifier_refused"

#: How every refusal's text begins, so a refusal sent back as a tool result is known as one.
REFUSAL_PREFIX = "guardrail refused the call to "


def is_refusal(text: str) -> bool:
    """Whether ``text`` is a refusal's text (a tool result that no tool produced)."""
    return text.lstrip().startswith(REFUSAL_PREFIX)


#: How the text of every tool result guardrail writes for a call that failed or never ran
#: begins (a tool that raised, arguments that did not validate, no such tool, no result).
#: OpenAI chat completions has no error field, so this text is how guardrail's own readers
#: know such a result for a failure in that shape; they check it in every shape.
FAILURE_PREFIX = "guardrail: "


def failure_text(detail: str) -> str:
    """The text of a tool result guardrail writes for a call that failed or did not run."""
    return f"{FAILURE_PREFIX}{detail}"


def is_failure(text: str) -> bool:
    """Whether ``text`` is one guardrail wrote for a call that failed or never ran."""
    return text.lstrip().startswith(FAILURE_PREFIX)


#: The last line of a tool result a server sealed (see :mod:`guardrail._provenance.seal`), as read.
_RESULT_SEAL = re.compile(r"\n\(result seal ([0-9a-f]{32})\)\Z")


def with_seal(content: str, seal: str) -> str:
    """A tool result's text with a server's seal written on its last line."""
    return f"{content}\n(result seal {seal})"


def split_seal(text: str) -> tuple[str, str | None]:
    """The text of a result above its seal line, and the seal (None when it has none)."""
    if not text.endswith(")"):  # the usual case: no seal, nothing to search
        return text, None
    match = _RESULT_SEAL.search(text)
    if match is None:
        return text, None
    return text[: match.start()], match.group(1)


class Refusal:
    """What a refused call returns in place of a result (``Rejection`` is one).

    Known by its class wherever a result is read: no tool produced it, so
    nothing in it is harvested.
    """

    __slots__ = ()
