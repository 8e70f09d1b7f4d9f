"""The ledger block: the ledger as text, first in a compacted context, and read back.

The format: a header line, one line per entry (role, value, and in
parentheses the seen and last-used turns when they differ, the status,
``unverified``, ``pinned`` and the entry's note, JSON-quoted), then a note
of the roles evicted. A value that would not read back as one word is
written as a JSON string. A note is text for the model: cleaned and bounded
(:mod:`guardrail._provenance.notes`), ids of entries inside it shown by ``[role]``,
never read back as an id.

Compaction writes the block sealed: a last line ``(seal <hex>)`` holds an
HMAC-SHA256 (128 bits) of the text above it, keyed with the ledger's seal
key (its session's, derived from the guard's secret; never stored) and
bound to its session id. No entry line can take that form (a role never
starts with "("). Only a block whose seal verifies is trusted when read
back; anyone can type the rest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from guardrail._data.batch import Batch
from guardrail._data.entry import TIERS, implied_tier
from guardrail._provenance.notes import NAMED, Noted, bounded, by_role, choose, named_by_user
from guardrail._provenance.notes import parts as note_parts
from guardrail._transcript.messages import COMPACTED_HEADER, Repair, content_text
from guardrail.kinds._operator import EMPTY, Catalog
from guardrail.ledger import Ledger, Source
from guardrail.ledger._ledger import state_of
from guardrail.ledger._state import LedgerState

#: The first line of every ledger block: ``ID LEDGER (verbatim, do not paraphrase)``.
BLOCK_HEADER = COMPACTED_HEADER.rstrip("\n")
_EMPTY = "(no identifiers yet)"
_EVICTED = "(evicted, look up again before use: "
_EVICTED_SHOWN = 20
#: How the line of a kind's operator ids begins: never an entry line, never read back as one.
_OPERATOR = "(declared by the operator, valid as written: "
_OPERATOR_SHOWN = 20
_MIN_WIDTH = 18
_NUMBERED = re.compile(r"_\d+$")
_ROLE = re.compile(r"[A-Za-z0-9_.-]+")  # the characters a ledger role is made of
_SEAL_LINE = re.compile(r"\(seal ([0-9a-f]{32})\)")
_NOT_PLAIN = frozenset('",()')  # characters a status is JSON-quoted for
_NOTE_PART = re.compile(
    r"seen turn (?P<seen>\d+)|last used turn (?P<last>\d+)"
    r'|status: (?P<status>"(?:[^"\\]|\\.)*"|[^",()]+)|unverified|pinned'
    r'|note: (?P<note>"(?:[^"\\]|\\.)*")'
    r"|tier: (?P<tier>[a-z]+)|outside|confirmed"
)
_ROLE_REF = re.compile(r"\[([A-Za-z0-9_.-]+)\]")


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
    note: str | None = None
    #: Provenance beyond ``verified``: a tier other than produced (verified) or user
    #: (unverified), an outside party's value, one the user approved for some tool.
    tier: str | None = None
    outside: bool = False
    confirmed: bool = False


def _provenance(tier: str | None, verified: bool, outside: bool, confirmed: bool) -> list[str]:
    """The notes of an entry's provenance, where it is not what ``unverified`` already says."""
    notes = [f"tier: {tier}"] if tier and tier != implied_tier(verified, "user") else []
    return notes + ["outside"] * outside + ["confirmed"] * confirmed


def ledger_block(ledger: Ledger) -> str:
    """The ledger as the block that opens a compacted context: a line per entry, unsealed."""
    return render_block(state_of(ledger), (), ())


