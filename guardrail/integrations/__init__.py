"""Adapters for agent runtimes, each a thin layer over the same core.

- :mod:`guardrail.integrations.loops`: hand-written loops over the OpenAI and Anthropic APIs
  (no extra).
- :mod:`guardrail.integrations.mcp`: MCP clients and servers
  (``pip install 'guardrail-ids[mcp]'``).
- :mod:`guardrail.integrations.pydantic_ai`: Pydantic AI
  (``pip install 'guardrail-ids[pydantic-ai]'``).
- :mod:`guardrail.integrations.openai_agents`: the OpenAI Agents SDK
  (``pip install 'guardrail-ids[openai-agents]'``).
- :mod:`guardrail.integrations.langchain`: LangChain v1 agent middleware
  (``pip install 'guardrail-ids[langchain]'``).
- :mod:`guardrail.integrations.crewai`: CrewAI crews
  (``pip install 'guardrail-ids[crewai]'``).
- :mod:`guardrail.integrations.google_adk`: Google's Agent Development Kit
  (``pip install 'guardrail-ids[google-adk]'``).
- :mod:`guardrail.integrations.agent_framework`: Microsoft Agent Framework
  (``pip install 'guardrail-ids[agent-framework]'``).
- :mod:`guardrail.integrations.otel`: OpenTelemetry span events and counters
  (``pip install 'guardrail-ids[otel]'``).

One folder per runtime, its private helpers inside it; what they share is in
``_common``. Each imports the public guard and the core below it, and its own
runtime's package, never another adapter's private modules.
"""
