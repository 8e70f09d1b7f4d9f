"""Server-side elicitation for ``tools/call`` requests whose ids wait for the user.

The server asks the user itself, through the client: a form-mode
elicitation whose message shows the call, each value and its evidence, with
one boolean field, ``approve`` (an ``InputRequiredResult`` from protocol
2026-07-28 on, a request of its own before). The user's answer comes from
the client's elicitation handler, never from the model's arguments. A
client that cannot take the form (no form elicitation declared, no channel
back for a server request, an error) gets no question: the call waits. It
imports the MCP SDK, so it is only imported from the server middleware.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from guardrail._data.verdict import ApprovalRequest
from guardrail.integrations._common.asking import question

__all__ = ["FORM", "INPUT_KEY", "elicit_approval"]

#: The form the user answers: approve the call, or not.
FORM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Let the call run with these values",
        }
    },
    "required": ["approve"],
}


#: The key of the guard's question among a call's input requests (2026-07-28 and later).
INPUT_KEY: Final = "guardrail/approval"
#: The first protocol version in which a server asks by returning ``InputRequiredResult``.
_INPUT_REQUIRED_SINCE: Final = "2026-07-28"


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared form elicitation (an empty declaration means form)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def _answer(result: Any) -> bool | None:
    """An elicitation's answer: True approve, False decline, None dismissed or unreadable."""
    if isinstance(result, Mapping):
        action, content = result.get("action"), result.get("content")
    else:
        action, content = getattr(result, "action", None), getattr(result, "content", None)
    if action == "decline":
        return False
    if action != "accept":
        return None
    return isinstance(content, Mapping) and content.get("approve") is True


async def elicit_approval(
    ctx: ServerRequestContext[Any, Any], tool: str, requests: Sequence[ApprovalRequest]
) -> bool | InputRequiredResult | None:
    """The user's answer through the client: True approve, False decline, None no answer.

    From 2026-07-28 on, a server asks by answering the call with an
    ``InputRequiredResult``, which this returns: the client asks the user and
    calls again with the answer among its ``inputResponses``. Before that,
    the form goes to the client as a request of its own, during the call.
    None when the client cannot be asked, fails, or the user dismissed the
    form (``cancel``): the call then waits, and nothing is recorded.
    """
    if not _can_elicit(ctx):
        return None
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    responses = params.get("inputResponses", params.get("input_responses"))
    if isinstance(responses, Mapping) and INPUT_KEY in responses:
        return _answer(responses[INPUT_KEY])
    message = (
        f"{question(tool, requests)}\n"
        "The assistant wants to use these values, which did not come from a trusted field "
        "of a tool result. Approve only if you recognise them."
    )
    session = ctx.session
    if session.can_send_request:
        try:
            result = await session.elicit_form(message, FORM, related_request_id=ctx.request_id)
        except MCPError:
            return None
        return _answer(result)
    if session.protocol_version >= _INPUT_REQUIRED_SINCE:
        form = ElicitRequestFormParams(message=message, requested_schema=FORM)
        return InputRequiredResult(input_requests={INPUT_KEY: ElicitRequest(params=form)})
    return None