def render_block(
    state: LedgerState,
    carried: Sequence[BlockLine],
    evicted: Sequence[str],
    operator: Catalog = EMPTY,
    *,
    parts: dict[str, list[str]] | None = None,
    noted: Mapping[str, str] | None = None,
) -> str:
    """The block of a ledger, with lines ``carried`` from an earlier block and roles evicted.

    ``operator``: the operator's ids of each kind, shown as such after the
    entries (at most twenty a kind), and never read back as entries: a
    ledger holds them only because the guard declares them.
    ``parts``: each role's note parts kept from an earlier rendering of the same ledger.
    ``noted``: :func:`shown_notes` of the same ledger and ``carried``, already worked out.
    """
    entries = state.entries()
    if noted is None:
        noted = shown_notes(state, carried, parts=parts)
    rows = [
        (
            e.role,
            _shown(e.value),
            _notes(
                e.first_seen,
                e.last_used,
                e.status,
                e.verified,
                e.pinned,
                noted.get(e.role),
                _provenance(e.tier, e.verified, e.outside, e.confirmed),
            ),
        )
        for e in entries
    ]
    rows += [
        (
            c.role,
            _shown(c.value),
            _notes(
                c.seen,
                c.last,
                c.status,
                c.verified,
                c.pinned,
                noted.get(c.role),
                _provenance(c.tier, c.verified, c.outside, c.confirmed),
            ),
        )
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
    gone = list(dict.fromkeys([*evicted, *(tomb.role for tomb in state.tombstones.values())]))
    if gone:
        shown = ", ".join(gone[-_EVICTED_SHOWN:])
        more = len(gone) - _EVICTED_SHOWN
        lines.append(f"{_EVICTED}{shown}{f' and {more} earlier' if more > 0 else ''})")
    for kind, values in sorted(operator.items()):
        listed = sorted(values.values())
        more = len(listed) - _OPERATOR_SHOWN
        tail = f" and {more} more" if more > 0 else ""
        lines.append(f"{_OPERATOR}{kind} {', '.join(map(_shown, listed[:_OPERATOR_SHOWN]))}{tail})")
    return "\n".join(lines)


def shown_notes(
    state: LedgerState,
    carried: Sequence[BlockLine] = (),
    *,
    parts: dict[str, list[str]] | None = None,
) -> dict[str, str]:
    """``{role: note}`` of every entry with a note, as the block shows it.

    Bounded and cleaned again whatever wrote it (a store, a saved ledger),
    with every word that names an entry (or a carried line) shown as its
    ``[role]`` (the note of a list of orders that names the customer says
    ``[customer]``); then of each note, the parts that tell its entry from
    the others of its kind in the block (:func:`~guardrail._provenance.notes.choose`),
    an entry the user named having one more part to be told by
    (:func:`~guardrail._provenance.notes.named_by_user`).
    ``parts`` keeps each role's parts for the next rendering of the same ledger.
    """
    carried_roles = {line.value: line.role for line in carried}
    known: dict[str, str | None] = {}  # words repeat across notes: each looked up once
    tables = list(state.tables.values()) if _trimmed_keys(state) else None

    def role_of(word: str) -> str | None:
        if word not in known:
            if tables is not None:  # state.lookup(word)[0], with no normaliser to call
                key = word.strip()
                for table in tables:
                    entry = table.get(key)
                    if entry is not None:
                        known[word] = entry.role
                        break
                else:
                    known[word] = carried_roles.get(word)
            else:
                found = state.lookup(word)
                known[word] = found[0].role if found else carried_roles.get(word)
        return known[word]

    read = {} if parts is None else parts

    def parts_of(role: str, note: str) -> list[str]:
        found = read.get(role)
        if found is None:
            found = read[role] = note_parts(by_role(bounded(note), role_of))
        return found

    entries = state.entries()
    named = named_by_user(entries, state.user_texts)  # a fact of the conversation, no result's
    lines = []
    for e in entries:
        own = parts_of(e.role, e.note) if e.note else []
        if e.role in named:
            own = _with_named(own)
        if own:
            lines.append(Noted(e.role, e.kind, e.status, own))
    lines += [
        Noted(c.role, _NUMBERED.sub("", c.role), c.status, parts_of(c.role, c.note))
        for c in carried
        if c.note
    ]
    return choose(lines)


def _trimmed_keys(state: LedgerState) -> bool:
    """Whether the ledger keys every kind it holds by the value trimmed (no normaliser else)."""
    kinds = state.kinds
    return all(
        (kind := kinds.get(name)) is None or kind.normalize is str.strip for name in state.tables
    )


def _with_named(parts: list[str]) -> list[str]:
    """A note's parts and, last, that the user named the id (a part of its own, kept apart)."""
    return parts if NAMED in parts else [*parts, NAMED]


def seal(block: str, state: LedgerState) -> str:
    """``block`` with its seal line: only this ledger (its key, its session) can write it."""
    return f"{block}\n(seal {_mac(block, state)})"


def unseal(block: str, state: LedgerState) -> tuple[str, bool]:
    """The text of ``block`` above its seal line, and whether the seal verifies for this ledger.

    A block with no seal line comes back whole, not verified.
    """
    body, newline, last = block.rpartition("\n")
    match = _SEAL_LINE.fullmatch(last) if newline else None
    if match is None:
        return block, False
    return body, hmac.compare_digest(match.group(1), _mac(body, state))


def _mac(text: str, state: LedgerState) -> str:
    """HMAC-SHA256 of ``text`` bound to the session, keyed with the ledger's seal key (128 bits)."""
    session = (state.session_id or "").encode("utf-8", "surrogatepass")
    # The session's length first: no other session and text run together into the same bytes.
    message = b"guardrail ledger block\0%d\0%s%s" % (
        len(session),
        session,
        text.encode("utf-8", "surrogatepass"),
    )
    return hmac.new(state.seal_key, message, hashlib.sha256).hexdigest()[:32]


def _notes(
    seen: int | None,
    last: int | None,
    status: str | None,
    verified: bool,
    pinned: bool,
    note: str | None,
    provenance: list[str],
) -> str:
    if (
        last == seen
        and seen is not None
        and verified
        and not (status or pinned or note or provenance)
    ):
        return ""  # most lines: nothing to note
    notes = []
    if seen is not None and last is not None and last != seen:
        notes.append(f"seen turn {seen}, last used turn {last}")
    elif seen is not None and last is None:
        notes.append(f"seen turn {seen}")
    if status:
        notes.append(f"status: {_status_shown(status)}")
    if not verified:
        notes.append("unverified")
    if pinned:
        notes.append("pinned")
    notes += provenance
    if note:
        notes.append(f"note: {json.dumps(note, ensure_ascii=False)}")
    return f"({', '.join(notes)})" if notes else ""


def _status_shown(status: str) -> str:
    """A status as the block writes it: JSON-quoted unless it reads back as written.

    A status comes from a tool result: written raw, a line break in one would
    add a line to a block that compaction then seals.
    """
    plain = status.isprintable() and status == status.strip() and not _NOT_PLAIN & set(status)
    return status if plain else json.dumps(status, ensure_ascii=False)


def _shown(value: str) -> str:
    """A value as the block writes it: as it is, or JSON-quoted when it would not read back."""
    # Of the white-space characters only the space is printable.
    plain = value and value.isprintable() and " " not in value
    return value if plain and value[0] not in '"([' else json.dumps(value, ensure_ascii=False)


def parse_block(text: str, index: int) -> tuple[list[BlockLine], list[str], list[Repair]]:
    """Entry lines, evicted roles and unreadable lines of a block written by this module.

    A seal line is skipped: whether to trust the lines is :func:`unseal`'s to say.
    """
    entries: list[BlockLine] = []
    evicted: list[str] = []
    repairs: list[Repair] = []
    for line in text.split("\n")[1:]:
        if not line.strip():
            break
        if line == _EMPTY or _SEAL_LINE.fullmatch(line):
            continue
        if line.startswith(_OPERATOR):  # the guard's declaration, never this block's
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


def ledger_values(messages: Sequence[Any]) -> dict[str, str]:
    """``{role: value}`` of the first ledger block in ``messages`` (empty when there is none).

    What an agent reads to find the identifier a role names. The block's
    seal is not checked: this reads what a model would see, and trusts
    nothing.
    """
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        text = content_text(content) or ""
        if text.startswith(BLOCK_HEADER + "\n"):
            lines, _, _ = parse_block(text.partition("\n\n")[0], index)
            return {line.role: line.value for line in lines}
    return {}


#: ``[role] (note)`` in a summary, the note plain or JSON-quoted (it holds a parenthesis).
_SUMMARY_NOTE = re.compile(r'\[([A-Za-z0-9_.-]+)\] \((?:("(?:[^"\\]|\\.)*")|([^()"]*))\)')


def ledger_facts(messages: Sequence[Any]) -> dict[str, set[str]]:
    """What the first ledger block in ``messages`` and its summary say of each role but its value.

    The facts of a role are its status (``status: pending``) and the parts of
    its note (``Kettle K2``, ``2025-03-02``), from its line in the block and
    from ``[role] (note)`` in the summary after it. Every role of the block
    has an entry, maybe empty: how a reader (or the replay harness) tells
    which of several entries of one kind is which.
    """
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        text = content_text(content) or ""
        if not text.startswith(BLOCK_HEADER + "\n"):
            continue
        block, _, summary = text.partition("\n\n")
        lines, _, _ = parse_block(block, index)
        facts: dict[str, set[str]] = {line.role: set() for line in lines}
        for line in lines:
            if line.status:
                facts[line.role].add(f"status: {line.status}")
            if line.note:
                facts[line.role].update(part for part in line.note.split("; ") if part)
        for role, quoted, plain in _SUMMARY_NOTE.findall(summary):
            if role in facts:
                note = _quoted(quoted) if quoted else plain
                facts[role].update(part for part in note.split("; ") if part)
        return facts
    return {}


def _quoted(text: str) -> str:
    """A JSON-quoted note of a summary, or nothing when it does not decode as a string."""
    try:
        note = json.loads(text)
    except ValueError:
        return ""
    return note if isinstance(note, str) else ""


def _parse_line(line: str) -> BlockLine | None:
    role, _, rest = line.partition(" ")
    rest = rest.lstrip()
    # A role is a name, never a template: "{n}" or a quote in one is not a line of this module.
    if not _ROLE.fullmatch(role) or not rest:
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
        parsed = _parse_note(note[1:-1])
        if parsed is None:
            return None
        fields = parsed
    elif note:
        return None
    return BlockLine(role, str(value), **fields)


def _parse_note(body: str) -> dict[str, Any] | None:
    """The fields of a line's note (between its parentheses), or None if it is not one."""
    fields: dict[str, Any] = {}
    at = 0
    while at < len(body):
        match = _NOTE_PART.match(body, at)
        if match is None:
            return None
        seen, last, status, note, tier = match.group("seen", "last", "status", "note", "tier")
        if note is not None:
            try:
                fields["note"] = json.loads(note)
            except ValueError:
                return None
        elif tier is not None:
            fields["tier"] = tier
        elif match.group() in ("outside", "confirmed"):
            fields[match.group()] = True
        elif seen is not None:
            fields["seen"] = int(seen)
        elif last is not None:
            fields["last"] = int(last)
        elif status is not None:
            try:
                fields["status"] = json.loads(status) if status.startswith('"') else status
            except ValueError:
                return None
        elif match.group() == "unverified":
            fields["verified"] = False
        else:
            fields["pinned"] = True
        at = match.end()
        if at < len(body):
            if not body.startswith(", ", at):
                return None
            at += 2
    return fields


def restore(
    lines: Sequence[BlockLine], state: LedgerState, *, trusted: bool = True
) -> list[BlockLine]:
    """Bring an earlier block's entries the ledger lacks back in; return those it cannot place.

    An entry the ledger holds, or remembers as evicted, is left alone (an
    eviction is not undone). Otherwise its kind is taken from its role
    (``order_2`` is an ``order``) or from the one kind whose pattern it
    fits; with no kind (or a value its kind cannot read) it is carried in
    the new block as it was. Lines of a block that is not ``trusted`` (its
    seal missing or wrong) come in unverified, unpinned and at the current
    turn, whatever they say: anyone can write them.
    """
    if not trusted:
        lines = [_untrusted(line) for line in lines]
    else:
        # A note shows ids by role: back to their values, to be shown by role again.
        values = {line.role: line.value for line in lines}
        lines = [_unmasked(line, values) for line in lines]
    evicted = {tomb.value for tomb in state.tombstones.values()}
    carried = []
    for line in lines:
        if line.value in evicted or _held(line.value, state):
            continue
        kind = _infer_kind(line, state)
        key = state.key(kind, line.value) if kind is not None else None
        if kind is None or not key or key in state.kinds[kind].examples:
            carried.append(line)  # not an id this ledger can hold: kept as text
            continue
        state.turn = max(state.turn, line.seen or 0, line.last or 0)
        found = Batch.one(kind, line.value, key, "ledger_block", line.status, line.role)
        # The tier the block says (an unverified line with none was typed by the user); an
        # untrusted block's lines say none and enter as introduced.
        tier = line.tier if trusted else "introduced"
        if tier is None and not line.verified:
            tier = "user"
        elif tier is not None and tier not in TIERS:
            tier = "introduced"
        found = found._replace(tier=tier, outside=line.outside and trusted)
        source = Source("compaction", None, "ledger_block", state.turn)
        for entry in state.admit([found], source=source, verified=line.verified).added:
            entry.note = line.note  # text for the model, from a block this ledger sealed
            seen = line.seen if line.seen is not None else entry.first_seen
            state.backdate(
                entry, first_seen=seen, last_used=line.last if line.last is not None else seen
            )
            if line.pinned:
                state.pin(entry.role)  # pinned entries are counted apart
    return carried


def _untrusted(line: BlockLine) -> BlockLine:
    """A line as far as an unsealed block can be believed: a value under a role, no more.

    Its note goes too: anyone could have written it, and a sealed block
    would then show it as the ledger's own.
    """
    return BlockLine(line.role, line.value, status=line.status, verified=False)


def _unmasked(line: BlockLine, values: Mapping[str, str]) -> BlockLine:
    """A line whose note names ids by ``[role]`` as their values (an unknown role as text)."""
    if not line.note:
        return line
    note = _ROLE_REF.sub(lambda m: values.get(m.group(1), m.group(1)), line.note)
    return replace(line, note=note)


def _held(value: str, state: LedgerState) -> bool:
    """Whether the ledger holds ``value`` under any kind (a value no kind can read is not held)."""
    return bool(state.lookup(value))


def _infer_kind(line: BlockLine, state: LedgerState) -> str | None:
    kinds = state.kinds
    stem = _NUMBERED.sub("", line.role)
    if stem in kinds and kinds[stem].matches(line.value):
        return stem
    fitting = [
        name for name, kind in kinds.items() if kind.has_pattern and kind.matches(line.value)
    ]
    return fitting[0] if len(fitting) == 1 else None
