"""What a compaction reports: the result, its report, and how ids and tokens are counted.

The report is data: :meth:`CompactionReport.to_dict` for JSON, and
:meth:`CompactionReport.audit_fields` for the audit event, which takes
plain fields and knows nothing of this type.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from guardrail._guard.audit import listed, omitted
from guardrail._transcript.content import strings
from guardrail._transcript.messages import Repair
from guardrail.compaction._lint import LintIssue
from guardrail.compaction._masking import Masker

if TYPE_CHECKING:
    # A default, so that a bare ``CompactionResult`` annotation stays valid under --strict;
    # only type checkers read it (typing.TypeVar takes ``default`` from Python 3.13 on).
    from typing_extensions import TypeVar

    M = TypeVar("M", bound=Mapping[str, Any], default=Mapping[str, Any])
else:
    from typing import TypeVar

    M = TypeVar("M", bound=Mapping[str, Any])


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

    def audit_fields(self) -> dict[str, Any]:
        """The fields of the ``guardrail.compacted`` event: counts only, no value, no text."""
        return {
            "shape": self.shape,
            "keep_recent": self.keep_recent,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "summarised": self.summarized,  # the event key keeps its name: log queries use it
            "identifiers_before": self.identifiers_before,
            "identifiers_after": self.identifiers_after,
            "ledger_entries": self.ledger_entries,
            "harvested": self.harvested,
            "masked": self.masked,
            "scrubbed": self.scrubbed,
            "flagged": self.flagged,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "repairs": [repair.problem for repair in listed(self.repairs)],
            **omitted(len(self.repairs)),
        }


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


@dataclass
class Masked:
    """What masking the summarised part saw: the strings, their characters, the ids."""

    strings: int = 0
    chars: int = 0
    count: int = 0
    roles: set[str] = field(default_factory=set)


@dataclass
class Texts:
    """The strings of a conversation's messages as compaction walks them, each message once.

    ``head``: those of each message before the part to summarise (the leading
    system messages, and the earlier compacted message); ``part``: those of
    the part, in order; ``recent``: those of the messages kept raw after it.
    """

    head: list[list[str]]
    part: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)

    def kept(self, earlier: int | None) -> list[str]:
        """The strings of the leading messages kept, all but the ``earlier`` compacted one."""
        return [text for index, texts in enumerate(self.head) if index != earlier for text in texts]

    def before(self) -> str:
        """The whole context before compaction, its strings joined by line breaks."""
        return "\n".join(
            [*(text for texts in self.head for text in texts), *self.part, *self.recent]
        )

    def after(self, earlier: int | None, compacted: list[str]) -> str:
        """The context after: the leading messages kept, the ``compacted`` message, the recent."""
        return "\n".join([*self.kept(earlier), *compacted, *self.recent])


def counted(
    texts: Texts,
    earlier: int | None,
    compacted: list[str],
    left: list[str],
    masker: Masker,
    masked: Masked,
    count: Callable[[str], int],
) -> tuple[int, int, int]:
    """Identifiers and tokens of the whole context before, and identifiers after.

    Before is every message; after is the leading messages less the
    ``earlier`` compacted one, the ``compacted`` message (its strings), then
    the recent ones. Each context's text is every string of its messages
    joined by line breaks. The strings of the summarised part were searched
    while they were masked; when no value holds a line break, no identifier
    spans two strings, so the rest is searched part by part, and the leading
    and recent messages, which both contexts share, once for both.
    Characters / 4 needs only the length.
    """
    if not masker.one_line:
        text = texts.before()
        after = texts.after(earlier, compacted)
        return identifiers(masker, text), count(text), identifiers(masker, after)
    lead, recent = texts.kept(earlier), texts.recent
    others = [*left, *(texts.head[earlier] if earlier is not None else ())]
    shared = _roles_in(masker, lead) | _roles_in(masker, recent)
    found = len(masked.roles | shared | _roles_in(masker, others))
    found_after = len(shared | _roles_in(masker, compacted))
    if count is not quarter:
        return found, count(texts.before()), found_after
    rest = len(lead) + len(recent) + len(others)
    size = masked.chars + sum(map(len, (*lead, *recent, *others)))
    size += max(masked.strings + rest - 1, 0)
    return found, math.ceil(size / 4), found_after


def _roles_in(masker: Masker, texts: list[str]) -> set[str]:
    """The roles of the identifiers in ``texts``, joined by line breaks."""
    return masker.roles_in("\n".join(texts)) if texts else set()


def identifiers(masker: Masker, text: str) -> int:
    """How many distinct known ids ``text`` writes."""
    return len(masker.roles_in(text))


def all_text(messages: Any) -> str:
    """Every string of ``messages``, joined by line breaks."""
    return "\n".join(strings(messages))


#: Holds one item once tiktoken was found missing.
_ABSENT: list[bool] = []


def counter(tokens: Callable[[str], int] | None) -> tuple[Callable[[str], int], str]:
    """The token counter: the one given, tiktoken where installed, else characters / 4."""
    if tokens is not None:
        return tokens, getattr(tokens, "__name__", "custom")
    if _ABSENT:
        return quarter, "chars/4"
    try:
        encoding = importlib.import_module("tiktoken").get_encoding("o200k_base")
    except ModuleNotFoundError as error:
        # Not installed: looked for once per process (a failed import searches the whole path
        # again each time, a large part of compacting a short conversation).
        if error.name == "tiktoken":
            _ABSENT.append(True)
        return quarter, "chars/4"
    except Exception:  # its encoding files cannot be fetched: tried again next time
        return quarter, "chars/4"

    def tiktoken_count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return tiktoken_count, "tiktoken:o200k_base"


def quarter(text: str) -> int:
    """Characters / 4, rounded up: a token estimate with no tokenizer."""
    return math.ceil(len(text) / 4)
