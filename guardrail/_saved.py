"""The saved-ledger format, checked field by field before a ledger is rebuilt from it.

Imported only when a ledger is loaded: it imports pydantic, which ``import
guardrail`` must not pay for. Strict mode, so ``"verified": "false"`` is an
error instead of ``True``, and no field the format does not have is accepted.
Format 1 (before the seal key and the drop marks) is read too.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import NotRequired, TypedDict

from guardrail.errors import GuardrailUsageError

_strict = with_config(ConfigDict(strict=True, extra="forbid"))

Count = Annotated[int, Field(ge=0)]


@_strict
class SavedSource(TypedDict):
    tool: str
    call_id: str | None
    path: str
    turn: Count


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
class SavedLedger(TypedDict):
    """Format 2: what ``Ledger.to_dict`` writes, every field required."""

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
    seal_key: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]


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
    Annotated[Union[SavedLedger1, SavedLedger], Field(discriminator="format")]  # noqa: UP007
)

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
    """The saved ledger in ``text``, checked; format 1 comes back filled up to format 2."""
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


def where(loc: tuple[int | str, ...]) -> str:
    """A field path as a reader writes it: ``entries[3].verified``, ``roles['x']``."""
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


def _upgrade(data: Any) -> SavedLedger:
    if data["format"] == 2:
        return data  # type: ignore[no-any-return]
    for entry in data["entries"]:
        entry.setdefault("aliases", [])
        entry.setdefault("status", None)
        entry.setdefault("pinned", False)
        entry.setdefault("epoch", 0)
    data.setdefault("session_id", None)
    data.setdefault("epoch", 0)
    data["dropped"] = []
    # Format 1 had no seal key: a fresh one, so blocks sealed before cannot be forged after.
    data["seal_key"] = secrets.token_hex(32)
    data["format"] = 2
    return data  # type: ignore[no-any-return]


def _usage_error(exc: ValidationError) -> GuardrailUsageError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    kind = first["type"]
    if kind == "json_invalid":
        return GuardrailUsageError(
            f"saved ledger is not JSON: {first['msg']}; pass the text Ledger.to_json() produced"
        )
    if kind == "union_tag_invalid":
        tag = first.get("ctx", {}).get("tag")
        return GuardrailUsageError(
            f"saved ledger format {tag} is not 1 or 2; save it again with this version of guardrail"
        )
    if kind == "union_tag_not_found":
        return GuardrailUsageError(
            "not a saved ledger: format: missing; pass the text Ledger.to_json() produced"
        )
    if kind in ("dict_type", "model_attributes_type") and not first["loc"]:
        return GuardrailUsageError("saved ledger must be a JSON object (Ledger.to_json() text)")
    loc = tuple(first["loc"][1:])  # the first part is the format tag
    problem = _EXPECTED.get(kind)
    if problem is None:
        problem = first["msg"][0].lower() + first["msg"][1:]
        ctx = first.get("ctx", {})
        if "ge" in ctx:
            problem = f"must be >= {ctx['ge']}"
    if kind not in ("missing", "extra_forbidden"):
        problem += f", not {_shown(first['input'])}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return GuardrailUsageError(f"not a saved ledger: {where(loc)}: {problem}{more}; {_TODO}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- the records a store keeps (see guardrail.stores) --------------------------------------------


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
    seal_key: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]
    turn: Count
    epoch: Count
    kinds: list[str]
    counters: dict[str, Count]
    user_texts: list[str]
    refusals: dict[str, Count]


StoredRecord = Union[LiveRecord, EvictedRecord, DroppedRecord, GoneRecord]  # noqa: UP007

_RECORDS: TypeAdapter[list[StoredRecord]] = TypeAdapter(
    list[Annotated[StoredRecord, Field(discriminator="state")]]
)
_META: TypeAdapter[SavedMeta] = TypeAdapter(SavedMeta)


def validate_records(records: Any) -> list[StoredRecord]:
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
        if first["type"] == "union_tag_invalid":
            problem = "state: expected 'live', 'evicted', 'dropped' or 'gone'"
            problem += f", not {_shown(raw.get('state') if isinstance(raw, Mapping) else raw)}"
        elif first["type"] == "union_tag_not_found":
            problem = "state: missing"
        elif not loc[1:]:
            problem = "expected an object"
        else:
            problem = _field_problem(first, tuple(loc[2:]))
        raise GuardrailUsageError(f"{name}: {problem}") from None


def validate_meta(meta: Any) -> SavedMeta:
    """A store's session meta, checked; a bad field is an error naming it."""
    try:
        return _META.validate_python(dict(meta) if isinstance(meta, Mapping) else meta)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise GuardrailUsageError(f"meta: {_field_problem(first, tuple(first['loc']))}") from None


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
