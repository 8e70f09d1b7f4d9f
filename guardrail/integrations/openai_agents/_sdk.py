"""What the adapter reads of the Agents SDK beyond its documented API, in one place.

The SDK keeps a few things the adapter needs under private names: which
function tool ``Agent.as_tool()`` built and the agent it runs (to refuse a
sub-agent whose tools are unguarded), the agent a ``handoff()`` was built
for (to hand off to its guarded copy), a tool's failure formatter (to mark
the failures it writes), and the SDK's own conversion of a tool's output to
text. Every other name the adapter uses is public. ``tests/integrations/
test_openai_agents.py`` builds each object with the installed SDK and fails,
naming the attribute and this file, when a release renames or drops one.
Private to :mod:`guardrail.integrations.openai_agents`.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AGENT_INSTANCE",
    "AGENT_REF",
    "CONVERT_OUTPUT",
    "DEFAULT_FAILURE",
    "FAILURE_FORMATTER",
    "IS_AGENT_TOOL",
    "SET_FAILURE_FORMATTER",
    "UNDOCUMENTED",
]

#: ``FunctionTool``: True for a tool ``Agent.as_tool()`` built.
IS_AGENT_TOOL: Final = "_is_agent_tool"
#: ``FunctionTool`` of ``Agent.as_tool()``: the agent it runs.
AGENT_INSTANCE: Final = "_agent_instance"
#: ``FunctionTool``: the failure formatter it was built with.
FAILURE_FORMATTER: Final = "_failure_error_function"
#: ``FunctionTool``: whether it formats failures the SDK's default way.
DEFAULT_FAILURE: Final = "_use_default_failure_error_function"
#: ``Handoff``: a weak reference to the agent ``handoff()`` was built for.
AGENT_REF: Final = "_agent_ref"
#: ``ItemHelpers``: the SDK's own conversion of a tool's output to the text the model reads.
CONVERT_OUTPUT: Final = "_convert_tool_output"
#: ``agents.tool``: sets a tool's failure formatter (exported by no public module).
SET_FAILURE_FORMATTER: Final = "set_function_tool_failure_error_function"

#: Every undocumented name the adapter reads, by what holds it.
UNDOCUMENTED: Final = {
    "FunctionTool": (IS_AGENT_TOOL, AGENT_INSTANCE, FAILURE_FORMATTER, DEFAULT_FAILURE),
    "Handoff": (AGENT_REF,),
    "ItemHelpers": (CONVERT_OUTPUT,),
    "agents.tool": (SET_FAILURE_FORMATTER,),
}
