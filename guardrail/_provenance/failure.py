"""Whether a tool's result is a failure: the one rule every reader of results follows.

A failed result teaches nothing: it may echo the very id that was not found
(``Error: order #W5061109 not found``), so it harvests nothing (no declared
field, no ``$`` or ``re:`` producer, no mention), verifies nothing (a lookup
declared ``verifies="on_success"`` confirms nothing) and mints nothing. The
decorator and :meth:`guardrail.Guard.record` (and so every adapter, which
records through it), the plain loops' status, the replay and compaction (its
harvest, the ledger it rebuilds from a transcript, its summary) all decide
success with :func:`failed` (or :func:`result_failed`, given a rule).

A result is a failure when the tool's failure rule
(:mod:`guardrail._declare.failure`: its ``fails=``, else the guard's, by
default a text starting ``Error:``) reads it so, or, whatever the rule, when
no tool wrote it as a success: a refusal (a :class:`Refusal`, its text or its
JSON), a failure guardrail wrote (``guardrail: ...``), a runtime's failure
sentence (:func:`~guardrail._transcript.failures.runtime_failure`), or an
error shape (a mapping whose ``error`` is truthy, or whose ``is_error`` or
``isError`` is true). A call that raised, or that the caller records with
``error=True``, never reaches the rule.

:func:`suspect_success` is the other side: a result the rule took for a
success although its text reads like an error (:data:`ERROR_LOOKING`), and
from which a producer harvested ids. The replay and ``guardrail check`` warn
about it: the rule was overridden, or misses the tool's own failure text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from guardrail._data.text import shorten
from guardrail._declare.failure import DEFAULT_FAILS, FailureRule
from guardrail._declare.spec import ToolSpec
from guardrail._provenance.harvest import OPAQUE_TYPES, Harvest, batches_of, decode
from guardrail._transcript.failures import runtime_failure
from guardrail._transcript.result_text import Refusal, is_failure, is_refusal
from guardrail.kinds import Kind

__all__ = [
    "ERROR_LOOKING",
    "SuspectSuccess",
    "decoded_failed",
    "failed",
    "reads_like_error",
    "recordable",
    "result_failed",
    "suspect_success",
]


def failed(spec: ToolSpec | None, result: Any) -> bool:
    """Whether ``result``, returned by the tool ``spec`` declares, is a failure.

    The one rule (see the module docstring): ``spec.fails`` (the tool's own
    ``fails=``, else the guard's rule, resolved when the tool was declared),
    or the default rule for a tool with no spec. A rule's function that
    raises reads as a failure. Never raises.
    """
    return result_failed(spec.fails if spec is not None else DEFAULT_FAILS, result)


def result_failed(rule: FailureRule, result: Any) -> bool:
    """:func:`failed` under a given rule (a guard's, for a tool it does not know)."""
    problems: list[str] = []
    value, text = decode(result, problems)
    return decoded_failed(rule, value, text)


def decoded_failed(
    rule: FailureRule, value: Any, text: str | None, problems: list[str] | None = None
) -> bool:
    """:func:`failed` for a result already decoded into its value and its text.

    A function of the rule that raises reads as a failure, and ``problems``
    (if given) says so.
    """
    if _no_success(value, text):
        return True
    try:
        return rule.says_failed(value, text)
    except Exception as exc:  # the program's own rule: it must never break the call
        if problems is not None:
            problems.append(
                f"the fails= rule raised {type(exc).__name__}: {shorten(str(exc), 120)}; "
                "the result is read as a failure"
            )
        return True


def _no_success(value: Any, text: str | None) -> bool:
    """Whether no tool wrote this result as a success, whatever the tool's rule says.

    A refusal, a failure guardrail or a runtime wrote, an error shape.
    """
    if text is not None and (is_refusal(text) or is_failure(text) or runtime_failure(text)):
        return True
    if isinstance(value, Mapping):
        try:
            return (
                bool(value.get("error"))
                or value.get("is_error") is True
                or value.get("isError") is True
            )
        except Exception:  # an error field that cannot say whether it is set
            return True
    if isinstance(value, str):
        return is_refusal(value) or is_failure(value) or runtime_failure(value)
    if type(value) in OPAQUE_TYPES or isinstance(value, (list, bytes)):
        return False
    return isinstance(value, Refusal)


def recordable(
    spec: ToolSpec, result: Any, kinds: Mapping[str, Kind], problems: list[str] | None = None
) -> tuple[Harvest | None, Any]:
    """What a result yields (None: it failed), and its decoded value.

    The yield is :func:`~guardrail._provenance.harvest.harvest`'s. Decoded
    once for the failure rule, the harvest and the mentions. ``problems``
    (if given) learns why a rule's function made it a failure.
    """
    found: list[str] = []
    value, text = decode(result, found)
    if decoded_failed(spec.fails, value, text, problems):
        return None, value
    return batches_of(spec, value, text, found, kinds), value


# -- results that read like errors ------------------------------------------------------------

#: How a result's text begins (in any case, after leading white space) when it reads like an
#: error: a success that begins so, and from which a producer harvests ids, is warned about
#: by the replay and ``guardrail check``. A short list on purpose: words a tool's failure text
#: starts with, which a success rarely does.
ERROR_LOOKING: tuple[str, ...] = (
    "error",
    "failed",
    "failure",
    "not found",
    "no such",
    "invalid",
    "unable to",
    "could not",
    "cannot",
)


def reads_like_error(text: str) -> str | None:
    """The words an error-looking text begins with, as written (None: it does not read so)."""
    head = text.lstrip()
    start = head[:16].lower()
    for words in ERROR_LOOKING:
        if start.startswith(words) and not head[len(words) : len(words) + 1].isalnum():
            return head[: len(words)]
    return None


class SuspectSuccess(NamedTuple):
    """A result read as a success whose text reads like an error, and what was harvested from it.

    ``words``: how its text begins (``Error``, ``Not found``); ``text``: its
    beginning; ``harvested``: ``(kind, value)`` of the ids producers took.
    """

    tool: str
    words: str
    text: str
    harvested: tuple[tuple[str, str], ...]

    @property
    def advice(self) -> str:
        """What to declare so that such a result harvests nothing."""
        shown = ", ".join(f"{kind} {value!r}" for kind, value in self.harvested[:3])
        more = f" and {len(self.harvested) - 3} more" if len(self.harvested) > 3 else ""
        return (
            f"{self.tool}: a result that reads like an error ({self.text!r}) was taken for a "
            f"success, and {shown}{more} harvested from it. If {self.tool} reports failure "
            f'so, declare it: fails = "{self.words}" on {self.tool} (or a pattern, a field and '
            "its value, a function); a failed result harvests nothing."
        )


def suspect_success(
    spec: ToolSpec, result: Any, kinds: Mapping[str, Kind]
) -> SuspectSuccess | None:
    """A result the rule took for a success that reads like an error, and yielded ids; else None.

    Only text results are read (a plain text, or the string a JSON text
    holds). Never raises.
    """
    try:
        value, text = decode(result, [])
        if text is None or decoded_failed(spec.fails, value, text):
            return None
        words = reads_like_error(text)
        if words is None:
            return None
        found = batches_of(spec, value, text, [], kinds).batches
    except Exception:  # a program's normaliser or rule: the record reported it already
        return None
    harvested = tuple((batch.kind, value) for batch in found for value in batch.values)
    if not harvested:
        return None
    return SuspectSuccess(spec.name, words, shorten(text.strip(), 80), harvested)
