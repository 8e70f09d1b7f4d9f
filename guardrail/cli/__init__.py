"""The ``guardrail`` command: ``guardrail demo`` and ``guardrail replay``."""

from guardrail.cli._main import main

__all__ = ["main"]
