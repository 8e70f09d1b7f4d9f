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

import bisect
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, overload

from guardrail import _deprecation
from guardrail._audit import Audit
from guardrail._guard import Guard, SessionScope
from guardrail._harvest import Batch, harvest
from guardrail._seal import seal_verifies
from guardrail.compaction._block import (
    BLOCK_HEADER,
    BlockLine,
    parse_block,
    render_block,
    restore,
    seal,
    unseal,
)
from guardrail.compaction._masking import LintIssue, Masker, lint
from guardrail.compaction._messages import (
    Message,
    Repair,
    Shape,
    Transcript,
    default_role,
    map_text,
    nesting_fault,
    read,
    read_role,
    strings,
    text_message,
    write,
)
from guardrail.compaction._summarize import (
    DEFAULT_SUMMARY_CHARS,
    SUMMARY_HEADER,
    Summarizer,
    extractive_summary,
)
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger

if TYPE_CHECKING:
    # A default, so that a bare ``CompactionResult`` annotation stays valid under --strict;
    # only type checkers read it (typing.TypeVar takes ``default`` from Python 3.13 on).
    from typing_extensions import TypeVar

    M = TypeVar("M", bound=Mapping[str, Any], default=Mapping[str, Any])
else:
    from typing import TypeVar

    M = TypeVar("M", bound=Mapping[str, Any])

#: How many of the last turns ``compact()`` keeps raw unless told otherwise.
DEFAULT_KEEP_RECENT = 2


@dataclass(frozen=True)
class CompactionReport:
    """What a compaction carried, masked and scrubbed, and how much smaller the context got.

    Identifiers are counted as distinct known ids (ledger entries, evicted
    ones and ones carried from an earlier block) written verbatim, in any
    form their kind's normaliser accepts, in the messages before and after.
    """

    shape: str
    keep_recent: int
    messages_before: int
    messages_after: int
    summarized: int
    identifiers_before: int
    identifiers_after: int
    ledger_entries: int
    harvested: int
    masked: int
    scrubbed: int
    flagged: int
    tokens_before: int
    tokens_after: int
    token_estimate: str
    ledger_block: str
    summary: str
    lint: tuple[LintIssue, ...] = ()
    repairs: tuple[Repair, ...] = ()
    keep_last_messages: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return asdict(self)

    @property
    def summarised(self) -> int:
        """Deprecated spelling of :attr:`summarized`."""
        _deprecation.warn(
            "CompactionReport.summarised is now CompactionReport.summarized; "
            "the old spelling goes in the next release"
        )
        return self.summarized


@dataclass(frozen=True)
class CompactionResult(Generic[M]):
    """The compacted message list and its report.

    The list is in the shape of the input, and typed as its messages were:
    the messages kept are the very objects given, and the one compaction
    writes (like the error results it puts in for unanswered calls) is a
    plain dict of that shape, valid as the provider SDK's message type.
    """

    messages: list[M]
    report: CompactionReport


# -- the cut and the harvest ----------------------------------------------------------------


def _is_compacted(message: Message, role: str) -> bool:
    """Whether ``message`` has the form of a compacted message written in ``role``.

    Its role, no tool calls or results, and the block's header; where it
    stands and whether its seal verifies are for the caller to see to.
    """
    return (
        message.role == role
        and not message.calls
        and not message.results
        and message.text.startswith(BLOCK_HEADER + "\n")
    )


def _lead(transcript: Transcript, role: str) -> int:
    """How many system messages open the list (before any earlier compacted message)."""
    count = 0
    for message in transcript.messages:
        if message.role != "system" or _is_compacted(message, role):
            break
        count += 1
    return count


#: How long a runtime's text before a compacted message's block may be (its own
#: "Summary of the conversation so far:" line); a longer one is not looked through.
MAX_WRAPPER_CHARS = 500


