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
import re
from typing import Any

from guardrail._check import parse_arguments
from guardrail.ledger import Ledger

#: The last line of a sealed result, as the reader finds it (after a line break).
_SEAL_LINE = re.compile(r"\n\(result seal ([0-9a-f]{32})\)\Z")
_DOMAIN = b"guardrail tool result"


def seal_result(content: str, ledger: Ledger, *, call_id: str, tool: str, arguments: Any) -> str:
    """``content`` with its seal line: only ``ledger``'s key, for this call, can write it."""
    mac = _mac(ledger, call_id, tool, arguments, content)
    return f"{content}\n(result seal {mac})"


def split_seal(text: str) -> tuple[str, str | None]:
    """The text of a result above its seal line, and the seal (None when it has none)."""
    if not text.endswith(")"):  # the usual case: no seal, nothing to search
        return text, None
    match = _SEAL_LINE.search(text)
    if match is None:
        return text, None
    return text[: match.start()], match.group(1)


def seal_verifies(
    seal: str | None, ledger: Ledger, *, call_id: str, tool: str, arguments: Any, content: str
) -> bool:
    """Whether ``seal`` is ``ledger``'s for this call, these arguments and this text."""
    if seal is None:
        return False
    return hmac.compare_digest(seal, _mac(ledger, call_id, tool, arguments, content))


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


def _mac(ledger: Ledger, call_id: str, tool: str, arguments: Any, content: str) -> str:
    """HMAC-SHA256 of the call's fields, each length-prefixed, keyed with the seal key."""
    parts = (ledger.session_id or "", call_id, tool, canonical_arguments(arguments), content)
    message = bytearray(_DOMAIN)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        # Each field's length first: no two calls run together into the same bytes.
        message += b"\0%d\0" % len(data)
        message += data
    return hmac.new(ledger.seal_key, bytes(message), hashlib.sha256).hexdigest()[:32]
