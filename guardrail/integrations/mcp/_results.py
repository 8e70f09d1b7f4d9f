"""MCP results: the ``_meta`` keys guardrail reads and writes, a refusal, a record, a seal.

Private to :mod:`guardrail.integrations.mcp` (which re-exports the keys);
shared by its client side and its server side
(:mod:`guardrail.integrations.mcp._server`). It imports the MCP SDK, so it
is only imported from there, after the SDK's import check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.types import CallToolResult, TextContent

from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import Verdict
from guardrail._transcript.result_text import split_seal

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

#: The ``_meta`` key of a ``tools/call`` request naming the conversation it belongs to.
SESSION_META_KEY = "guardrail/session"
#: The ``_meta`` key of a ``tools/call`` request carrying the user's latest message.
USER_TEXT_META_KEY = "guardrail/user_text"
#: The ``_meta`` key of a ``tools/call`` request naming the model's call id in the host's
#: transcript, for a server with a secret to seal its result (see :func:`guard_server`).
CALL_ID_META_KEY = "guardrail/call_id"
#: The ``_meta`` key of a refusal's result holding ``Rejection.to_dict()`` (the findings).
REFUSAL_META_KEY = "guardrail/refusal"
#: The ``_meta`` key of a host's result for a call that waits for the user: the requests
#: to put to them (``ApprovalRequest.to_dict()``, each with its token).
APPROVALS_META_KEY = "guardrail/approvals"
#: The ``error`` of a refusal's ``_meta`` once a conversation's re-prompts ran out this turn.
REPROMPT_LIMIT_ERROR = "reprompt_limit"
#: Unknown tool names looked up in the server's listing at most once each, up to this many.
LISTED_KEPT = 1000


def refused_result(
    verdict: Verdict, text: str | None = None, *, limit: int | None = None
) -> CallToolResult:
    """The ``isError`` result answering a refused call: the re-prompt, and the findings in _meta."""
    rejection = Rejection(verdict)
    refusal = rejection.to_dict()
    if limit is not None:
        refusal = {**refusal, "error": REPROMPT_LIMIT_ERROR, "limit": limit}
    return CallToolResult(
        content=[TextContent(type="text", text=text or rejection.message)],
        is_error=True,
        _meta={REFUSAL_META_KEY: refusal},
    )


def asked_result(verdict: Verdict) -> CallToolResult:
    """The ``isError`` result of a call that waits for the user: the requests in its _meta.

    Its text, the verdict's message, tells a model that reads it that the call
    waits for the user and that nothing it writes approves it.
    """
    result = refused_result(verdict)
    meta = {**(result.meta or {}), APPROVALS_META_KEY: [r.to_dict() for r in verdict.approvals]}
    return result.model_copy(update={"meta": meta})


def approvals_of(result: Any) -> list[dict[str, Any]]:
    """The requests a result's _meta carries under :data:`APPROVALS_META_KEY` (none: [])."""
    meta = result.meta if isinstance(result, CallToolResult) else None
    if meta is None and isinstance(result, Mapping):
        meta = result.get("_meta")
    items = meta.get(APPROVALS_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        dict(item)
        for item in items
        if isinstance(item, Mapping)
        and all(isinstance(item.get(key), str) for key in ("token", "tool", "param"))
    ]


def result_value(structured: Any, content: Any) -> Any:
    """What a result's record harvests: its structured content, else its text (unsealed)."""
    if structured is not None:
        return structured
    return result_text(content)


def failed_result(guard: Guard, name: str, structured: Any, content: Any) -> bool:
    """Whether a successful ``tools/call`` result is a failure by the tool's rule.

    Read twice, by the one rule (:meth:`Guard.failed`): the structured content
    (a field and its value), and the text the model reads (``Error: ...``),
    which a server that wraps a plain return as ``{"result": ...}`` holds there.
    """
    if structured is not None and guard.failed(name, structured):
        return True
    return guard.failed(name, result_text(content))


def result_text(content: Any) -> str:
    """The text of a result's content blocks, one block a line, without a seal line."""
    texts = []
    for block in content or ():
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                texts.append(text)
    return split_seal("\n".join(texts))[0]  # record() reads text that is JSON as JSON


def with_sealed_text(result: Any, seal: Callable[[str], str]) -> Any:
    """A successful result whose content is one text, that text sealed (``seal``); else as is.

    The text is what a host writes into its model's transcript, so the seal
    goes there, replacing a seal the server wrote (a host with a secret
    vouches for its own transcript). Structured content is left as it is.
    """
    if isinstance(result, CallToolResult):
        if result.is_error or len(result.content) != 1:
            return result
        (block,) = result.content
        if not isinstance(block, TextContent):
            return result
        text = seal(split_seal(block.text)[0])
        return result.model_copy(update={"content": [block.model_copy(update={"text": text})]})
    if not isinstance(result, Mapping) or result.get("isError"):
        return result
    content = result.get("content")
    if not isinstance(content, list) or len(content) != 1:
        return result
    (block,) = content
    if not isinstance(block, Mapping) or block.get("type") != "text":
        return result
    given = block.get("text")
    if not isinstance(given, str):
        return result
    return {**result, "content": [{**block, "text": seal(split_seal(given)[0])}]}
