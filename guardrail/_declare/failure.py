"""A tool's failure rule (``fails=``): what its results look like when it failed, compiled once.

Many tools report a failure by returning text (``"Error: user not found"``)
rather than by raising. A result that reads as a failure harvests nothing,
verifies nothing and mints nothing, so the rule that tells one from a success
is declared once and read the same way everywhere (the decorator, every
adapter, the replay, compaction; see :mod:`guardrail._provenance.failure`).

``fails=`` is declared on a tool (``@guard.tool``, ``guard.declare``,
``guard.patch``), for a whole guard (``Guard(fails=...)``) or in a manifest
(a tool's ``fails``, or a top-level ``fails`` for the manifest's tools that
declare none). It is one of these, or a list of them (any one says failed):

- a text prefix, ``"Error:"``: the result's text starts with it, after
  leading white space (case counts);
- a pattern, ``"re:(?i)^not found"`` or a compiled ``re.Pattern``: searched
  in the result's text (anchor it with ``^`` to test the start);
- a field and its value, ``{"field": "status", "value": "error"}``: a value
  at that result path (``status``, ``meta.outcome``, ``results[*].ok``)
  equals it (``true`` is no ``1``);
- a function ``(result) -> bool``: a truthy answer says failed; it gets the
  result as the harvest reads it (a text that is JSON, parsed). One that
  raises reads as a failure: the guard cannot tell, and learning nothing
  from a result is the side that never confirms a wrong id;
- ``False``: no rule, for a tool whose normal output may start with
  ``Error``.

A declared rule replaces the default; ``None`` (not declared) takes the
guard's rule, and the guard's default is :data:`DEFAULT_FAILS`: a text
result that says it is an error, ``Error:`` in any case after leading white
space (as recorded traces have always been read). The result's *text* is a
plain-text result (``str`` or UTF-8 ``bytes``) or the string a JSON text
holds; the fields of a JSON object are read by ``{"field", "value"}`` rules
only. Whatever the rule, a call that raised, ``error=True``, a refusal, a
failure guardrail or a runtime wrote and an error shape (``{"error": ...}``,
``is_error``, ``isError``) are failures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from guardrail._declare.paths import Path, compile_path
from guardrail.errors import GuardrailUsageError

#: One rule as declared (see the module docstring).
FailsRule: TypeAlias = str | re.Pattern[str] | Mapping[str, Any] | Callable[[Any], object]
#: ``fails=`` as declared: a rule, a list of rules, ``False`` (no rule) or None (not declared).
Fails: TypeAlias = FailsRule | Sequence[FailsRule] | bool | None

#: The text the default rule looks for at the start of a result's text, in any case.
ERROR_TEXT = "error:"

#: The types a ``{"field", "value"}`` rule's value may have: what JSON and TOML can write.
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class FailureRule:
    """A compiled failure rule: prefixes, patterns, field values and functions, any one enough.

    ``error_text``: the default rule's test, a text starting ``Error:`` in any
    case. ``declared``: the rule as written, for reading it back.
    """

    prefixes: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    fields: tuple[tuple[Path, Any], ...] = ()
    checks: tuple[Callable[[Any], object], ...] = ()
    error_text: bool = False
    declared: Fails = None

    def says_failed(self, value: Any, text: str | None) -> bool:
        """Whether a decoded result (its value and its text, see the module docstring) failed.

        A function of the rule that raises propagates: the caller reads that
        as a failure, and says so.
        """
        if text is not None:
            head = text.lstrip()
            if self.error_text and head[: len(ERROR_TEXT)].lower() == ERROR_TEXT:
                return True
            if any(head.startswith(prefix) for prefix in self.prefixes):
                return True
            if any(pattern.search(text) for pattern in self.patterns):
                return True
        for path, expected in self.fields:
            if any(_same(found, expected) for found in path.extract(value)):
                return True
        return any(check(value) for check in self.checks)


#: The rule of a guard that declares none: a text result that says it is an error.
DEFAULT_FAILS = FailureRule(error_text=True)
#: ``fails=False``: no rule; only what is a failure whatever the rule.
NO_RULE = FailureRule(declared=False)


def _same(found: Any, expected: Any) -> bool:
    """JSON equality: ``true`` is no ``1``, ``1`` is ``1.0``."""
    if isinstance(found, bool) or isinstance(expected, bool):
        return found is expected
    return bool(found == expected) if isinstance(found, _SCALARS) else False


def compile_fails(declared: object, *, tool: str | None = None) -> FailureRule | None:
    """``fails=`` checked and compiled; None for ``None`` (not declared: the guard's rule).

    Bad input is a :class:`~guardrail.errors.GuardrailUsageError` that says what
    a rule may be.
    """
    if declared is None:
        return None
    if isinstance(declared, FailureRule):
        return declared
    if declared is False:
        return NO_RULE
    rules = (
        list(declared)
        if isinstance(declared, Sequence) and not isinstance(declared, (str, bytes))
        else [declared]
    )
    if not rules:
        raise _bad(declared, tool, "an empty list")
    prefixes: list[str] = []
    patterns: list[re.Pattern[str]] = []
    fields: list[tuple[Path, Any]] = []
    checks: list[Callable[[Any], object]] = []
    for rule in rules:
        if isinstance(rule, str) and rule.startswith("re:"):
            patterns.append(_pattern(rule[3:], tool))
        elif isinstance(rule, str) and rule:
            prefixes.append(rule)
        elif isinstance(rule, re.Pattern) and isinstance(rule.pattern, str):
            patterns.append(rule)
        elif isinstance(rule, Mapping):
            fields.append(_field(rule, tool))
        elif callable(rule) and not isinstance(rule, type):
            checks.append(rule)
        else:
            raise _bad(declared, tool, repr(rule))
    return FailureRule(
        prefixes=tuple(prefixes),
        patterns=tuple(patterns),
        fields=tuple(fields),
        checks=tuple(checks),
        declared=cast(Fails, declared),
    )


def _pattern(text: str, tool: str | None) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise GuardrailUsageError(
            f"{_who(tool)}: fails 're:{text}' is not a valid regular expression: {exc}",
            tool=tool,
        ) from None


def _field(rule: Mapping[str, Any], tool: str | None) -> tuple[Path, Any]:
    """A ``{"field": PATH, "value": VALUE}`` rule, compiled."""
    field, value = rule.get("field"), rule.get("value", _ABSENT)
    if set(rule) != {"field", "value"} or not isinstance(field, str) or not field:
        raise GuardrailUsageError(
            f"{_who(tool)}: a fails rule of a field is {{'field': PATH, 'value': VALUE}} "
            f"(for example {{'field': 'status', 'value': 'error'}}), not {dict(rule)!r}",
            tool=tool,
        )
    if not isinstance(value, _SCALARS):
        raise GuardrailUsageError(
            f"{_who(tool)}: the value of fails field {field!r} is text, a number, true, false "
            f"or null (what the result holds when the tool failed), not {value!r}",
            tool=tool,
        )
    return compile_path(field, tool=tool, param=f"fails field {field!r}"), value


_ABSENT = object()


def _who(tool: str | None) -> str:
    return f"tool {tool!r}" if tool is not None else "the guard"


def _bad(declared: object, tool: str | None, what: str) -> GuardrailUsageError:
    return GuardrailUsageError(
        f"{_who(tool)}: fails is a text prefix ('Error:'), a pattern ('re:^Failed' or "
        "re.compile(...)), a field and its value ({'field': 'status', 'value': 'error'}), a "
        "function (result) -> bool, a list of these, or False (no rule: the tool's text never "
        f"says it failed); not {what}" + (f" in {declared!r}" if repr(declared) != what else ""),
        tool=tool,
    )
