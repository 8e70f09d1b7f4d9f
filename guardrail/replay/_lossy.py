"""A summarizer that loses identifiers on purpose, and the plain compaction to compare with.

:class:`LossySummarizer` summarizes like the extractive summarizer, lists
every identifier it saw (so that a lossless run would carry them all), then
applies the four ways a summary loses an identifier to each one, seeded:
``drop`` (gone), ``generalize`` ("the reservation"), ``truncate``
(``ZFA0…``) and ``mutate`` (one character changed). Behind guardrail's
masking it sees only ``[role]`` names and has nothing to lose.

:func:`plain_compact` is the baseline: the same cut and the same
summarizer, no ledger, no masking. :func:`side_by_side` runs both over
recorded conversations and counts how many identifier arguments of later
calls are still present verbatim in the compacted context;
:func:`strategies` gives both to ``replay(compaction=...)``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from guardrail._data.text import has_token
from guardrail._guard.facade import Guard
from guardrail._provenance.failure import failed
from guardrail._provenance.harvest import harvest
from guardrail._transcript.content import strings
from guardrail._transcript.messages import Shape, default_role, read, text_message, write
from guardrail.compaction import (
    DEFAULT_KEEP_RECENT,
    CompactionReport,
    CompactionResult,
    Summarizer,
    choose_cut,
    compact,
    extractive_summary,
)
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.ledger import Ledger
from guardrail.replay._run import Compaction

M = TypeVar("M", bound=Mapping[str, Any])

#: What the lossy summarizer may do to one identifier (``keep``: leave it intact).
FATES = ("drop", "generalize", "truncate", "mutate", "keep")
PLAIN_HEADER = "SUMMARY OF EARLIER TURNS"
# Without kinds, an identifier is a token mixing letters (or _) and digits, four characters or more;
# a [role] (order_5) is a name the summary must keep, not an identifier to spoil.
_ID_LIKE = re.compile(r"(?<![\w#\[])#?(?=[\w-]*\d)(?=[\w-]*[A-Za-z_])[\w-]{4,}(?![\w\]])")


class LossySummarizer:
    """A summarizer ``(messages, roles) -> str`` that drops, generalizes, truncates and mutates ids.

    Each distinct identifier meets one fate, the same wherever it appears,
    drawn from ``seed`` and the identifier itself (so runs repeat, and one
    id's fate does not depend on the others). The rates are probabilities;
    what is left of 1 keeps the id intact.

    Args:
        seed: Seeds every fate.
        drop: The share of ids left out of the summary.
        generalize: The share written as "the reservation", "the order".
        truncate: The share cut short (``ZFA0…``).
        mutate: The share with one character changed.
        kinds: A guard's kinds, saying what an identifier looks like;
            without them, tokens mixing letters and digits are taken for ids.
        base: The summarizer whose text is spoiled (the extractive one by
            default).
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        drop: float = 0.1,
        generalize: float = 0.1,
        truncate: float = 0.1,
        mutate: float = 0.1,
        kinds: Mapping[str, Kind] | None = None,
        base: Summarizer | None = None,
    ) -> None:
        #: Each failure mode's probability, in the order :meth:`fate` draws them.
        self.rates = {
            "drop": drop,
            "generalize": generalize,
            "truncate": truncate,
            "mutate": mutate,
        }
        rates = self.rates.values()
        if any(not 0 <= rate <= 1 for rate in rates) or sum(rates) > 1 + 1e-9:
            raise GuardrailUsageError("each rate is within 0..1 and together they are at most 1")
        self.seed = seed
        self.kinds = {name: kind for name, kind in (kinds or {}).items() if kind.has_pattern}
        self.base = base

    def fate(self, value: str) -> str:
        """What this summarizer does to ``value``: one of :data:`FATES`."""
        draw = random.Random(f"{self.seed}\x00{value}").random()
        for name, rate in self.rates.items():
            if draw < rate:
                return name
            draw -= rate
        return "keep"

    def identifiers(self, text: str) -> dict[str, str]:
        """Identifiers written in ``text``, in order, each with its kind (or ``identifier``)."""
        found: dict[str, str] = {}
        if self.kinds:
            for name, kind in self.kinds.items():
                for token in kind.find(text):
                    found.setdefault(token, name)
        else:
            for match in _ID_LIKE.finditer(text):
                found.setdefault(match.group(), "identifier")
        return found

    def __call__(self, messages: Sequence[Any], roles: Mapping[str, str], /) -> str:
        if self.base is None:
            text = extractive_summary(messages, roles)
        else:
            text = self.base(list(messages), dict(roles))
        seen = self.identifiers("\n".join(dict.fromkeys(strings(list(messages)))))
        if seen:
            text += "\nIdentifiers mentioned: " + ", ".join(seen)
        seen.update((k, v) for k, v in self.identifiers(text).items() if k not in seen)
        return self.spoil(text, seen)

    def spoil(self, text: str, identifiers: Mapping[str, str]) -> str:
        """``text`` with each of ``identifiers`` (value -> kind) given its fate everywhere."""
        if not identifiers:
            return text
        replacement = {value: self._spoiled(value, kind) for value, kind in identifiers.items()}
        alternatives = "|".join(re.escape(v) for v in sorted(replacement, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w])(?:{alternatives})(?![\w])")
        spoiled = pattern.sub(lambda m: replacement[m.group()], text)
        return re.sub(r"[ \t]{2,}", " ", re.sub(r"(?:, ){2,}", ", ", spoiled))

    def _spoiled(self, value: str, kind: str) -> str:
        fate = self.fate(value)
        if fate == "drop":
            return ""
        if fate == "generalize":
            return f"the {kind}"
        if fate == "truncate":
            return value[: max(1, len(value) // 2)] + "…"
        if fate == "mutate":
            return _mutated(value, random.Random(f"{self.seed}\x01{value}"))
        return value


def _mutated(value: str, rng: random.Random) -> str:
    """``value`` with one letter or digit changed to another of the same class."""
    places = [i for i, c in enumerate(value) if c.isalnum()]
    if not places:
        return value + "x"
    at = rng.choice(places)
    old = value[at]
    pool = "0123456789" if old.isdigit() else "ABCDEFGHJKLMNPQRSTUVWXYZ"
    pool = pool.lower() if old.islower() else pool
    new = rng.choice([c for c in pool if c != old])
    return value[:at] + new + value[at + 1 :]


@overload
def plain_compact(
    messages: list[object],
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    shape: Shape | None = None,
) -> CompactionResult[dict[str, Any]]: ...


@overload
def plain_compact(
    messages: Sequence[M],
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    shape: Shape | None = None,
) -> CompactionResult[M]: ...


def plain_compact(
    messages: Sequence[Any],
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    shape: Shape | None = None,
) -> CompactionResult[Any]:
    """The baseline: the same cut, a summary of the raw older turns, no ledger and no masking.

    Its options are :func:`~guardrail.compact`'s.
    """
    transcript = read(messages, shape)
    lead = 0
    while lead < len(transcript.messages) and transcript.messages[lead].role == "system":
        lead += 1
    cut = choose_cut(transcript, lead, keep_recent)
    originals = write(transcript)
    part = originals[lead:cut]
    summary = ""
    output = originals
    if part:
        # The summarizer gets fresh dicts, as compact() gives it: it cannot change the originals.
        copies = [dict(message) for message in part]
        summary = extractive_summary(copies, {}) if summarize is None else summarize(copies, {})
        text = f"{PLAIN_HEADER}\n{summary}"
        note = text_message(transcript.shape, default_role(transcript.shape), text)
        output = [*originals[:lead], note, *originals[cut:]]
    before, after = "\n".join(strings(originals)), "\n".join(strings(output))
    report = CompactionReport(
        shape=transcript.shape,
        keep_recent=keep_recent,
        messages_before=len(originals),
        messages_after=len(output),
        summarized=len(part),
        identifiers_before=0,
        identifiers_after=0,
        ledger_entries=0,
        harvested=0,
        masked=0,
        scrubbed=0,
        flagged=0,
        tokens_before=-(-len(before) // 4),
        tokens_after=-(-len(after) // 4),
        token_estimate="chars/4",
        ledger_block="",
        summary=summary,
        repairs=tuple(transcript.repairs),
    )
    return CompactionResult(output, report)


# -- availability after compaction ----------------------------------------------------------


def strategies(
    guard: Guard,
    *,
    summarize: Summarizer | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
) -> dict[str, Compaction]:
    """Both compactions as ``(messages, ledger) -> messages``, for ``replay(compaction=...)``.

    ``"guardrail"`` is :func:`~guardrail.compaction.compact` on the ledger
    given (a copy of the replay's ledger as it stands, which already holds
    every result before the call, so nothing is recorded twice) with
    ``guard``'s specs, its audit events silenced as replay silences its
    own; ``"plain summary"`` is :func:`plain_compact`. Both use
    ``summarize`` (default: ``LossySummarizer(seed=1, kinds=guard.kinds)``).
    """
    lossy = summarize or LossySummarizer(seed=1, kinds=guard.kinds)
    quiet = guard.silenced()

    def guarded(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        return compact(
            messages, ledger, summarize=lossy, keep_recent=keep_recent, guard=quiet
        ).messages

    def plain(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        return plain_compact(messages, summarize=lossy, keep_recent=keep_recent).messages

    return {"guardrail": guarded, "plain summary": plain}


@dataclass(frozen=True)
class SideBySide:
    """How many identifier arguments of later calls each compacted context still holds verbatim."""

    conversations: int
    compactions: int
    required: int
    guarded: int
    plain: int
    by_keep_recent: Mapping[int, tuple[int, int, int]]

    def table(self) -> str:
        """A text table: ids required, present after compact(), present after the plain summary."""
        lines = ["keep_recent  required  guardrail          plain summary"]
        rows = [
            *sorted(self.by_keep_recent.items()),
            ("all", (self.required, self.guarded, self.plain)),
        ]
        for k, (need, kept, plain) in rows:
            lines.append(
                f"{k!s:<11}  {need:>8}  {kept:>6} {_share(kept, need):>8}  "
                f"{plain:>6} {_share(plain, need):>8}"
            )
        return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"({100 * part / whole:.1f}%)" if whole else "-"


def side_by_side(
    conversations: Iterable[Sequence[Mapping[str, Any]]],
    guard: Guard,
    *,
    keep_recent: Iterable[int] = range(5),
    summarize: Summarizer | None = None,
    every: int = 1,
) -> SideBySide:
    """Compact before every ``every``-th assistant turn of each conversation, both ways, and count.

    For each compaction and each later recorded call, every identifier
    argument whose value an earlier (successful) tool result produced must
    appear verbatim, as a whole token, in the compacted context. A turn
    with no such argument after it has nothing to measure and is skipped.
    ``compact()`` starts from a fresh ledger of ``guard`` each time (the
    transcript recorded elsewhere); the plain summary has no ledger. Both
    use ``summarize`` (default: ``LossySummarizer(seed=1, kinds=guard.kinds)``).
    """
    summarize = summarize or LossySummarizer(seed=1, kinds=guard.kinds)
    guard = guard.silenced()  # thousands of compactions: no audit event each
    depths = list(keep_recent)
    totals = {k: [0, 0, 0] for k in depths}
    count = compactions = 0
    for messages in conversations:
        count += 1
        produced = _produced_before(messages, guard)
        wanted = _id_arguments(messages, guard)
        turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        for position in turns[::every]:
            later = [
                value for at, value, keys in wanted if at >= position and keys & produced[position]
            ]
            if not later:
                continue
            for k in depths:
                guarded = compact(
                    messages[:position],
                    guard.new_ledger(),
                    summarize=summarize,
                    keep_recent=k,
                    guard=guard,
                ).messages
                plain = plain_compact(
                    messages[:position], summarize=summarize, keep_recent=k
                ).messages
                compactions += 1
                row = totals[k]
                row[0] += len(later)
                row[1] += _present(later, guarded)
                row[2] += _present(later, plain)
    required, kept, plain_kept = (sum(row[i] for row in totals.values()) for i in range(3))
    return SideBySide(
        conversations=count,
        compactions=compactions,
        required=required,
        guarded=kept,
        plain=plain_kept,
        by_keep_recent={k: (row[0], row[1], row[2]) for k, row in totals.items()},
    )


def _produced_before(
    messages: Sequence[Mapping[str, Any]], guard: Guard
) -> list[frozenset[tuple[str, str]]]:
    """For each position, the (kind, key) pairs successful tool results produced before it."""
    transcript = read(messages)
    seen: set[tuple[str, str]] = set()
    out = []
    for message in transcript.messages:
        out.append(frozenset(seen))
        for result in message.results:
            spec = guard.specs.get(result.name or "")
            if spec is None or result.error or failed(spec, result.value):
                continue
            found = harvest(spec, result.value, guard.kinds).batches
            seen.update((batch.kind, key) for batch in found for key in batch.keys)
    return out


def _id_arguments(
    messages: Sequence[Mapping[str, Any]], guard: Guard
) -> list[tuple[int, str, frozenset[tuple[str, str]]]]:
    """Every identifier argument: (message index, value as written, its possible (kind, key))."""
    out = []
    for call in read(messages).calls():
        spec = guard.specs.get(call.name)
        if spec is None or not isinstance(call.arguments, Mapping):
            continue
        for param in spec.params:
            for value in param.path.extract(call.arguments, parse_json_strings=True):
                if isinstance(value, str) and value:
                    keys = frozenset((k, guard.kinds[k].normalize(value)) for k in param.kinds)
                    out.append((call.index, value, keys))
    return out


def _present(values: Sequence[str], messages: Sequence[Any]) -> int:
    """How many of ``values`` appear in ``messages`` verbatim as whole tokens."""
    text = "\n".join(strings(list(messages)))
    found = {value for value in set(values) if has_token(text, value)}
    return sum(value in found for value in values)
