"""Tool arguments as a model gives them: a mapping, or a JSON object written as text.

Runtimes hand a call's arguments over either way (chat completions as JSON
text, Anthropic and most adapters as objects); everything that reads a
call's identifiers first makes them one mapping here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def parse_arguments(arguments: object) -> Mapping[str, Any] | None:
    """Arguments as a mapping; a JSON object given as text is parsed. None when neither."""
    if isinstance(arguments, Mapping):
        return arguments
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None
