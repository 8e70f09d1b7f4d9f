"""Records as JSON text and back, fast: the stores' one encoding."""

from __future__ import annotations

import json
from typing import Any

#: One encoder for every record: json.dumps with options builds a new encoder per call.
encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def decode(text: str) -> Any:
    """One JSON text."""
    return json.loads(text)


def decode_all(texts: list[str]) -> list[Any]:
    """Many records' JSON texts in one parse: one call into the C decoder, not one per row."""
    return json.loads("[" + ",".join(texts) + "]") if texts else []
