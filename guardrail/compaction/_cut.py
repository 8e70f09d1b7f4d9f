"""Where compaction cuts, the earlier compacted message it finds, and the results it harvests.

The first steps of :func:`~guardrail.compaction.compact`: find an earlier
compacted message where compaction writes one (its seal checked by the
caller), choose the cut (the last turns stay raw, and a call never leaves
its result), and bring the ledger up to date with the tool results of the
part about to be summarised.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from guardrail._data.batch import Batch
from guardrail._provenance.failure import failed
from guardrail._provenance.harvest import harvest
from guardrail._provenance.seal import seal_verifies
from guardrail._transcript.messages import Message, Transcript
from guardrail.compaction._block import BLOCK_HEADER, unseal
from guardrail.compaction._summarize import SUMMARY_HEADER
from guardrail.ledger._ledger import ledger_of
from guardrail.ledger._state import LedgerState

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

#: How long a runtime's text before a compacted message's block may be (its own
#: "Summary of the conversation so far:" line); a longer one is not looked through.
MAX_WRAPPER_CHARS = 500


def _is_compacted(message: Message, role: str) -> bool:
    """Whether ``message`` has the form of a compacted message written in ``role``.

    Its role, no tool calls or results, the block's header and, after the
    block, the summary's; where it stands and whether its seal verifies are
    for the caller to see to. A block with no summary after it is the ledger
    a program showed the model (the every-turn block), not a compaction.
    """
    return (
        message.role == role
        and not message.calls
        and not message.results
        and message.text.startswith(BLOCK_HEADER + "\n")
        and _summarized(message.text)
    )


def _summarized(text: str) -> bool:
    """Whether the text of a block goes on, after a blank line, with the summary's header."""
    return text.partition("\n\n")[2].startswith(SUMMARY_HEADER)


def _lead(transcript: Transcript, role: str) -> int:
    """How many system messages open the list (before any earlier compacted message)."""
    count = 0
    for message in transcript.messages:
        if message.role != "system" or _is_compacted(message, role):
            break
        count += 1
    return count


def earlier(
    transcript: Transcript, systems: int, role: str, state: LedgerState
) -> tuple[int, str] | None:
    """The earlier compacted message, as its index and its text from the block's header on.

    Where compaction wrote it: first after the system messages, in its
    role, starting with the header (its seal is checked by the caller). The
    ``systems`` messages that open the list are system messages. An
    agent runtime that asked for the text (:func:`compact_text`) may have
    put a line of its own before it, or another role or a system message
    around it: such a message, among the system messages or right after
    them, is ours only when the header starts a line within
    :data:`MAX_WRAPPER_CHARS` of its start and the block's seal verifies.
    Else it is plain text: a user who writes a block after a line of their
    own gets nothing from it, and loses no word of their message.
    """
    messages = transcript.messages
    lead = _lead(transcript, role)  # where compaction writes: before any system message it wrote
    if lead < len(messages) and _is_compacted(messages[lead], role):
        return lead, messages[lead].text
    for index in range(min(systems + 1, len(messages))):
        message = messages[index]
        if message.calls or message.results:
            continue
        text = message.text
        if text.startswith(BLOCK_HEADER + "\n"):
            wrapped = text  # the text as compaction wrote it, in another role or place
        else:
            header = text.find("\n" + BLOCK_HEADER + "\n", 0, MAX_WRAPPER_CHARS + 1)
            if header < 0:
                continue
            wrapped = text[header + 1 :]
        if _summarized(wrapped) and unseal(wrapped.partition("\n\n")[0], state)[1]:
            return index, wrapped
    return None


