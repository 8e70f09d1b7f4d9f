"""Saved ledgers and stored sessions, checked field by field before a ledger is rebuilt from them.

Imported only when a ledger is loaded: it imports pydantic, which ``import
guardrail`` must not pay for. Strict mode, so ``"verified": "false"`` is an
error instead of ``True``, and no field the format does not have is accepted.

A saved ledger (format 3) is the session id, the meta and the records a
store keeps; :func:`validate_json` returns it with the records in the
order the loader places them. Formats 1 and 2, which saved the entries,
roles and marks apart, come back as records too. A seal key saved by
format 2 (or kept in an older store's meta) is checked and then ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import NotRequired, TypedDict

from guardrail._data.entry import Dropped, Tombstone, dropped_record, evicted_record
from guardrail.errors import GuardrailUsageError

_strict = with_config(ConfigDict(strict=True, extra="forbid"))

Count = Annotated[int, Field(ge=0)]
SealKey = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]
#: An entry's note: text for the model, cleaned and bounded again whenever it is shown.
Note = str


@_strict
class SavedSource(TypedDict):
    tool: str
    call_id: str | None
    path: str
    turn: Count


@_strict
class SavedMention(TypedDict):
    call: str
    excerpt: str


# -- records and meta: what a store keeps, and what format 3 saves --------------------------------


@_strict
class LiveRecord(TypedDict):
    kind: str
    key: str
    state: Literal["live"]
    turn: Count
    value: str
    role: str
    aliases: list[str]
    source: SavedSource
    first_seen: Count
    last_used: Count
    verified: bool
    status: str | None
    pinned: bool
    epoch: Count
    #: Written only when the entry has one (records of earlier versions have none).
    note: NotRequired[Note]
    #: Provenance beyond what ``verified`` and the source imply (see :mod:`guardrail._data.entry`).
    tier: NotRequired[Literal["produced", "minted", "user", "mentioned", "introduced"]]
    outside: NotRequired[bool]
    mention: NotRequired[SavedMention]
    approved: NotRequired[list[str]]
    declined: NotRequired[list[str]]
    #: The MAC of each answer, by ``+tool`` or ``-tool`` (a guard with a secret writes them).
    seals: NotRequired[dict[str, str]]
    #: Retired: other spellings tools wrote of the id, written by earlier development
    #: versions; accepted and ignored (see ``RETIRED_FIELDS`` in :mod:`guardrail._data.entry`).
    spellings: NotRequired[list[str]]


@_strict
class EvictedRecord(TypedDict):
    kind: str
    key: str
    state: Literal["evicted"]
    turn: Count
    value: str
    role: str


@_strict
class DroppedRecord(TypedDict):
    kind: str
    key: str
    state: Literal["dropped"]
    turn: Count
    value: str
    tool: str


@_strict
class GoneRecord(TypedDict):
    kind: str
    key: str
    state: Literal["gone"]
    turn: Count


@_strict
class SavedMeta(TypedDict):
    capacity: Annotated[int, Field(ge=1)]
    tombstone_capacity: Count
    turn: Count
    epoch: Count
    kinds: list[str]
    counters: dict[str, Count]
    user_texts: list[str]
    refusals: dict[str, Count]
    #: The session's life, which its approval requests name (earlier versions wrote none).
    instance: NotRequired[Annotated[str, Field(min_length=1, max_length=64)]]
    #: The calls held for the user's answer, and those of them that ran (by call id).
    held: NotRequired[list[str]]
    ran: NotRequired[list[str]]
    #: Written by earlier versions, which kept the key in the store: checked, then ignored.
    seal_key: NotRequired[SealKey]


StoredRecord = Annotated[
    Union[LiveRecord, EvictedRecord, DroppedRecord, GoneRecord],  # noqa: UP007
    Field(discriminator="state"),
]


@_strict
class SavedLedger(TypedDict):
    """Format 3: what ``Ledger.to_dict`` writes."""

    format: Literal[3]
    session_id: str | None
    meta: SavedMeta
    records: list[StoredRecord]


# -- formats 1 and 2 -------------------------------------------------------------------------------


@_strict
class SavedEntry(TypedDict):
    value: str
    kind: str
    key: str
    role: str
    aliases: list[str]
    source: SavedSource
    first_seen: Count
    last_used: Count
    verified: bool
    status: str | None
    pinned: bool
    epoch: Count


@_strict
class SavedTombstone(TypedDict):
    value: str
    kind: str
    key: str
    role: str
    evicted_turn: Count


@_strict
class SavedDropped(TypedDict):
    value: str
    kind: str
    key: str
    tool: str
    turn: Count


@_strict
class SavedLedger2(TypedDict):
    """Format 2: the entries, roles, tombstones and drop marks apart, and a seal key."""

    format: Literal[2]
    session_id: str | None
    capacity: Annotated[int, Field(ge=1)]
    tombstone_capacity: Count
    turn: Count
    epoch: Count
    kinds: list[str]
    counters: dict[str, Count]
    entries: list[SavedEntry]
    roles: dict[str, str]
    tombstones: list[SavedTombstone]
    dropped: list[SavedDropped]
    user_texts: list[str]
    refusals: dict[str, Count]
    seal_key: SealKey


@_strict
class SavedEntry1(TypedDict):
    """An entry of format 1, whose later fields the first writers left out."""

    value: str
    kind: str
    key: str
    role: str
    aliases: NotRequired[list[str]]
    source: SavedSource
    first_seen: Count
    last_used: Count
    verified: bool
    status: NotRequired[str | None]
    pinned: NotRequired[bool]
    epoch: NotRequired[Count]


@_strict
class SavedLedger1(TypedDict):
    """Format 1: no seal key, no drop marks."""

    format: Literal[1]
    session_id: NotRequired[str | None]
    capacity: Annotated[int, Field(ge=1)]
    tombstone_capacity: Count
    turn: Count
    epoch: NotRequired[Count]
    kinds: list[str]
    counters: dict[str, Count]
    entries: list[SavedEntry1]
    roles: dict[str, str]
    tombstones: list[SavedTombstone]
    user_texts: list[str]
    refusals: dict[str, Count]


_ADAPTER: TypeAdapter[Any] = TypeAdapter(
    Annotated[Union[SavedLedger1, SavedLedger2, SavedLedger], Field(discriminator="format")]  # noqa: UP007
)
_RECORDS: TypeAdapter[list[Any]] = TypeAdapter(list[StoredRecord])
_META: TypeAdapter[SavedMeta] = TypeAdapter(SavedMeta)

_STATES = ("live", "evicted", "dropped", "gone")

_EXPECTED = {
    "bool_type": "expected a boolean (true or false)",
    "int_type": "expected an integer",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "typed_dict_type": "expected an object",
    "missing": "missing",
    "extra_forbidden": "unexpected field",
    "string_pattern_mismatch": "expected 64 hex characters (32 bytes)",
}

_TODO = "fix that field, or save the ledger again with Ledger.to_json()"


def validate_json(text: str | bytes) -> SavedLedger:
    """The saved ledger in ``text``, checked, as format 3 (records in the order to place them)."""
    try:
        data = _ADAPTER.validate_json(text)
    except ValidationError as exc:
        raise _usage_error(exc) from None
    return _upgrade(data)


def validate_python(data: Mapping[str, Any]) -> SavedLedger:
    """:func:`validate_json` for a ``Ledger.to_dict`` mapping."""
    if not isinstance(data, Mapping):
        raise GuardrailUsageError(
            f"a saved ledger is a mapping, not {type(data).__name__}; pass Ledger.to_dict()"
        )
    try:
        checked = _ADAPTER.validate_python(dict(data))
    except ValidationError as exc:
        raise _usage_error(exc) from None
    return _upgrade(checked)


def validate_records(records: Any) -> list[Any]:
    """A store's records, each checked; a bad one is an error naming its id and field."""
    try:
        return _RECORDS.validate_python(records if isinstance(records, list) else list(records))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = tuple(first["loc"])
        raw = records[loc[0]] if loc and isinstance(loc[0], int) else None
        name = (
            f"record {raw.get('kind')!r} {raw.get('key')!r}"
            if isinstance(raw, Mapping)
            else "a record"
        )
        raise GuardrailUsageError(f"{name}: {_record_problem(first, loc[1:], raw)}") from None


