"""Adapters that put guardrail around the tool calls of agent runtimes, one optional extra each.

- :mod:`guardrail.integrations.openai_agents`: the OpenAI Agents SDK
  (``pip install 'guardrail[openai-agents]'``).
"""
