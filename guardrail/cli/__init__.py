"""The ``guardrail`` command: ``guardrail demo``, ``guardrail check`` and ``guardrail replay``.

Inside: ``_main`` (the command and its options), ``_check_call`` (``guardrail
check``: a manifest tried on one conversation), ``_init`` (``guardrail init``: a
starter manifest from tool definitions) and ``_demo`` (the scripted
support conversation of ``guardrail demo``).
"""

from guardrail.cli._main import main

__all__ = ["main"]