def validate_meta(meta: Any) -> SavedMeta:
    """A store's session meta, checked (a seal key of an earlier version dropped)."""
    try:
        checked = _META.validate_python(dict(meta) if isinstance(meta, Mapping) else meta)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise GuardrailUsageError(f"meta: {_field_problem(first, tuple(first['loc']))}") from None
    checked.pop("seal_key", None)
    return checked


def where(loc: tuple[int | str, ...]) -> str:
    """A field path as a reader writes it: ``records[3].verified``, ``roles['x']``."""
    text = ""
    parent: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif parent in ("roles", "counters", "refusals"):
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
        parent = part
    return text or "the saved ledger"


# -- upgrading formats 1 and 2 ------------------------------------------------------------------


def _upgrade(data: Any) -> SavedLedger:
    """A checked saved ledger of any format as format 3, its meta without a seal key."""
    if data["format"] == 3:
        _check_names(data["records"])
        data["meta"].pop("seal_key", None)
        return data  # type: ignore[no-any-return]
    if data["format"] == 1:
        for entry in data["entries"]:
            entry.setdefault("aliases", [])
            entry.setdefault("status", None)
            entry.setdefault("pinned", False)
            entry.setdefault("epoch", 0)
        data.setdefault("session_id", None)
        data.setdefault("epoch", 0)
        data["dropped"] = []
    upgraded: dict[str, Any] = {
        "format": 3,
        "session_id": data["session_id"],
        "meta": {
            name: data[name]
            for name in (
                "capacity",
                "tombstone_capacity",
                "turn",
                "epoch",
                "kinds",
                "counters",
                "user_texts",
                "refusals",
            )
        },
        "records": _records_of_format_2(data),
    }
    return upgraded  # type: ignore[return-value]


