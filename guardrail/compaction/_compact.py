"""Compaction: narrative to a summarizer, identifiers carried verbatim, the last turns raw.

:func:`compact` takes six steps: choose the cut (the last
``keep_recent`` turns stay raw, a call never leaves its result), harvest the
tool results into the ledger, mask every identifier in the part to
summarize as its ``[role]``, summarize, lint the summary, and rebuild: the
system messages, one message holding the ledger block and the summary, then
the recent turns, all in the shape the messages came in.

The block is sealed with the ledger's key (see :mod:`guardrail.compaction._block`). An
earlier compacted message is recognised only where compaction puts it (first
after the system messages, in the role it writes, with no tool traffic), and
its ids are trusted only when its seal verifies; an unsealed one gives
unverified entries at most. Text that merely starts like a block, anywhere
else, is text.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast, overload

from guardrail._declare.spec import check_options
from guardrail._guard.audit import Audit
from guardrail._transcript.content import mask_content, nesting_fault, strings
from guardrail._transcript.messages import (
    Repair,
    Shape,
    default_role,
    read,
    read_role,
    text_message,
    write,
)
from guardrail.compaction._block import (
    BlockLine,
    parse_block,
    render_block,
    restore,
    seal,
    shown_notes,
    unseal,
)
from guardrail.compaction._cut import choose_cut, earlier, harvest_results
from guardrail.compaction._lint import lint
from guardrail.compaction._masking import Masker
from guardrail.compaction._outcome import (
    CompactionReport,
    CompactionResult,
    M,
    Masked,
    Texts,
    all_text,
    counted,
    counter,
    identifiers,
)
from guardrail.compaction._summarize import (
    DEFAULT_SUMMARY_CHARS,
    SUMMARY_HEADER,
    Summarizer,
    extractive_summary,
    takes_notes,
)
from guardrail.errors import GuardrailUsageError
from guardrail.kinds._operator import EMPTY
from guardrail.ledger import Ledger
from guardrail.ledger._ledger import state_of
from guardrail.ledger._state import LedgerState

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from guardrail._guard.facade import Guard

#: How many of the last turns ``compact()`` keeps raw unless told otherwise.
DEFAULT_KEEP_RECENT = 2


class SummaryOptions(TypedDict, total=False):
    """How compaction summarises: the options of :func:`compact_text` (and :func:`compact`).

    Attributes:
        summarize: Any ``(messages, roles) -> str``; the default is the
            extractive summarizer, which needs no model. One that takes a
            ``notes`` keyword is given ``{role: note}`` as the block shows them.
        shape: The messages' shape (``openai_chat``, ``openai_responses``,
            ``anthropic``); by default it is detected.
        role: The role of the compacted message (``system``, or ``user`` for
            Anthropic, by default); an earlier compacted message is
            recognised in that role only.
        summary_chars: The bound of the extractive summary (default 4,000).
        tokens: Counts the tokens of a text for the report (default:
            tiktoken where installed, else characters / 4).
    """

    summarize: Summarizer | None
    shape: Shape | None
    role: str | None
    summary_chars: int
    tokens: Callable[[str], int] | None


class CompactOptions(SummaryOptions, total=False):
    """The options of :func:`compact`: what to keep raw, and how to summarise the rest.

    Attributes:
        keep_recent: How many of the last turns stay raw (default 2).
        keep_last_messages: Keep the last that many messages raw instead of
            the last turns (the cut still never leaves a call's result after
            it): for an agent's long loop of tool calls within one user turn.
    """

    keep_recent: int
    keep_last_messages: int | None


# A list whose type was lost (a literal mixing dicts of different value types is a list[object])
# comes back as the dicts it holds (anything but mappings is a TranscriptError); typed messages
# (dicts, or an SDK's TypedDicts) come back typed as they went in. Only a list[object] (or
# list[Any]) matches the first: lists are invariant.
@overload
def compact(
    messages: list[object],
    ledger: Ledger,
    *,
    guard: Guard | None = None,
    **options: Unpack[CompactOptions],
) -> CompactionResult[dict[str, Any]]: ...


@overload
def compact(
    messages: Sequence[M],
    ledger: Ledger,
    *,
    guard: Guard | None = None,
    **options: Unpack[CompactOptions],
) -> CompactionResult[M]: ...


def compact(
    messages: Sequence[Any],
    ledger: Ledger,
    *,
    guard: Guard | None = None,
    **options: Unpack[CompactOptions],
) -> CompactionResult[Any]:
    """Compact a conversation: the ledger block, a summary of the older turns, the recent turns.

    An earlier compacted message is trusted only when its seal verifies
    with the ledger's key (else its lines come back unverified, with an
    ``unsealed_ledger_block`` repair in the report); the text of
    :func:`compact_text`, which a runtime may have put behind a line of its
    own in any role, is recognised only sealed. A list with nothing to
    summarize comes back as it is, but for the error results put in for
    unanswered calls (listed in the report's ``repairs``).

    Args:
        messages: The conversation, in one of the shapes of
            :mod:`guardrail._transcript.messages` (OpenAI chat, Responses, Anthropic).
        ledger: The conversation's :class:`Ledger`: ``guard.ledger`` (the
            current session), the one ``with guard.session(id) as ledger``
            gives, or ``guard.new_ledger()``.
        guard: Gives the tool specs to harvest the tool results with
            (without it, nothing is harvested) and the audit events.
        **options: See :class:`CompactOptions`: ``summarize``,
            ``keep_recent``, ``keep_last_messages``, ``shape``, ``role``,
            ``summary_chars``, ``tokens``.

    Returns:
        The compacted messages, in the shape they came in, and the report.
    """
    state = state_of(ledger, "compact()")
    _check_options("compact()", options, CompactOptions.__optional_keys__)
    try:
        with _Collector() as collector:
            return _compact(messages, state, guard, options, collector, whole=False)
    except RecursionError:
        # Content that contains itself, or is nested absurdly deep: say which message.
        fault = nesting_fault(messages)
        if fault is None:
            raise
        raise fault from None


def compact_text(
    messages: Sequence[Any],
    ledger: Ledger,
    *,
    guard: Guard | None = None,
    **options: Unpack[SummaryOptions],
) -> str:
    """The ledger block and a summary of ``messages``, as the one text a runtime's hook returns.

    For agent runtimes whose summarization hook takes the messages to
    summarize and must return a string (the runtime keeps the recent
    messages itself): every message after the leading system messages is
    summarized, none is kept raw. The text is what :func:`compact` writes in
    its compacted message: the sealed ID LEDGER block, then
    :data:`SUMMARY_HEADER` and the summary. A runtime may put a line of its
    own before it and send it in any role; the next compaction finds it
    there when its seal verifies, and carries it forward instead of adding
    a second block.

    Args:
        messages: The messages to summarize, as for :func:`compact`.
        ledger: The conversation's :class:`Ledger`.
        guard: As for :func:`compact`.
        **options: See :class:`SummaryOptions`.
    """
    state = state_of(ledger, "compact_text()")
    _check_options("compact_text()", options, SummaryOptions.__optional_keys__)
    try:
        with _Collector() as collector:
            report = _compact(
                messages, state, guard, cast(CompactOptions, options), collector, whole=True
            ).report
    except RecursionError:
        fault = nesting_fault(messages)
        if fault is None:
            raise
        raise fault from None
    return f"{report.ledger_block}\n\n{SUMMARY_HEADER}\n{report.summary}"


class _Collector:
    """The cyclic collector paused while a compaction runs, as a session's cold load pauses it.

    A compaction makes a great many objects that live until it returns (the
    transcript read twice, the masked copies, the strings of every message),
    and the collector, run every few hundred of them, would walk them and the
    ledger again and again: a tenth of a compaction's time on the airline
    corpus. No cycle of a compaction needs collecting before it returns; the
    collector runs again afterwards. A program's own summarizer (a model
    call may take seconds, and other threads run meanwhile) runs with the
    collector as the program had it (:meth:`resumed`); a collector the
    program paused stays paused.
    """

    def __init__(self) -> None:
        self.paused = False

    def __enter__(self) -> _Collector:
        self.paused = gc.isenabled()
        if self.paused:
            gc.disable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.paused:
            gc.enable()

    @contextlib.contextmanager
    def resumed(self) -> Iterator[None]:
        """The collector running again, if this pause stopped it, for what the block holds."""
        if self.paused:
            gc.enable()
        try:
            yield
        finally:
            if self.paused:
                gc.disable()


def _check_options(call: str, options: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """Refuse an option the call does not have, and counts that are no counts."""
    check_options(call, options, allowed)
    for name in ("keep_recent", "keep_last_messages"):
        value = options.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise GuardrailUsageError(f"{name} must be an integer >= 0, not {value!r}")
    if "keep_recent" in options and options["keep_recent"] is None:
        raise GuardrailUsageError("keep_recent must be an integer >= 0, not None")


def _compact(
    messages: Sequence[M],
    state: LedgerState,
    guard: Guard | None,
    options: CompactOptions,
    collector: _Collector,
    *,
    whole: bool,
) -> CompactionResult[M]:
    """The six steps; ``whole``: summarise everything after the system messages (compact_text)."""
    keep_recent = options.get("keep_recent", DEFAULT_KEEP_RECENT)
    keep_last = options.get("keep_last_messages")
    summarize = options.get("summarize")
    transcript = read(messages, options.get("shape"))
    shape = transcript.shape
    fresh = state.size == 0 and state.turn == 0 and not state.tombstones
    repairs = list(transcript.repairs)
    role = options.get("role") or default_role(shape)
    block_role = read_role(shape, role)
    lead = 0  # the system messages that open the list stay first
    while lead < len(transcript.messages) and transcript.messages[lead].role == "system":
        lead += 1
    found = earlier(transcript, lead, block_role, state)
    at, earlier_text = found if found is not None else (None, "")
    # The earlier message is usually the first after the system messages; a runtime that
    # wrapped it in a system message of its own leaves it among them.
    start = lead + (at == lead)
    carried: list[BlockLine] = []
    evicted: list[str] = []
    earlier_summary = ""
    if at is not None:
        block, _, rest = earlier_text.partition("\n\n")
        body, sealed = unseal(block, state)
        lines, evicted, unreadable = parse_block(body, at)
        repairs += unreadable
        if not sealed:
            repairs.append(
                Repair(
                    "unsealed_ledger_block",
                    at,
                    "the ledger block's seal is missing, or it was not sealed by this "
                    f"ledger's key for this session; its {len(lines)} line(s) were read "
                    "as unverified",
                )
            )
        carried = restore(lines, state, trusted=sealed)
        earlier_summary = rest.partition(SUMMARY_HEADER)[2].strip("\n")
    if whole:
        cut = len(transcript.messages)
    else:
        cut = choose_cut(transcript, start, keep_recent, keep_last_messages=keep_last)
    harvested = 0
    if guard is not None:
        # A ledger in use saw the recent turns already (or sees them raw): only the part
        # about to be summarised is harvested. A fresh one takes the whole conversation.
        stop = len(transcript.messages) if fresh else cut
        harvested = harvest_results(transcript, start, stop, state, guard, fresh=fresh)
    count, label = counter(options.get("tokens"))
    originals = write(transcript)
    audit = guard.audit if guard is not None else Audit()
    if cut == start and at is None and not whole:
        text = all_text(originals)
        known = identifiers(Masker(state, ()), text)
        size = count(text)
        unchanged = CompactionReport(
            shape=shape,
            keep_recent=keep_recent,
            messages_before=len(messages),
            messages_after=len(originals),
            summarized=0,
            identifiers_before=known,
            identifiers_after=known,
            ledger_entries=state.size,
            harvested=harvested,
            masked=0,
            scrubbed=0,
            flagged=0,
            tokens_before=size,
            tokens_after=size,
            token_estimate=label,
            ledger_block="",
            summary="",
            repairs=tuple(repairs),
            keep_last_messages=keep_last,
        )
        audit.compacted(state.session_id, **unchanged.audit_fields())
        state.persist()
        return CompactionResult(originals, unchanged)

    masker = Masker(state, carried)
    masked = Masked()
    left: list[str] = []  # the strings of the part that masking does not see
    texts = Texts(head=[strings(raw) for raw in originals[:start]])
    part = _mask_part(masker, masked, originals[start:cut], left, texts.part)
    texts.recent = strings(originals[cut:])
    roles = {r: masker.kind_of[r] for r in sorted(masker.roles)}
    # The notes, worked out once for the summary and the block: the built-in summarizer
    # changes nothing in the ledger between the two (another summarizer might).
    noted: dict[str, str] | None = None
    if part:
        if earlier_summary:
            part.insert(0, text_message(shape, role, f"{SUMMARY_HEADER}\n{earlier_summary}"))
        if summarize is None:
            limit = options.get("summary_chars", DEFAULT_SUMMARY_CHARS)
            noted = shown_notes(state, carried)
            summary = extractive_summary(
                part,
                roles,
                max_chars=limit,
                notes=noted,
                failed=guard.failed if guard is not None else None,
            )
        else:
            noted_own = shown_notes(state, carried) if takes_notes(summarize) else None
            with collector.resumed():
                summary = (
                    cast(Callable[..., str], summarize)(part, roles, notes=noted_own)
                    if noted_own is not None
                    else summarize(part, roles)
                )
        if not isinstance(summary, str):
            raise GuardrailUsageError(f"a summarizer returns text, not {type(summary).__name__}")
    else:
        summary = earlier_summary
    summary, issues = lint(summary.strip("\n"), masker)
    operator = (
        guard._registry.operator.catalog(state.session_id, guard.kinds)
        if guard is not None and guard._registry.operator
        else EMPTY
    )
    block = seal(render_block(state, carried, evicted, operator, noted=noted), state)
    compacted = text_message(shape, role, f"{block}\n\n{SUMMARY_HEADER}\n{summary}")
    kept = [message for index, message in enumerate(originals[:lead]) if index != at]
    output = [*kept, compacted, *originals[cut:]]
    scrubbed = sum(issue.action == "scrubbed" for issue in issues)
    compacted_texts = strings(compacted)
    identifiers_before, tokens_before, identifiers_after = counted(
        texts, at, compacted_texts, left, masker, masked, count
    )
    after = texts.after(at, compacted_texts)
    report = CompactionReport(
        shape=shape,
        keep_recent=keep_recent,
        messages_before=len(messages),
        messages_after=len(output),
        summarized=cut - start,
        identifiers_before=identifiers_before,
        identifiers_after=identifiers_after,
        ledger_entries=state.size,
        harvested=harvested,
        masked=masked.count,
        scrubbed=scrubbed,
        flagged=len(issues) - scrubbed,
        tokens_before=tokens_before,
        tokens_after=count(after),
        token_estimate=label,
        ledger_block=block,
        summary=summary,
        lint=tuple(issues),
        repairs=tuple(repairs),
        keep_last_messages=keep_last,
    )
    audit.compacted(state.session_id, **report.audit_fields())
    state.persist()  # the default session: no scope's end writes what restoring brought back
    return CompactionResult(output, report)


def _mask_part(
    masker: Masker, masked: Masked, raws: Sequence[Any], left: list[str], every: list[str]
) -> list[Any]:
    """The masked copies of ``raws``, the part to summarise; counts in ``masked`` what masking saw.

    Keys and many values repeat across results ("flight_number", "economy"): each
    distinct string is masked once (masking reads the ledger only, which does not
    change meanwhile), and the strings given are counted once the part is masked.
    ``left`` receives the strings masking leaves alone, ``every`` every string of the
    part as :func:`~guardrail._transcript.content.strings` gives them.
    """
    memo: dict[str, str] = {}
    found: dict[str, list[str]] = {}  # the roles of the ids masked in each distinct string
    given: list[str] = []  # every string masked, repeats included
    mask_roles = masker.mask_roles

    def miss(text: str) -> str:
        out, roles = mask_roles(text)
        memo[text] = out
        found[text] = roles
        return out

    def odd(text: str) -> str:  # a subclass of str: masked each time it comes
        out, roles = mask_roles(text)
        _count(masked, text, roles, 1)
        return out

    part = [mask_content(raw, memo, miss, odd, left, given, every) for raw in raws]
    masked.strings += len(given)
    masked.chars += sum(map(len, given))
    hits = [(text, roles) for text, roles in found.items() if roles]
    if hits:
        times = Counter(given)
        for text, roles in hits:
            _count(masked, text, roles, times[text], counted=False)
    return part


def _count(
    masked: Masked, text: str, roles: list[str], times: int, *, counted: bool = True
) -> None:
    """Count in ``masked`` a string masked ``times`` times, and the ``roles`` of the ids in it.

    ``counted``: the string and its characters are counted in ``masked`` already.
    """
    if roles:
        masked.count += len(roles) * times
        masked.roles.update(roles)
    if counted:
        masked.strings += times
        masked.chars += len(text) * times
