"""Pydantic AI runs and their conversations: which ledger a run uses, and its history compacted.

Private to :mod:`guardrail.integrations.pydantic_ai`, which re-exports
:data:`SessionChooser`, :func:`conversation_id_session` and
:func:`guardrail_history_processor`. It imports Pydantic AI, so it is only
imported from there, after the import check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage

from guardrail._guard.facade import Guard
from guardrail.compaction import Summarizer, compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.compaction import (
    Trigger,
    chat_tokens,
    check_keep,
    check_trigger,
    reached,
)
from guardrail.integrations.pydantic_ai._messages import from_chat, to_chat
from guardrail.ledger import Ledger

#: Chooses a run's session: a session id (opened around each call) or a ledger.
SessionChooser = Callable[[RunContext[Any]], "str | Ledger"]

HistoryProcessor = Callable[[RunContext[Any], list[ModelMessage]], Any]


@contextlib.contextmanager
def conversation(
    guard: Guard, choose: SessionChooser | None, ctx: RunContext[Any]
) -> Iterator[Ledger]:
    """The ledger of the conversation ``ctx`` belongs to, current for the ``with`` block."""
    if choose is not None:
        chosen = choose(ctx)
        if isinstance(chosen, Ledger):
            yield chosen
            return
        if not isinstance(chosen, str) or not chosen:
            raise GuardrailUsageError(
                "session= returns the conversation's session id (a non-empty str) or its "
                f"Ledger, not {chosen!r}"
            )
        with guard.session(chosen) as ledger:
            yield ledger
        return
    try:
        ledger = guard.ledger  # the open `with guard.session(...)`, or the default session
    except GuardrailUsageError:
        raise GuardrailUsageError(NO_SESSION) from None
    yield ledger


NO_SESSION = (
    "a guarded Pydantic AI run started outside any session. Run the agent inside "
    "`async with guard.session(conversation_id):` (or `with`), or give the capability a "
    "session chooser: Guardrail(guard, session=lambda ctx: ...), e.g. "
    "session=conversation_id_session where the message history is your own"
)


def conversation_id_session(ctx: RunContext[Any]) -> str:
    """The run's ``conversation_id`` as its session id: ``Guardrail(guard, session=...)``.

    Pydantic AI takes the ``conversation_id`` from the run's argument or from the
    message history given to the run, so two runs of one conversation share a
    ledger with no code at all. Use it only where that history is the program's
    own: a history sent by a client could name another conversation's id, and
    with it that conversation's ledger.
    """
    if not ctx.conversation_id:
        raise GuardrailUsageError("this run has no conversation_id to name its session after")
    return ctx.conversation_id


def guardrail_history_processor(
    guard: Guard,
    *,
    max_messages: int | None = None,
    trigger: Trigger | None = None,
    keep_recent: int = 1,
    keep_last_messages: int | None = None,
    summarize: Summarizer | None = None,
    session: SessionChooser | None = None,
    role: Literal["system"] = "system",
) -> HistoryProcessor:
    """A history processor that compacts the history once it reaches the trigger.

    Pass it to Pydantic AI's ``ProcessHistory`` capability:
    ``capabilities=[Guardrail(guard), ProcessHistory(guardrail_history_processor(guard,
    trigger=("messages", 40), keep_last_messages=6))]``. ``trigger`` is
    ``("messages", n)`` (n messages or more) or ``("tokens", n)`` (n tokens or
    more, characters / 4 of the history as JSON); ``max_messages=n`` is
    ``("messages", n + 1)``. The messages before the last
    ``keep_last_messages`` (or, without it, before the last ``keep_recent``
    turns; a turn starts at a user prompt) become one ``ModelRequest``
    holding a ``CompactionPart``: the sealed ID LEDGER block, then the
    summary (``summarize`` as for :func:`guardrail.compact`; the extractive
    summarizer by default). Pydantic AI keeps the processed history for the
    rest of the run, so ``keep_last_messages`` shortens an agent's long loop
    of tool calls within one run. The messages kept are the very objects
    given; a request split by the cut keeps its own fields with the parts
    kept. A tool call never leaves its result, and the request about to be
    sent is always kept (both counts are at least 1). ``session`` is as for
    :class:`Guardrail`.
    """
    if max_messages is not None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise GuardrailUsageError(
                f"max_messages must be a positive integer, not {max_messages!r}"
            )
        if trigger is not None:
            raise GuardrailUsageError("pass trigger= or max_messages=, not both")
        trigger = ("messages", max_messages + 1)
    if trigger is None:
        raise GuardrailUsageError(
            "say when to compact: trigger=('messages', n) or ('tokens', n), or max_messages=n"
        )
    when = check_trigger(trigger)
    # The last turn, or message, holds the request about to be sent: it is never summarized.
    check_keep(keep_recent, keep_last_messages, least=1)

    async def guardrail_compaction(
        ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        chat, origins = to_chat(messages)
        if not reached(when, messages, tokens=chat_tokens(chat) if when[0] == "tokens" else None):
            return messages
        keep = keep_last_messages
        if keep is not None:
            # Counted in Pydantic AI's messages: the chat messages of the last ``keep`` of them.
            first = len(messages) - keep
            keep = sum(all(index >= first for index, _ in origins[id(item)]) for item in chat)
        with conversation(guard, session, ctx) as ledger:
            done = compact(
                chat,
                ledger,
                guard=guard,
                keep_recent=keep_recent,
                keep_last_messages=keep,
                summarize=summarize,
                shape="openai_chat",
                role=role,
            )
        return from_chat(done.messages, origins, messages)

    return guardrail_compaction
