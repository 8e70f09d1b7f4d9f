"""Adapters for agent runtimes, each an optional extra over the same public core.

- :mod:`guardrail.integrations.langchain`: LangChain v1 agent middleware
  (``pip install 'guardrail[langchain]'``).
"""
