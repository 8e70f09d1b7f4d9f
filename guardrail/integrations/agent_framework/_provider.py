"""The context provider: a run's user words observed, its middleware added, the block every call.

Private to :mod:`guardrail.integrations.agent_framework`, which re-exports
:class:`Guardrail`. It imports Agent Framework, so it is only imported from
there, after the framework's import check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_framework import (
    AgentSession,
    ChatContext,
    ChatMiddleware,
    ContextProvider,
    Message,
    SessionContext,
    SupportsAgentRun,
)

from guardrail._guard.facade import Guard
from guardrail.integrations._common import asking
from guardrail.integrations._common.every_turn import (
    DEFAULT_BLOCK_TOKENS,
    block_for,
    check_budget,
    with_block,
)
from guardrail.integrations.agent_framework._compaction import compacted
from guardrail.integrations.agent_framework._middleware import GuardrailMiddleware
from guardrail.integrations.agent_framework._sessions import SessionOf
from guardrail.ledger import Ledger

__all__ = ["Guardrail", "user_texts"]


class Guardrail(ContextProvider):
    """The context provider that guards an agent: ``context_providers=[Guardrail(guard)]``.

    Before each run it reads the user's new messages into the conversation's
    ledger (ids the user typed enter unverified; ``observe_user=False`` turns
    that off), records the user's no to each approval request the guard made
    (a ``function_approval_response`` that does not approve: the value is
    refused for that tool afterwards), and adds two middleware for the run:

    - :class:`GuardrailMiddleware`, the function middleware that checks every
      tool call (unless the agent's own ``middleware`` has one of this guard);
    - a chat middleware around every model call, which gives the model each
      tool whose id parameters needed it with the instruction to copy ids
      exactly, opens the conversation's session (in-run compaction with
      :class:`GuardrailCompaction` runs inside it), and with
      ``ledger_instructions=True`` ends the model's instructions with the
      conversation's ID LEDGER block (the entries used last, within
      ``ledger_tokens``, counted as characters / 4; sealed under a guard with a
      ``secret``). The block is rebuilt at each model call, from the first
      tool result on, and never read back into the ledger.

    The conversation is the run's ``AgentSession`` (its ``session_id``), or
    what ``session(agent_session)`` returns. Its place among the providers
    does not matter to the framework's ``SecureAgentConfig`` (FIDES): an
    allowed call runs with the arguments the model sent, so the framework
    finds them unchanged after its security middleware read them.
    """

    DEFAULT_SOURCE_ID = "guardrail"

    def __init__(
        self,
        guard: Guard,
        *,
        session: SessionOf | None = None,
        observe_user: bool = True,
        ledger_instructions: bool = False,
        ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        self.middleware = GuardrailMiddleware(guard, session=session)
        super().__init__(source_id)
        self.guard = guard
        self.observe_user = observe_user
        self.ledger_instructions = ledger_instructions
        self.ledger_tokens = check_budget(ledger_tokens)
        self._per_call = _EveryModelCall(self)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Observe the user, keep their no, and add the run's middleware."""
        guard = self.guard
        async with self.middleware.sessions.scope(session) as ledger:
            if self.observe_user:
                for text in user_texts(context.input_messages):
                    guard.observe_user(text, ledger=ledger)
            _record_declines(guard, context.input_messages, ledger)
        own = getattr(agent, "middleware", None) or ()
        checks = not any(
            isinstance(item, GuardrailMiddleware) and item.guard is guard for item in own
        )
        added: list[Any] = [self.middleware, self._per_call] if checks else [self._per_call]
        context.extend_middleware(self.source_id, added)

    def block(self, ledger: Ledger) -> str:
        """The every-turn block of ``ledger``."""
        return block_for(self.guard, ledger, self.ledger_tokens)


class _EveryModelCall(ChatMiddleware):
    """Around every model call: tools described, the session open, the block in the instructions."""

    def __init__(self, owner: Guardrail) -> None:
        self.owner = owner

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        """Give the model described tools and, where asked, the ledger block; then call it."""
        owner = self.owner
        async with owner.middleware.sessions.scope(context.session) as ledger:
            options = dict(context.options or {})
            tools = options.get("tools")
            if isinstance(tools, Sequence) and not isinstance(tools, str):
                options["tools"] = [owner.middleware.described(tool) for tool in tools]
            if owner.ledger_instructions:
                options["instructions"] = _with_block(
                    options.get("instructions"), owner.block(ledger)
                )
            context.options = options
            await call_next()


def _with_block(given: Any, block: str) -> Any:
    """The model's instructions, then the block, keeping instructions given as a list a list."""
    if given is None or isinstance(given, str):
        return with_block(given, block)
    if isinstance(given, Mapping):
        return [given, block]
    return [*given, block]


def user_texts(messages: Sequence[Message]) -> list[str]:
    """The texts of the user's new messages: the user messages that end a run's input.

    A history passed back in was observed when it was new; text only (an
    approval response is no words of the user); never a compaction's summary,
    nor content a provider added to the context (only the run's input is read).
    """
    texts: list[str] = []
    for message in reversed(messages):
        if message.role != "user":
            break
        if compacted(message):
            continue
        texts.extend(
            content.text
            for content in reversed(message.contents)
            if content.type == "text" and content.text
        )
    texts.reverse()
    return texts


def _record_declines(guard: Guard, messages: Sequence[Message], ledger: Ledger) -> None:
    """The user's no to each request of this guard among the run's new messages: denied."""
    for message in messages:
        for content in message.contents:
            if content.type != "function_approval_response" or content.approved is True:
                continue
            shown = asking.payload(content.additional_properties)
            if shown:
                asking.declined(guard, shown, ledger=ledger)
