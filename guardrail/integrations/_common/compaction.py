"""When an adapter compacts, and what it keeps raw: the options every runtime takes alike.

Every adapter compacts inside a run with the same options: ``trigger``
(``("messages", n)``: n messages or more; ``("tokens", n)``: n tokens or
more), ``keep_recent`` (the last turns kept raw) and ``keep_last_messages``
(the last messages kept raw, for an agent's long loop of tool calls within
one user turn), and the same guarantees, which :func:`guardrail.compact`
gives: a call never leaves its result, the ledger block is sealed, the
messages kept are the very ones given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

from guardrail.errors import GuardrailUsageError

__all__ = ["Trigger", "chat_tokens", "check_keep", "check_trigger", "reached"]

Trigger = tuple[Literal["messages", "tokens"], int]
"""When to compact: ``("messages", n)``, n messages or more; ``("tokens", n)``, n tokens or more."""


def check_trigger(trigger: Any) -> Trigger:
    """A valid trigger, or a usage error that shows the two forms."""
    if (
        isinstance(trigger, tuple)
        and len(trigger) == 2
        and trigger[0] in ("messages", "tokens")
        and type(trigger[1]) is int
        and trigger[1] > 0
    ):
        return trigger[0], trigger[1]
    raise GuardrailUsageError(
        f"trigger must be ('messages', n) or ('tokens', n) with n a positive integer, "
        f"not {trigger!r}"
    )


def check_keep(keep_recent: Any, keep_last_messages: Any, *, least: int = 0) -> None:
    """Refuse counts that are no counts: ``keep_recent`` and ``keep_last_messages`` (or None)."""
    for name, value in (("keep_recent", keep_recent), ("keep_last_messages", keep_last_messages)):
        if value is None and name == "keep_last_messages":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise GuardrailUsageError(f"{name} must be an integer >= {least}, not {value!r}")


def chat_tokens(messages: Sequence[Any]) -> int:
    """Characters / 4 of the messages written as JSON: the token count a trigger reads."""
    return math.ceil(len(json.dumps(list(messages), default=str, ensure_ascii=False)) / 4)


def reached(trigger: Trigger, messages: Sequence[Any], *, tokens: int | None = None) -> bool:
    """Whether ``messages`` reach ``trigger`` (``tokens``: their count, where known already)."""
    kind, limit = trigger
    if kind == "messages":
        return len(messages) >= limit
    return (tokens if tokens is not None else chat_tokens(messages)) >= limit
