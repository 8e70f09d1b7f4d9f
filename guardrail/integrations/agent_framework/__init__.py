"""Microsoft Agent Framework: every tool call of an agent checked against the conversation's ledger.

One context provider guards an agent::

    agent = Agent(client=client, tools=[...], context_providers=[Guardrail(guard)])
    session = agent.create_session(session_id=conversation_id)
    response = await agent.run("Refund my blender order", session=session)

:class:`Guardrail` is a context provider: before each run it observes the
user's new messages (ids the user typed enter the ledger unverified) and adds
the run's middleware. :class:`GuardrailMiddleware`, function middleware,
checks each tool call with :meth:`Guard.enforce` before it runs, runs an
allowed call with the arguments the model sent and records its result
(:meth:`Guard.record`). A refused call does not run: in ``reprompt`` mode the
model reads the re-prompt as the call's result and the run goes on; in
``raise`` mode :class:`IdentifierViolation` ends the run (a
``MiddlewareFailure``, which the function loop does not turn into a tool
error). A tool whose parameters are marked ``Annotated[str, Id("order")]`` is
declared by its marks, each id is checked under the name the model sent it
by, and the tools the model is given say, on each id parameter, to copy the
value exactly.

A call whose ids wait for the user (an ``ask``, in any mode but
``observe``) goes through the framework's own function approvals: its result
is a ``function_approval_request`` (``response.user_input_requests``) whose
``additional_properties`` carry the guard's requests (``"guardrail"``: each
value, its kind and its evidence) and the question to show
(``"question"``). Answer with ``request.to_function_approval_response(True)``
(or ``False``) in a user message of the same session: the framework binds the
answer to the request it recorded and replays the call once; the guard
approves the values for that session and tool, and the call runs. A no is
kept by the guard (the value is refused for that tool afterwards) and the
model reads that the user rejected the call. Asks need a session the
program owns (``session=`` to ``agent.run``), as the framework's approvals do.

With ``Guardrail(guard, ledger_instructions=True)`` the model's instructions
end with the conversation's ID LEDGER block at every model call.
:class:`GuardrailCompaction` is a ``CompactionStrategy``
(``Agent(compaction_strategy=...)``) that compacts the messages of a long
run with :func:`guardrail.compact`, no id lost.

The conversation is the run's ``AgentSession`` (its ``session_id``); a
``session=`` callable chooses otherwise. An agent used as a tool
(``agent.as_tool()``) runs in a session of its own unless built with
``propagate_session=True``, and so in a ledger of its own. Needs the
``agent-framework`` extra: ``pip install 'guardrail-ids[agent-framework]'``.

Inside: ``_middleware`` (the function middleware), ``_provider`` (the context
provider and its per-call chat middleware), ``_compaction`` (the compaction
strategy, and the framework's messages read as chat dicts), ``_sessions``
(which conversation a run is) and ``_framework`` (the undocumented names the
adapter reads, in one place).
"""

from __future__ import annotations

try:
    import agent_framework  # noqa: F401
except ImportError as missing:  # pragma: no cover - exercised with the module hidden
    raise ImportError(
        "guardrail.integrations.agent_framework needs Microsoft Agent Framework: "
        "pip install 'guardrail-ids[agent-framework]' (Python 3.11 or newer)"
    ) from missing

from guardrail.integrations.agent_framework._compaction import GuardrailCompaction
from guardrail.integrations.agent_framework._middleware import GuardrailMiddleware
from guardrail.integrations.agent_framework._provider import Guardrail
from guardrail.integrations.agent_framework._sessions import SessionOf

__all__ = ["Guardrail", "GuardrailCompaction", "GuardrailMiddleware", "SessionOf"]
