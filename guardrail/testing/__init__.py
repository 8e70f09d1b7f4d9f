"""What a test suite imports: the ``guardrail_replay`` pytest fixture and its helpers.

The fixture comes with the ``pytest11`` entry point (:mod:`guardrail.testing._plugin`);
:func:`strategies` gives the two compactions a replay compares. The
evaluation harness itself lives in :mod:`guardrail.replay`. Inside:
``_plugin``, the fixture.
"""

from __future__ import annotations

from guardrail.replay import strategies
from guardrail.testing._plugin import GuardrailReplay

__all__ = ["GuardrailReplay", "strategies"]