def _earlier(
    transcript: Transcript, systems: int, role: str, ledger: Ledger
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
        if unseal(wrapped.partition("\n\n")[0], ledger)[1]:
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


def _harvest(
    transcript: Transcript, start: int, stop: int, ledger: Ledger, guard: Guard, *, fresh: bool
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
    recorded = 0
    sealed_only = guard.seals_results
    for message in transcript.messages[start:stop]:
        if fresh and message.starts_turn:
            guard.observe_user(message.text, ledger=ledger)
        for result in message.results:
            spec = guard.specs.get(result.name or "")
            call = result.call
            if spec is None or call is None or result.error:  # a failure teaches nothing
                continue
            value = result.text_value if sealed_only else result.value
            if not fresh and not _news(harvest(spec, value, guard.kinds).batches, ledger, guard):
                continue
            trusted = not sealed_only or seal_verifies(
                result.seal,
                ledger,
                call_id=call.id,
                tool=spec.name,
                arguments=call.arguments,
                content=result.text,
            )
            guard._engine.record(
                spec.name, call.arguments, value, False, call.id, ledger, trusted=trusted
            )
            recorded += 1
    return recorded


def _news(batches: Sequence[Batch], ledger: Ledger, guard: Guard) -> bool:
    """Whether harvested ids hold anything a ledger in use lacks: a new id or a new status."""
    for batch in batches:
        table = ledger._by_kind.get(batch.kind, {})
        keys = batch.keys
        if ledger._kinds.get(batch.kind) is not guard.kinds.get(batch.kind):
            # The ledger keys this kind its own way: look the values up as it would.
            kind = ledger._kinds.get(batch.kind)
            keys = [
                (kind.key(value) if kind is not None else value.strip()) or ""
                for value in batch.values
            ]
        if batch.statuses is None and all(map(table.__contains__, keys)):
            continue  # every id known and no status to compare: the common case
        statuses = batch.statuses if batch.statuses is not None else repeat(None)
        for key, found_key, status in zip(keys, batch.keys, statuses, strict=False):
            entry = table.get(key)
            if entry is None:
                # Evicted, or dropped as one of too many: known, and no news (a flood is not
                # recorded again at every compaction).
                known = ledger._tombstone(batch.kind, found_key) or ledger._drop_mark(
                    batch.kind, found_key
                )
                if known is None:
                    return True
            elif status is not None and status != entry.status:
                return True
    return False


# -- compact --------------------------------------------------------------------------------


# A list whose type was lost (a literal mixing dicts of different value types is a list[object])
# comes back as the dicts it holds (anything but mappings is a TranscriptError); typed messages
# (dicts, or an SDK's TypedDicts) come back typed as they went in. Only a list[object] (or
# list[Any]) matches the first: lists are invariant.
@overload
def compact(
    messages: list[object],
    ledger: Ledger,
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    keep_last_messages: int | None = None,
    guard: Guard | None = None,
    shape: Shape | None = None,
    role: str | None = None,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    tokens: Callable[[str], int] | None = None,
) -> CompactionResult[dict[str, Any]]: ...


@overload
def compact(
    messages: Sequence[M],
    ledger: Ledger,
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    keep_last_messages: int | None = None,
    guard: Guard | None = None,
    shape: Shape | None = None,
    role: str | None = None,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    tokens: Callable[[str], int] | None = None,
) -> CompactionResult[M]: ...


@_deprecation.legacy_arguments(
    "compact()",
    positional=2,
    keywords=("summarize", "keep_recent"),
    renamed={"summarise": "summarize"},
)
def compact(
    messages: Sequence[Any],
    ledger: Ledger,
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    keep_last_messages: int | None = None,
    guard: Guard | None = None,
    shape: Shape | None = None,
    role: str | None = None,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    tokens: Callable[[str], int] | None = None,
) -> CompactionResult[Any]:
    """Compact a conversation: the ledger block, a summary of the older turns, the recent turns.

    ``ledger`` is the conversation's :class:`Ledger`: ``guard.ledger`` (the
    current session), the one ``with guard.session(id) as ledger`` gives, or
    ``guard.new_ledger()``. ``guard`` gives the tool specs to harvest the
    tool results with (without it, nothing is harvested) and the audit
    events; a ledger of the guard's default session is saved after.
    ``summarize`` is any ``(messages, roles) -> str``; the default is the
    extractive summarizer (bounded by ``summary_chars``).
    ``keep_last_messages`` keeps the last that many messages raw instead of
    the last ``keep_recent`` turns (the cut still never leaves a call's
    result after it): for an agent's long loop of tool calls within one
    user turn, which turns would keep whole. ``role`` is the
    role of the compacted message (``system``, or ``user`` for Anthropic);
    an earlier compacted message is recognised in that role only, and
    trusted only when its seal verifies with the ledger's key (else its
    lines come back unverified, with an ``unsealed_ledger_block`` repair in
    the report); the text of :func:`compact_text`, which a runtime may have
    put behind a line of its own in any role, is recognised only sealed.
    ``tokens`` counts the tokens of a text (default: tiktoken
    where installed, else chars/4). A list with nothing to summarize comes
    back as it is, but for the error results put in for unanswered calls
    (listed in the report's ``repairs``).

    Until the next release the old forms still work, each with a
    ``DeprecationWarning``: ``summarise=``, ``summarize`` and ``keep_recent``
    by position, and a :class:`Guard` or ``guard.session(id)`` in the
    ledger's place.
    """
    _check_count("keep_recent", keep_recent)
    if keep_last_messages is not None:
        _check_count("keep_last_messages", keep_last_messages)
    options = _Options(
        summarize, keep_recent, keep_last_messages, shape, role, summary_chars, tokens
    )
    given: object = ledger
    try:
        if isinstance(given, Ledger):
            done = _compact(messages, given, guard, options)
            if guard is not None:
                guard._save_default(given)
            return done
        if isinstance(given, SessionScope):
            _deprecation.warn(
                "compact(messages, guard.session(id)) is deprecated: write "
                "`with guard.session(id) as ledger: compact(messages, ledger, guard=guard)`",
                stacklevel=2,
            )
            with given as opened:
                return _compact(messages, opened, _one_guard(given.guard, guard), options)
        if isinstance(given, Guard):
            _deprecation.warn(
                "compact(messages, guard) is deprecated: write "
                "compact(messages, guard.ledger, guard=guard)",
                stacklevel=2,
            )
            current = given.ledger
            done = _compact(messages, current, _one_guard(given, guard), options)
            given._save_default(current)  # the default session has no scope to save it
            return done
    except RecursionError:
        # Content that contains itself, or is nested absurdly deep: say which message.
        fault = nesting_fault(messages)
        if fault is None:
            raise
        raise fault from None
    raise GuardrailUsageError(
        "compact() takes the conversation's Ledger: guard.ledger, the one "
        "`with guard.session(id) as ledger` gives, or guard.new_ledger(); "
        f"not {type(given).__name__}"
    )


def compact_text(
    messages: Sequence[Any],
    ledger: Ledger,
    *,
    summarize: Summarizer | None = None,
    guard: Guard | None = None,
    shape: Shape | None = None,
    role: str | None = None,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    tokens: Callable[[str], int] | None = None,
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
    a second block. The options are :func:`compact`'s.
    """
    if not isinstance(ledger, Ledger):
        raise GuardrailUsageError(
            "compact_text() takes the conversation's Ledger: guard.ledger, the one "
            f"`with guard.session(id) as ledger` gives, or guard.new_ledger(); "
            f"not {type(ledger).__name__}"
        )
    options = _Options(summarize, 0, None, shape, role, summary_chars, tokens, whole=True)
    try:
        report = _compact(messages, ledger, guard, options).report
    except RecursionError:
        fault = nesting_fault(messages)
        if fault is None:
            raise
        raise fault from None
    if guard is not None:
        guard._save_default(ledger)
    return f"{report.ledger_block}\n\n{SUMMARY_HEADER}\n{report.summary}"


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GuardrailUsageError(f"{name} must be an integer >= 0, not {value!r}")


def _one_guard(given: Guard, guard: Guard | None) -> Guard:
    """The guard of a deprecated call: the one given in the ledger's place, and no other."""
    if guard is not None and guard is not given:
        raise GuardrailUsageError(
            "compact() was given one guard in the ledger's place and another as guard=; "
            "pass the ledger and guard=guard"
        )
    return given


class _Options(NamedTuple):
    summarize: Summarizer | None
    keep_recent: int
    keep_last_messages: int | None
    shape: Shape | None
    role: str | None
    summary_chars: int
    tokens: Callable[[str], int] | None
    #: Summarize every message after the leading system messages, keeping none raw
    #: (:func:`compact_text`, whose caller keeps the recent messages itself).
    whole: bool = False


def _compact(
    messages: Sequence[M], ledger: Ledger, guard: Guard | None, options: _Options
) -> CompactionResult[M]:
    summarize, keep_recent, keep_last, shape, role, summary_chars, tokens, whole = options
    transcript = read(messages, shape)
    shape = transcript.shape
    fresh = len(ledger) == 0 and ledger.turn == 0 and not ledger.tombstones()
    repairs = list(transcript.repairs)
    role = role or default_role(shape)
    block_role = read_role(shape, role)
    lead = 0  # the system messages that open the list stay first
    while lead < len(transcript.messages) and transcript.messages[lead].role == "system":
        lead += 1
    found = _earlier(transcript, lead, block_role, ledger)
    at, earlier_text = found if found is not None else (None, "")
    # The earlier message is usually the first after the system messages; a runtime that
    # wrapped it in a system message of its own leaves it among them.
    start = lead + (at == lead)
    carried: list[BlockLine] = []
    evicted: list[str] = []
    earlier_summary = ""
    if at is not None:
        block, _, rest = earlier_text.partition("\n\n")
        body, sealed = unseal(block, ledger)
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
        carried = restore(lines, ledger, trusted=sealed)
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
        harvested = _harvest(transcript, start, stop, ledger, guard, fresh=fresh)
    count, label = _counter(tokens)
    originals = write(transcript)
    audit = guard.audit if guard is not None else Audit()
    if cut == start and at is None and not whole:
        unchanged = _unchanged(
            messages, originals, ledger, shape, options, harvested, repairs, count, label
        )
        audit.compacted(ledger.session_id, unchanged.report)
        return unchanged

    masker = Masker(ledger, carried)
    masked = _Masked()

    def mask(text: str) -> str:
        out, done = masker.mask(text)
        if done:
            masked.count += len(done)
            masked.roles.update(written.role for written in done)
        masked.strings += 1
        masked.chars += len(text)
        return out

    left: list[str] = []  # the strings of the part that masking does not see
    part = [map_text(raw, mask, left) for raw in originals[start:cut]]
    roles = {r: masker.kind_of[r] for r in sorted(masker.roles)}
    if part:
        if earlier_summary:
            part.insert(0, text_message(shape, role, f"{SUMMARY_HEADER}\n{earlier_summary}"))
        if summarize is None:
            summary = extractive_summary(part, roles, max_chars=summary_chars)
        else:
            summary = summarize(part, roles)
        if not isinstance(summary, str):
            raise GuardrailUsageError(f"a summarizer returns text, not {type(summary).__name__}")
    else:
        summary = earlier_summary
    summary, issues = lint(summary.strip("\n"), masker)
    block = seal(render_block(ledger, carried, evicted), ledger)
    compacted = text_message(shape, role, f"{block}\n\n{SUMMARY_HEADER}\n{summary}")
    kept = [message for index, message in enumerate(originals[:lead]) if index != at]
    output = [*kept, compacted, *originals[cut:]]
    scrubbed = sum(issue.action == "scrubbed" for issue in issues)
    identifiers_before, tokens_before = _before(originals, start, cut, left, masker, masked, count)
    after = _all_text(output)
    report = CompactionReport(
        shape=shape,
        keep_recent=keep_recent,
        messages_before=len(messages),
        messages_after=len(output),
        summarized=cut - start,
        identifiers_before=identifiers_before,
        identifiers_after=_identifiers(masker, after),
        ledger_entries=len(ledger),
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
    audit.compacted(ledger.session_id, report)
    return CompactionResult(output, report)


def _unchanged(
    messages: Sequence[M],
    originals: list[Any],
    ledger: Ledger,
    shape: str,
    options: _Options,
    harvested: int,
    repairs: list[Repair],
    count: Callable[[str], int],
    label: str,
) -> CompactionResult[M]:
    text = _all_text(originals)
    found = _identifiers(Masker(ledger, ()), text)
    size = count(text)
    report = CompactionReport(
        shape=shape,
        keep_recent=options.keep_recent,
        messages_before=len(messages),
        messages_after=len(originals),
        summarized=0,
        identifiers_before=found,
        identifiers_after=found,
        ledger_entries=len(ledger),
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
        keep_last_messages=options.keep_last_messages,
    )
    return CompactionResult(originals, report)


@dataclass
class _Masked:
    """What masking the summarised part saw: the strings, their characters, the ids."""

    strings: int = 0
    chars: int = 0
    count: int = 0
    roles: set[str] = field(default_factory=set)


def _before(
    originals: list[Any],
    start: int,
    cut: int,
    left: list[str],
    masker: Masker,
    masked: _Masked,
    count: Callable[[str], int],
) -> tuple[int, int]:
    """Identifiers and tokens of the whole context before, reusing what masking saw.

    The context's text is every string of every message joined by line breaks.
    The strings of the summarised part were searched while they were masked, so
    only the rest is searched here (no identifier spans two strings unless a
    value holds a line break). Characters / 4 needs only the length.
    """
    if not masker.one_line:
        text = _all_text(originals)
        return _identifiers(masker, text), count(text)
    rest = [*strings(originals[:start]), *strings(originals[cut:]), *left]
    found = len(masked.roles | masker.roles_in("\n".join(rest)))
    if count is not _quarter:
        return found, count(_all_text(originals))
    size = masked.chars + sum(map(len, rest)) + max(masked.strings + len(rest) - 1, 0)
    return found, math.ceil(size / 4)


def _identifiers(masker: Masker, text: str) -> int:
    return len(masker.roles_in(text))


def _all_text(messages: Any) -> str:
    return "\n".join(strings(messages))


def _counter(tokens: Callable[[str], int] | None) -> tuple[Callable[[str], int], str]:
    """The token counter: the one given, tiktoken where installed, else characters / 4."""
    if tokens is not None:
        return tokens, getattr(tokens, "__name__", "custom")
    try:
        encoding = importlib.import_module("tiktoken").get_encoding("o200k_base")
    except Exception:  # not installed, or its encoding files cannot be fetched
        return _quarter, "chars/4"

    def tiktoken_count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return tiktoken_count, "tiktoken:o200k_base"


def _quarter(text: str) -> int:
    return math.ceil(len(text) / 4)
