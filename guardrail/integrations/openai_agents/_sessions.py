"""The OpenAI Agents SDK's sessions and model input, compacted: :class:`GuardedSession`.

Private to :mod:`guardrail.integrations.openai_agents`, which re-exports
:class:`GuardedSession`, :func:`compact_model_input` and :data:`SessionId`;
it imports the SDK, so it is only imported from there, after the SDK's
import check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.run_config import CallModelData, ModelInputData

from guardrail._guard.facade import Guard
from guardrail.compaction import CompactionReport, Summarizer, compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.compaction import Trigger, check_keep, check_trigger, reached

#: Where a run's guardrail session comes from: the context object given to ``Runner.run``
#: (``context=``) in, the conversation's session id out.
SessionId = Callable[[Any], str]


class GuardedSession:
    """An SDK ``Session`` whose history is compacted with :func:`compact` once it grows.

    Wraps any session (``SQLiteSession``, a Redis or database one): reads
    and writes go to it. After ``add_items`` leaves more than ``max_items``
    items, the history is rebuilt as the ledger block, a summary of the older
    turns and the last ``keep_recent`` turns raw (or the last
    ``keep_last_messages`` items), and stored in place of the old one. The
    ledger is the guard's session named by this session's ``session_id``:
    run the agent inside ``with guard.session(session.session_id):`` so the
    tools check against the same one.

    ``trigger`` says when instead of ``max_items``: ``("messages", n)``, n
    items or more; ``("tokens", n)``, n tokens or more (characters / 4 of the
    items as JSON). The SDK stores a run's items as the run goes, so with
    ``keep_last_messages`` a long run of tool calls is shortened in the store
    while it runs; :meth:`model_input_filter` shortens what the model reads
    with the same options.
    """

    def __init__(
        self,
        session: Session,
        guard: Guard,
        *,
        max_items: int = 60,
        trigger: Trigger | None = None,
        keep_recent: int = 2,
        keep_last_messages: int | None = None,
        summarize: Summarizer | None = None,
    ) -> None:
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise GuardrailUsageError(f"max_items must be a positive integer, not {max_items!r}")
        check_keep(keep_recent, keep_last_messages)
        self.session = session
        self.guard = guard
        self.max_items = max_items
        self.trigger: Trigger = (
            check_trigger(trigger) if trigger is not None else ("messages", max_items + 1)
        )
        self.keep_recent = keep_recent
        self.keep_last_messages = keep_last_messages
        self.summarize = summarize
        self.session_id: str = session.session_id
        self.session_settings: SessionSettings | None = getattr(session, "session_settings", None)
        #: The report of the last compaction (None before the first).
        self.last_report: CompactionReport | None = None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, or its last ``limit`` items."""
        return await self.session.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Add items; compact the history when it holds more than ``max_items``."""
        await self.session.add_items(items)
        if reached(self.trigger, await self.session.get_items()):
            await self.compact()

    def model_input_filter(self) -> Callable[[CallModelData[Any]], ModelInputData]:
        """A ``call_model_input_filter`` with this session's options and ledger.

        ``RunConfig(call_model_input_filter=session.model_input_filter())``: the
        model's input within a run is compacted as the stored history is (see
        :func:`compact_model_input`).
        """
        return compact_model_input(
            self.guard,
            trigger=self.trigger,
            keep_recent=self.keep_recent,
            keep_last_messages=self.keep_last_messages,
            summarize=self.summarize,
            session_id=lambda _context: self.session_id,
        )

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the last item."""
        return await self.session.pop_item()

    async def clear_session(self) -> None:
        """Remove every item."""
        await self.session.clear_session()

    async def compact(self) -> CompactionReport:
        """Compact the history now and store the compacted list; returns the report."""
        items = await self.session.get_items()
        with self.guard.session(self.session_id) as ledger:
            result = compact(
                items,
                ledger,
                guard=self.guard,
                keep_recent=self.keep_recent,
                keep_last_messages=self.keep_last_messages,
                summarize=self.summarize,
                shape="openai_responses",
            )
        if result.messages != items:
            await self.session.clear_session()
            await self.session.add_items(list(result.messages))
        self.last_report = result.report
        return result.report


def compact_model_input(
    guard: Guard,
    *,
    max_items: int = 60,
    trigger: Trigger | None = None,
    keep_recent: int = 2,
    keep_last_messages: int | None = None,
    summarize: Summarizer | None = None,
    session_id: SessionId | None = None,
) -> Callable[[CallModelData[Any]], ModelInputData]:
    """A ``RunConfig.call_model_input_filter`` that compacts what the model reads, mid-run.

    Before each model call whose input holds more than ``max_items`` items,
    the input is compacted with :func:`compact` against the conversation's
    ledger: the model reads the ledger block, a summary of the older turns
    and the last ``keep_recent`` turns raw (or, with ``keep_last_messages``,
    the last that many items: a run's loop of tool calls is one long turn), so
    the ids it copies next come from the block, verbatim. Only the model's input changes: the run's
    items, its result and a session keep the whole history (compact those
    with :class:`GuardedSession`). The ledger is the current session's, or
    the one ``session_id`` names for the context given to ``Runner.run``.

    ``trigger`` says when instead of ``max_items``, as for :class:`GuardedSession`.

    ``RunConfig(call_model_input_filter=compact_model_input(guard))``.
    """
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
        raise GuardrailUsageError(f"max_items must be a positive integer, not {max_items!r}")
    check_keep(keep_recent, keep_last_messages)
    when = check_trigger(trigger) if trigger is not None else ("messages", max_items + 1)

    def compact_input(data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data
        if not reached(when, given.input):
            return given
        if session_id is None:
            result = compact(
                given.input,
                guard.ledger,
                guard=guard,
                keep_recent=keep_recent,
                keep_last_messages=keep_last_messages,
                summarize=summarize,
                shape="openai_responses",
            )
        else:
            with guard.session(session_id(data.context)) as ledger:
                result = compact(
                    given.input,
                    ledger,
                    guard=guard,
                    keep_recent=keep_recent,
                    keep_last_messages=keep_last_messages,
                    summarize=summarize,
                    shape="openai_responses",
                )
        return ModelInputData(input=list(result.messages), instructions=given.instructions)

    return compact_input