def _records_of_format_2(data: Any) -> list[dict[str, Any]]:
    """The entries, tombstones and drop marks of format 2 as records, in the loader's order.

    Format 2 kept the role table apart; each name in it must be the role or
    an alias of the entry it names, and each entry's role must be in it.
    """
    at: dict[tuple[str, str], int] = {}  # (kind, key) -> index, for saying which collide
    by_role: dict[str, dict[str, Any]] = {}
    role_at: dict[str, int] = {}
    for i, raw in enumerate(data["entries"]):
        kind, key, role = raw["kind"], raw["key"], raw["role"]
        if (kind, key) in at:
            raise _not_saved(f"entries[{i}]: {kind} key {key!r} is also entries[{at[kind, key]}]'s")
        if role in role_at:
            raise _not_saved(f"entries[{i}].role: {role!r} is also entries[{role_at[role]}]'s role")
        at[kind, key] = role_at[role] = i
        by_role[role] = raw
    first: dict[str, None] = {}  # roles in order of first appearance in the role table
    for name, role in data["roles"].items():
        named = by_role.get(role)
        if named is None:
            raise _not_saved(f"roles[{name!r}]: {role!r} is no entry's role")
        if name != role and name not in named["aliases"]:
            raise _not_saved(
                f"roles[{name!r}]: {name!r} is neither the role nor an alias of the entry "
                f"{role!r} names"
            )
        first.setdefault(role, None)
    for role in by_role:
        if data["roles"].get(role) != role:
            raise _not_saved(f"entries[{role_at[role]}]: its role {role!r} is not in roles")
    records: list[dict[str, Any]] = []
    for role in first:
        raw = by_role[role]
        aliases = [name for name in raw["aliases"] if data["roles"].get(name) == role]
        head = {"kind": raw["kind"], "key": raw["key"], "state": "live", "turn": raw["last_used"]}
        records.append({**head, **raw, "aliases": aliases})
    # Marks of ids that are live again mean nothing: the live entry wins.
    records += [
        evicted_record(Tombstone(**raw))
        for raw in data["tombstones"]
        if (raw["kind"], raw["key"]) not in at
    ]
    records += [
        dropped_record(Dropped(**raw))
        for raw in data["dropped"]
        if (raw["kind"], raw["key"]) not in at
    ]
    return records


