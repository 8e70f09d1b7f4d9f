"""What a test suite imports: the ``guardrail_replay`` pytest fixture and its helpers.

The fixture comes with the ``pytest11`` entry point (:mod:`guardrail.testing._plugin`);
:func:`strategies` gives the two compactions a replay compares. The
evaluation harness itself lives in :mod:`guardrail.replay`; its names are
still importable from here for one release, with a deprecation warning.
"""

from __future__ import annotations

import warnings
from typing import Any

from guardrail.replay import strategies
from guardrail.testing._plugin import GuardrailReplay

__all__ = ["GuardrailReplay", "strategies"]


def __getattr__(name: str) -> Any:
    from guardrail import replay

    new = replay._RENAMED.get(name, name)  # a name that moved and was respelled: the new one
    if new in replay.__all__:
        warnings.warn(
            f"guardrail.testing.{name} moved to guardrail.replay.{new}; import it from there "
            "(the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(replay, new)
    raise AttributeError(f"module 'guardrail.testing' has no attribute {name!r}")