def choose_cut(
    transcript: Transcript,
    start: int,
    keep_recent: int,
    *,
    keep_last_messages: int | None = None,
) -> int:
    """Index of the first message kept raw: the last ``keep_recent`` turns from ``start`` on.

    The cut moves earlier, to a turn's start, until no call before it has
    its result (or its pending result) after it. With ``keep_last_messages``
    the last that many messages are kept instead, whatever the turns: the
    cut moves earlier only to the message making a call whose result would
    be left after it, so an agent's long loop within one user turn can be
    compacted too.
    """
    messages = transcript.messages
    if keep_last_messages is not None:
        cut = max(start, len(messages) - keep_last_messages)
        while (at := _first_open_call(messages, start, cut)) is not None:
            cut = at  # the message that made the call: it stays with its result
        return cut
    turns = transcript.turns(start)
    if keep_recent == 0:
        cut = len(messages)
    elif keep_recent >= len(turns):
        cut = start
    else:
        cut = turns[-keep_recent].start
    starts = [turn.start for turn in turns]
    while (at := _first_open_call(messages, start, cut)) is not None:
        cut = starts[bisect.bisect_right(starts, at) - 1]  # the start of that call's turn
    return cut


def _first_open_call(messages: Sequence[Message], start: int, cut: int) -> int | None:
    """Index of the first call in ``messages[start:cut]`` whose result is not before ``cut``."""
    for message in messages[start:cut]:
        for call in message.calls:
            if call.result is None or call.result.index >= cut:
                return call.index
    return None


def harvest_results(
    transcript: Transcript, start: int, stop: int, state: LedgerState, guard: Guard, *, fresh: bool
) -> int:
    """Bring the ledger up to date with messages ``start:stop``; return the results recorded.

    A fresh ledger replays the conversation (user turns observed, every
    result recorded), so it holds what a live session would, with "last
    used" meaning last seen in a result. A ledger in use records only
    results with news (an id it neither holds nor remembers as evicted, or
    a new status), so last-use turns stay true and evictions stay done.

    A guard that seals its results (it has a secret) trusts a result only
    when its seal verifies for this session, call, tool, arguments and text:
    the client wrote the transcript. Any other result brings its ids in
    unverified, as if the user had typed them, and nothing more. Such a guard
    reads every result from its text alone: a value written beside it (a
    ``result`` field) is not what the seal vouches for.
    """
    ledger = ledger_of(state)
    recorded = 0
    sealed_only = guard.seals_results
    for message in transcript.messages[start:stop]:
        if fresh and message.user_words:  # never a tool's content sent in the user's role
            guard.observe_user(message.text, ledger=ledger)
        for result in message.results:
            spec = guard.specs.get(result.name or "")
            call = result.call
            if spec is None or call is None or result.error:  # a failure teaches nothing
                continue
            value = result.text_value if sealed_only else result.value
            if failed(spec, value):  # by the tool's failure rule ("Error: ...", by default)
                continue
            if not fresh and not _news(harvest(spec, value, guard.kinds).batches, state, guard):
                continue
            trusted = not sealed_only or seal_verifies(
                result.seal,
                state,
                call_id=call.id,
                tool=spec.name,
                arguments=call.arguments,
                content=result.text,
            )
            guard.record(
                spec.name, call.arguments, value, call_id=call.id, ledger=ledger, trusted=trusted
            )
            recorded += 1
    return recorded


def _news(batches: Sequence[Batch], state: LedgerState, guard: Guard) -> bool:
    """Whether harvested ids hold anything a ledger in use lacks: a new id or a new status."""
    for batch in batches:
        table = state.tables.get(batch.kind, {})
        keys = batch.keys
        if state.kinds.get(batch.kind) is not guard.kinds.get(batch.kind):
            # The ledger keys this kind its own way: look the values up as it would.
            keys = [state.key(batch.kind, value) or "" for value in batch.values]
        if batch.statuses is None and all(map(table.__contains__, keys)):
            continue  # every id known and no status to compare: the common case
        statuses = batch.statuses if batch.statuses is not None else repeat(None)
        for key, found_key, status in zip(keys, batch.keys, statuses, strict=False):
            entry = table.get(key)
            if entry is None:
                # Evicted, or dropped as one of too many: known, and no news (a flood is not
                # recorded again at every compaction).
                known = state.tombstone(batch.kind, found_key) or state.drop_mark(
                    batch.kind, found_key
                )
                if known is None:
                    return True
            elif status is not None and status != entry.status:
                return True
    return False