def _check_names(records: list[Any]) -> None:
    """A saved ledger names each id once, and each role or alias once among its entries."""
    at: dict[tuple[str, str], int] = {}
    named: dict[str, int] = {}
    for i, record in enumerate(records):
        name = (record["kind"], record["key"])
        if name in at:
            raise _not_saved(
                f"records[{i}]: {name[0]} key {name[1]!r} is also records[{at[name]}]'s"
            )
        at[name] = i
        if record["state"] != "live":
            continue
        for role in (record["role"], *record["aliases"]):
            if role in named:
                raise _not_saved(
                    f"records[{i}]: the name {role!r} is also records[{named[role]}]'s"
                )
            named[role] = i


def _not_saved(problem: str) -> GuardrailUsageError:
    """The error for a saved ledger whose fields are each fine but do not fit together."""
    return GuardrailUsageError(f"not a saved ledger: {problem}; {_TODO}")


# -- errors --------------------------------------------------------------------------------------


def _usage_error(exc: ValidationError) -> GuardrailUsageError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    kind = first["type"]
    loc = tuple(first["loc"])
    if kind == "json_invalid":
        return GuardrailUsageError(
            f"saved ledger is not JSON: {first['msg']}; pass the text Ledger.to_json() produced"
        )
    if kind == "union_tag_invalid" and not loc:
        tag = first.get("ctx", {}).get("tag")
        return GuardrailUsageError(
            f"saved ledger format {tag} is not 1, 2 or 3; save it again with this version of "
            "guardrail"
        )
    if kind == "union_tag_not_found" and not loc:
        return GuardrailUsageError(
            "not a saved ledger: format: missing; pass the text Ledger.to_json() produced"
        )
    if kind in ("dict_type", "model_attributes_type") and not loc:
        return GuardrailUsageError("saved ledger must be a JSON object (Ledger.to_json() text)")
    loc = loc[1:]  # the first part is the format tag
    if len(loc) >= 2 and loc[0] == "records":
        problem = _record_problem(first, loc[2:], first["input"])
        return GuardrailUsageError(
            f"not a saved ledger: records[{loc[1]}]{_nested(problem)}{_more(errors)}; {_TODO}"
        )
    problem = _field_problem(first, loc)
    return GuardrailUsageError(f"not a saved ledger: {problem}{_more(errors)}; {_TODO}")


def _record_problem(error: Any, loc: tuple[int | str, ...], raw: Any) -> str:
    """What is wrong with one record; ``loc`` starts with its state (the union's tag)."""
    if error["type"] == "union_tag_invalid":
        state = raw.get("state") if isinstance(raw, Mapping) else raw
        return f"state: expected 'live', 'evicted', 'dropped' or 'gone', not {_shown(state)}"
    if error["type"] == "union_tag_not_found":
        return "state: missing"
    if not loc:
        return "expected an object"
    return _field_problem(error, loc[1:] if loc[0] in _STATES else loc)


def _nested(problem: str) -> str:
    """A record's problem after its index: ``.verified: ...``, or ``: expected an object``."""
    return f": {problem}" if problem.startswith(("state:", "expected")) else f".{problem}"


def _more(errors: list[Any]) -> str:
    return f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""


def _field_problem(error: Any, loc: tuple[int | str, ...]) -> str:
    """``field: what was wrong, not what was there`` for one pydantic error."""
    kind = error["type"]
    problem = _EXPECTED.get(kind)
    if problem is None:
        problem = error["msg"][0].lower() + error["msg"][1:]
        if "ge" in error.get("ctx", {}):
            problem = f"must be >= {error['ctx']['ge']}"
    if kind not in ("missing", "extra_forbidden"):
        problem += f", not {_shown(error['input'])}"
    return f"{where(loc)}: {problem}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
