"""Adapters for agent runtimes, each an optional extra over the same core.

- :mod:`guardrail.integrations.pydantic_ai`: Pydantic AI (``pip install 'guardrail[pydantic-ai]'``).
"""
