"""The merge rule: what survives when two copies of one conversation's ledger meet.

Written once, here, and followed everywhere two copies meet: a ledger
taking in another copy (``Ledger.merge``), a cached session catching up
with what other writers stored, and every store merging concurrent writes
(:mod:`guardrail.stores.protocol` re-exports it for store authors). Each
id is merged by :func:`merge_record` as a record (see
:mod:`guardrail._data.entry`); the session-wide fields by :func:`merge_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardrail._data.entry import (
    RETIRED_FIELDS,
    Record,
    answer_parts,
    implied_tier,
    provenance_order,
    seal_name,
    tool_written,
)
from guardrail.ledger._calls import HeldCalls

#: A session's meta: ``capacity``, ``tombstone_capacity``, ``turn``, ``epoch``, ``kinds``,
#: ``counters``, ``user_texts``, ``refusals``, ``instance``, ``held``, ``ran`` (JSON-safe).
#: No key: a ledger's seal key is derived from the guard's secret, never stored.
Meta = Mapping[str, Any]

#: How many of the user's last texts a ledger keeps (and a merged meta).
USER_TEXTS_KEPT = 16

_REMOVED = {"evicted": 2, "gone": 1, "dropped": 0}  # ties between marks: the most informative


def merge_record(held: Record | None, new: Record, *, concurrent: bool) -> Record:
    """What survives of one id when ``new`` is written over the ``held`` record of it.

    Not ``concurrent`` (the writer had seen ``held``): ``new``. Else the two
    are copies of one conversation that did not see each other, and the
    principle is that an id the program let go is refused as evicted:

    - a removal (``evicted``, ``gone``) at a turn no earlier than the other
      copy's last use of the id wins, whichever copy it is in; a use at a
      later turn (the id was seen again) wins over an older removal;
    - a live entry wins over a drop mark (the id was kept, in one copy);
    - between marks, the later turn wins (on a tie, an eviction over a
      removal over a drop mark);
    - two live entries become one: verified if either is (the value and
      source of the copy whose value a tool wrote, the earlier if both,
      else of the verified copy: verbatim means as a tool wrote it), first
      seen at the earlier turn, last used at the later (with that use's
      status and note), pinned if either is, the held role kept and the
      other's names added as aliases.

    The answer does not depend on which copy is ``held`` but for the names
    of a live entry (whose role stays the held one's).
    """
    if held is None or not concurrent:
        return new
    held_live = held["state"] == "live"
    new_live = new["state"] == "live"
    if held_live and new_live:
        return _combine(held, new)
    if held_live or new_live:
        live, mark = (held, new) if held_live else (new, held)
        if mark["state"] != "dropped" and mark["turn"] >= live["turn"]:
            return mark
        return live
    order = (held["turn"], _REMOVED.get(held["state"], 0))
    return new if (new["turn"], _REMOVED.get(new["state"], 0)) > order else held


def _combine(held: Record, new: Record) -> Record:
    """Two live copies of one entry as one, whichever order they come in (but the role)."""
    merged = dict(held)
    if _spelling_order(new) < _spelling_order(held):
        merged["value"] = new["value"]
        merged["source"] = new["source"]
    merged["verified"] = bool(held["verified"] or new["verified"])
    for name in RETIRED_FIELDS:  # a record an earlier version stored: its fields go
        merged.pop(name, None)
    merged["first_seen"] = min(held["first_seen"], new["first_seen"])
    if _status_order(new) > _status_order(held):
        merged["status"] = new["status"]
    # The note of the later use, as the status; a copy with none keeps the other's.
    if new.get("note") is not None and (held.get("note") is None or new["turn"] > held["turn"]):
        merged["note"] = new["note"]
    merged["last_used"] = merged["turn"] = max(held["turn"], new["turn"])
    merged["epoch"] = max(held["epoch"], new["epoch"])
    merged["pinned"] = bool(held["pinned"] or new["pinned"])
    _combine_provenance(merged, held, new)
    names = [held["role"], *held["aliases"]]
    merged["aliases"] = list(held["aliases"]) + [
        name for name in (new["role"], *new["aliases"]) if name not in names
    ]
    return merged


def _combine_provenance(merged: dict[str, Any], held: Record, new: Record) -> None:
    """The most permissive tier of two copies, and each tool's latest approval or denial.

    A tool both copies decided for takes the decision of the copy used last.
    """
    mine, theirs = _provenance(held), _provenance(new)
    best = min(mine, theirs, key=lambda p: provenance_order(p[0], p[1]))
    for name in ("tier", "outside", "mention", "approved", "declined"):
        merged.pop(name, None)
    source = merged["source"]
    if best[0] != implied_tier(merged["verified"], source["tool"]):
        merged["tier"] = best[0]
    if best[1]:
        merged["outside"] = True
    mention = held.get("mention") or new.get("mention")
    if mention is not None:
        merged["mention"] = mention
    older, newer = (
        (held, new) if (held["turn"], held["epoch"]) <= (new["turn"], new["epoch"]) else (new, held)
    )
    # By tool: the newer copy's answer for a tool replaces the older's. An approval of one
    # call the older copy alone still holds may be spent in the newer: it goes (asked again).
    answered = {answer_parts(a)[0] for f in ("approved", "declined") for a in newer.get(f, ())}
    approved = {
        a
        for a in older.get("approved", ())
        if answer_parts(a)[0] not in answered and not answer_parts(a)[1]
    }
    declined = {a for a in older.get("declined", ()) if answer_parts(a)[0] not in answered}
    approved |= set(newer.get("approved", ()))
    declined |= set(newer.get("declined", ()))
    if approved:
        merged["approved"] = sorted(approved)
    if declined:
        merged["declined"] = sorted(declined)
    # The MACs of the answers kept (a guard with a secret checks each as it weighs a call).
    kept = {seal_name(a, True) for a in approved} | {seal_name(a, False) for a in declined}
    seals = {**older.get("seals", {}), **newer.get("seals", {})}
    merged.pop("seals", None)
    if seals := {name: mac for name, mac in seals.items() if name in kept}:
        merged["seals"] = dict(sorted(seals.items()))


def _spelling_order(record: Record) -> tuple[int, int, str]:
    """Which copy's value (and source) a merge keeps: lower first.

    Verbatim means as a tool wrote it: a spelling a tool wrote first (the
    earliest, as an entry keeps the first one; the same turn, by the text, so
    either order of two copies keeps the same), then a verified value, then
    any other.
    """
    if tool_written(_provenance(record)[0], record["source"]["path"]):
        return 0, record["source"]["turn"], record["value"]
    return (1 if record["verified"] else 2), 0, ""


def _provenance(record: Record) -> tuple[str, bool]:
    tier = record.get("tier") or implied_tier(record["verified"], record["source"]["tool"])
    return tier, bool(record.get("outside", False))


def _status_order(record: Record) -> tuple[int, bool, str]:
    status = record["status"]
    return (record["turn"], status is not None, status or "")


def merge_meta(held: Meta | None, new: Meta, *, concurrent: bool) -> Meta:
    """What a store keeps when ``new`` meta is written over ``held``.

    Not ``concurrent``: ``new``. Else turn, epoch and counters take the
    larger; the user's texts are united in order, each once (the newest
    kept); the
    kinds are united; re-prompt counts are those of the later turn (the
    larger of each on a tie); capacities stay the held ones (the first
    writer's), and so does the session's ``instance`` (the life its
    approval requests name). A ``seal_key`` an earlier version kept in the
    meta is dropped.
    """
    if held is None or not concurrent:
        return new
    merged = dict(held)
    if "instance" not in held and "instance" in new:  # held written by an earlier version
        merged["instance"] = new["instance"]
    calls = HeldCalls()  # held calls: united, a call that ran in either copy has run
    calls.take(held.get("held", ()), held.get("ran", ()))
    calls.take(new.get("held", ()), new.get("ran", ()))
    merged["held"], merged["ran"] = calls.to_meta()
    merged.pop("seal_key", None)
    merged["turn"] = max(held["turn"], new["turn"])
    merged["epoch"] = max(held["epoch"], new["epoch"])
    counters = dict(held["counters"])
    for name, number in new["counters"].items():
        counters[name] = max(number, counters.get(name, 0))
    merged["counters"] = counters
    # Each text once: the held ones in their order, then the others' (the newest kept).
    texts = list(dict.fromkeys([*held["user_texts"], *new["user_texts"]]))
    merged["user_texts"] = texts[-USER_TEXTS_KEPT:]
    merged["kinds"] = list(dict.fromkeys([*held["kinds"], *new["kinds"]]))
    # Re-prompt counts start again each turn: those of the later turn, else the larger of each.
    if new["turn"] > held["turn"]:
        merged["refusals"] = dict(new["refusals"])
    elif new["turn"] == held["turn"]:
        refusals = dict(held["refusals"])
        for tool, count in new["refusals"].items():
            refusals[tool] = max(count, refusals.get(tool, 0))
        merged["refusals"] = refusals
    return merged
