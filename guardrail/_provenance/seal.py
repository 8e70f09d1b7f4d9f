"""Sealed tool results: what a server recorded, told apart from what a client wrote.

A server that keeps no ledger between requests rebuilds it from the
transcript the client sends, and the client writes that transcript: a tool
message it wrote would read like one the server's tool produced. So a guard
with a ``secret`` seals each result it records: the last line of the
result's text, ``(result seal <hex>)``, holds an HMAC-SHA256 (128 bits)
keyed with the session's seal key, over the session id, the call id, the
tool's name, the call's arguments (as the transcript gives them) and the
exact text above it. A runtime keeps a tool result's text in every message
shape, so the seal travels with it; anyone can copy it, but it verifies only
for that session, that call, those arguments and that text.

This module is the one place that reads a ledger's seal key for results.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from guardrail._declare.arguments import parse_arguments
from guardrail._transcript.result_text import with_seal
from guardrail.errors import GuardrailUsageError
from guardrail.ledger._state import LedgerState

_DOMAIN = b"guardrail tool result"


def seal_result(
    content: str, state: LedgerState | None, *, call_id: str, tool: str, arguments: Any
) -> str:
    """``content`` with its seal line: only this ledger's key, for this call, can write it.

    With no ledger to seal with (a guard without a secret), ``content`` as it
    is, once checked.
    """
    check_sealable(content, call_id)
    if state is None:
        return content
    return with_seal(content, _mac(state, call_id, tool, arguments, content))


def check_sealable(content: object, call_id: object) -> None:
    """Refuse content that is not a result's text, and a call id that names no call."""
    if not isinstance(content, str):
        raise GuardrailUsageError(
            f"seal_result seals the text of a tool result, not {type(content).__name__}; "
            "write the result as the text you send, then seal that"
        )
    if not isinstance(call_id, str) or not call_id:
        raise GuardrailUsageError("seal_result needs the call_id the result answers")


def seal_verifies(
    seal: str | None, state: LedgerState, *, call_id: str, tool: str, arguments: Any, content: str
) -> bool:
    """Whether ``seal`` is this ledger's for this call, these arguments and this text."""
    if seal is None:
        return False
    return hmac.compare_digest(seal, _mac(state, call_id, tool, arguments, content))


def canonical_arguments(arguments: Any) -> str:
    """A call's arguments as one text, whatever spacing or key order they were written in.

    A JSON object given as text is parsed first, as the transcript readers
    parse it; other text stays as written.
    """
    if isinstance(arguments, (str, bytes, bytearray)):
        parsed = parse_arguments(arguments)
        if parsed is None:
            return "text:" + (arguments if isinstance(arguments, str) else bytes(arguments).hex())
        arguments = parsed
    try:
        return "json:" + json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON-like (a model, a set): its repr, stable enough
        return "repr:" + repr(arguments)


def _mac(state: LedgerState, call_id: str, tool: str, arguments: Any, content: str) -> str:
    """HMAC-SHA256 of the call's fields, each length-prefixed, keyed with the seal key."""
    parts = (state.session_id or "", call_id, tool, canonical_arguments(arguments), content)
    message = bytearray(_DOMAIN)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        # Each field's length first: no two calls run together into the same bytes.
        message += b"\0%d\0" % len(data)
        message += data
    return hmac.new(state.seal_key, bytes(message), hashlib.sha256).hexdigest()[:32]
