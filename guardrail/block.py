"""The ledger block: the ledger as text, first in a compacted context, and read back.

DESIGN's format: a header line, one line per entry (role, value, and in
parentheses the seen and last-used turns when they differ, the status,
``unverified``, ``pinned``), then a note of the roles evicted. A value that
would not read back as one word is written as a JSON string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from guardrail.harvest import Found
from guardrail.ledger import Ledger, Source
from guardrail.messages import COMPACTED_HEADER, Repair

BLOCK_HEADER = COMPACTED_HEADER.rstrip("\n")
_EMPTY = "(no identifiers yet)"
_EVICTED = "(evicted, look up again before use: "
_EVICTED_SHOWN = 20
_MIN_WIDTH = 18
_NUMBERED = re.compile(r"_\d+$")


@dataclass(frozen=True)
class BlockLine:
    """One entry line of a ledger block, as read back."""

    role: str
    value: str
    seen: int | None = None
    last: int | None = None
    status: str | None = None
    verified: bool = True
    pinned: bool = False


def ledger_block(ledger: Ledger) -> str:
    """The ledger as the block that opens a compacted context (DESIGN's format)."""
    return render_block(ledger, (), ())


def render_block(ledger: Ledger, carried: Sequence[BlockLine], evicted: Sequence[str]) -> str:
    """The block of ``ledger``, with lines ``carried`` from an earlier block and roles evicted."""
    rows = [
        (e.role, _shown(e.value), _notes(e.first_seen, e.last_used, e.status, e.verified, e.pinned))
        for e in ledger.entries()
    ]
    rows += [
        (c.role, _shown(c.value), _notes(c.seen, c.last, c.status, c.verified, c.pinned))
        for c in carried
    ]
    lines = [BLOCK_HEADER]
    if not rows:
        lines.append(_EMPTY)
    else:
        role_width = max(_MIN_WIDTH, max(len(role) for role, _, _ in rows) + 2)
        value_width = max(_MIN_WIDTH, max(len(value) for _, value, _ in rows) + 2)
        # A written value never ends in white space, a note ends in ")": no padding is left
        # at the end of a line.
        lines += [
            role.ljust(role_width) + (value.ljust(value_width) + note if note else value)
            for role, value, note in rows
        ]
    gone = list(dict.fromkeys([*evicted, *(tomb.role for tomb in ledger.tombstones())]))
    if gone:
        shown = ", ".join(gone[-_EVICTED_SHOWN:])
        more = len(gone) - _EVICTED_SHOWN
        lines.append(f"{_EVICTED}{shown}{f' and {more} earlier' if more > 0 else ''})")
    return "\n".join(lines)


def _notes(
    seen: int | None, last: int | None, status: str | None, verified: bool, pinned: bool
) -> str:
    if last == seen and seen is not None and verified and not status and not pinned:
        return ""  # most lines: nothing to note
    notes = []
    if seen is not None and last is not None and last != seen:
        notes.append(f"seen turn {seen}, last used turn {last}")
    elif seen is not None and last is None:
        notes.append(f"seen turn {seen}")
    if status:
        notes.append(f"status: {status}")
    if not verified:
        notes.append("unverified")
    if pinned:
        notes.append("pinned")
    return f"({', '.join(notes)})" if notes else ""


def _shown(value: str) -> str:
    """A value as the block writes it: as it is, or JSON-quoted when it would not read back."""
    # Of the white-space characters only the space is printable.
    plain = value and value.isprintable() and " " not in value
    return value if plain and value[0] not in '"([' else json.dumps(value, ensure_ascii=False)


def parse_block(text: str, index: int) -> tuple[list[BlockLine], list[str], list[Repair]]:
    """Entry lines, evicted roles and unreadable lines of a block written by this module."""
    entries: list[BlockLine] = []
    evicted: list[str] = []
    repairs: list[Repair] = []
    for line in text.split("\n")[1:]:
        if not line.strip():
            break
        if line == _EMPTY:
            continue
        if line.startswith(_EVICTED):
            body = line[len(_EVICTED) :].rstrip(")")
            body = re.sub(r" and \d+ earlier$", "", body)
            evicted.extend(role for role in body.split(", ") if role)
            continue
        parsed = _parse_line(line)
        if parsed is None:
            repairs.append(Repair("unreadable_ledger_line", index, line))
        else:
            entries.append(parsed)
    return entries, evicted, repairs


def _parse_line(line: str) -> BlockLine | None:
    role, _, rest = line.partition(" ")
    rest = rest.lstrip()
    if not role or not rest:
        return None
    try:
        if rest.startswith('"'):
            value, end = json.JSONDecoder().raw_decode(rest)
            rest = rest[end:]
        else:
            value, _, rest = rest.partition(" ")
    except ValueError:
        return None
    note = rest.strip()
    fields: dict[str, Any] = {}
    if note.startswith("(") and note.endswith(")"):
        for part in note[1:-1].split(", "):
            if m := re.fullmatch(r"seen turn (\d+)", part):
                fields["seen"] = int(m.group(1))
            elif m := re.fullmatch(r"last used turn (\d+)", part):
                fields["last"] = int(m.group(1))
            elif part.startswith("status: "):
                fields["status"] = part[len("status: ") :]
            elif part == "unverified":
                fields["verified"] = False
            elif part == "pinned":
                fields["pinned"] = True
    elif note:
        return None
    return BlockLine(role, str(value), **fields)


def restore(lines: Sequence[BlockLine], ledger: Ledger) -> list[BlockLine]:
    """Bring an earlier block's entries the ledger lacks back in; return those it cannot place.

    An entry the ledger holds, or remembers as evicted, is left alone (an
    eviction is not undone). Otherwise its kind is taken from its role
    (``order_2`` is an ``order``) or from the one kind whose pattern it
    fits; with no kind it is carried in the new block as it was.
    """
    evicted = {tomb.value for tomb in ledger.tombstones()}
    carried = []
    for line in lines:
        if ledger.lookup(line.value) or line.value in evicted:
            continue
        kind = _infer_kind(line, ledger)
        if kind is None:
            carried.append(line)
            continue
        ledger.turn = max(ledger.turn, line.seen or 0, line.last or 0)
        found = Found(
            kind,
            line.value,
            ledger.normalize(kind, line.value),
            "ledger_block",
            line.status,
            line.role,
        )
        source = Source("compaction", None, "ledger_block", ledger.turn)
        for entry in ledger.admit([found], source=source, verified=line.verified).added:
            entry.first_seen = line.seen if line.seen is not None else entry.first_seen
            entry.last_used = line.last if line.last is not None else entry.first_seen
            entry.pinned = line.pinned
    return carried


def _infer_kind(line: BlockLine, ledger: Ledger) -> str | None:
    kinds = ledger.kinds
    stem = _NUMBERED.sub("", line.role)
    if stem in kinds and kinds[stem].matches(line.value):
        return stem
    fitting = [
        name for name, kind in kinds.items() if kind.has_pattern and kind.matches(line.value)
    ]
    return fitting[0] if len(fitting) == 1 else None
