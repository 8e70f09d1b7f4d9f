"""Tool specs: which arguments are identifiers, which results produce them, and the effect.

Three ways to declare, all ending in the same :class:`ToolSpec`:
``Annotated[str, Id("order")]`` in a signature or on the fields of a
pydantic model, dataclass or TypedDict a tool returns; keyword arguments of
the decorator (``ids=``, ``produces=``, ``mints=``); and a manifest (see
:mod:`guardrail._declare.manifest`). Everything is validated and compiled here, once.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Literal,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
)

from guardrail._declare.describe import KIND_KEY, SEP_KEY, describe_node
from guardrail._declare.failure import DEFAULT_FAILS, Fails, FailureRule
from guardrail._declare.paths import EACH, KEY, KEYS, VALUES, Path, Step, compile_path
from guardrail.errors import GuardrailUsageError

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic_core import CoreSchema

Effect = Literal["read", "write"]
EFFECTS: tuple[str, ...] = ("read", "write")
#: What a successful ``read`` confirms of the ids it took: ``True`` (and ``False``, which
#: means the same) only those a declared result field returns; ``"on_success"`` all of them.
Verifies = bool | Literal["on_success"]
ON_SUCCESS: Literal["on_success"] = "on_success"


@dataclass(frozen=True, init=False)
class Id:
    """Marks a parameter or a result field as an identifier of one or more kinds.

    ``Annotated[str, Id("order")]``; ``Id(["customer", "line"])`` accepts
    either kind; ``sep=","`` reads several ids packed in one string;
    ``role`` is a role template for ids a result produces (``"order_{n}"``),
    ``status`` the key beside the id holding its status, ``note`` the
    fields beside it that say which record it is (paths from the record
    holding the id: ``["items[*].name", "placed"]``; default: its short
    ``name``, ``title``, ``status``, ``date``... fields; ``False``: none).
    On a ``mints=`` parameter, ``role`` names the ids it brings into
    existence. A parameter left at
    a default other than None is checked as if the default were passed,
    unless ``default_ok=True`` says the default is a known-good id.
    ``outside=True`` on a result field says an outside party chose its
    values (an incoming payment's sender, a received e-mail's ``from``):
    they keep that mark, and the kind's ``outside`` policy decides them.

    In a JSON schema pydantic writes (a tool's parameters, as agent
    frameworks send them to a model), an identifier says how to fill it:
    its ``description`` tells the model to copy the value exactly from a
    tool result or the ID LEDGER (after a description of its own, if it
    has one) and ``x-guardrail-kind`` names its kinds. Where a framework
    sets a field's description afterwards, :func:`describe_ids` puts the
    instruction back.
    """

    kinds: tuple[str, ...]
    sep: str | None
    role: str | None
    status: str | None
    default_ok: bool
    note: tuple[str, ...] | bool
    outside: bool

    def __init__(
        self,
        kind: str | Sequence[str],
        *,
        sep: str | None = None,
        role: str | None = None,
        status: str | None = None,
        default_ok: bool = False,
        note: Sequence[str] | bool = True,
        outside: bool = False,
    ) -> None:
        kinds = (kind,) if isinstance(kind, str) else tuple(kind)
        if not kinds or not all(isinstance(k, str) and k for k in kinds):
            raise GuardrailUsageError(f"Id() takes a kind name or a list of them, not {kind!r}")
        if not isinstance(default_ok, bool):
            raise GuardrailUsageError(f"Id(default_ok=) is True or False, not {default_ok!r}")
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "sep", sep or None)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "default_ok", default_ok)
        object.__setattr__(self, "note", _note_fields(note))
        if not isinstance(outside, bool):
            raise GuardrailUsageError(f"Id(outside=) is True or False, not {outside!r}")
        object.__setattr__(self, "outside", outside)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """The schema of the annotated type, with the instruction and the kind added."""
        json_schema = handler.resolve_ref_schema(handler(schema))
        json_schema[KIND_KEY] = self.kinds[0] if len(self.kinds) == 1 else list(self.kinds)
        if self.sep:
            json_schema[SEP_KEY] = self.sep
        describe_node(json_schema)
        return json_schema


def _note_fields(note: object) -> tuple[str, ...] | bool:
    """``Id(note=)`` checked: True (the default fields), False (none), or field paths."""
    if isinstance(note, bool):
        return note
    if (
        isinstance(note, Sequence)
        and not isinstance(note, (str, bytes))
        and all(isinstance(field, str) and field for field in note)
    ):
        return tuple(cast(Sequence[str], note))
    raise GuardrailUsageError(
        f"Id(note=) is a list of field paths beside the id (['items[*].name', 'status']), "
        f"True (the default fields) or False (no note), not {note!r}"
    )


@dataclass(frozen=True)
class ParamSpec:
    """One identifier parameter: where it sits in the arguments and which kinds it accepts.

    ``default_ok`` exempts the function's default for the parameter from the check.
    """

    path: Path
    kinds: tuple[str, ...]
    sep: str | None = None
    default_ok: bool = False
    #: A role template for the ids a ``mints=`` parameter brings into existence.
    role: str | None = None

    @property
    def name(self) -> str:
        """The top-level argument the path starts from."""
        return self.path.head or self.path.text

    @property
    def simple(self) -> bool:
        """A plain top-level argument (the common case, read with one dict look-up)."""
        return len(self.path.steps) == 1 and self.sep is None


@dataclass(frozen=True)
class Producer:
    """One place in a result that holds identifiers of one kind."""

    kind: str
    path: Path | None = None
    regex: re.Pattern[str] | None = None
    role: str | None = None
    status: str | None = None
    #: The fields beside the id its note is read from; None: the default fields; (): no note.
    note: tuple[Path, ...] | None = None
    #: An outside party chooses the values (see :class:`Id`).
    outside: bool = False

    @property
    def source(self) -> str:
        """The declaration as written: a path, or ``re:PATTERN``."""
        if self.regex is not None:
            return f"re:{self.regex.pattern}"
        return self.path.text if self.path is not None else "$"


@dataclass(frozen=True)
class ToolSpec:
    """Everything the guard knows about one tool, compiled.

    ``verifies`` is as declared (see :data:`Verifies`); ``confirms_arguments``
    says whether a success confirms every id argument the call took.
    ``defaults`` holds, by parameter name, the function defaults an omitted
    id argument takes, which are checked like arguments (read at decoration).
    """

    name: str
    params: tuple[ParamSpec, ...] = ()
    produces: tuple[Producer, ...] = ()
    mints: tuple[ParamSpec, ...] = ()
    effect: Effect = "write"
    verifies: Verifies = True
    description: str = ""
    positions: Mapping[str, int] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: A read that sends data out (fetching a URL): its ids are weighed as a write's are.
    egress: bool = False
    #: An outside party writes its results (a web page): every id they hold keeps that mark.
    outside: bool = False
    #: What its results look like when it failed (its own ``fails=``, else the guard's rule).
    fails: FailureRule = DEFAULT_FAILS

    @property
    def confirms_arguments(self) -> bool:
        """A ``read`` declared ``verifies="on_success"``: any success confirms its id arguments."""
        return self.effect == "read" and self.verifies == ON_SUCCESS


# -- declarations given as data -------------------------------------------------------------

ParamDecl = str | Sequence[str] | Id | Mapping[str, Any]
ProducerDecl = str | Id | Mapping[str, Any]


class DeclareOptions(TypedDict, total=False):
    """What a tool is besides its name: the options of ``Guard.declare``, ``tool`` and ``patch``.

    A manifest's tool entry takes the same (as data: no ``Id`` objects).

    Attributes:
        ids: Identifier parameters: a parameter path (``order_id``,
            ``items[*].id``) to its kind, a list of kinds, or
            ``{"kind": ..., "sep": ..., "default_ok": ...}`` (for ``tool``,
            beyond the ones annotated ``Id`` in the signature).
        produces: Result paths (``orders[*].order_id``, ``$``,
            ``re:PATTERN``) to the kind of the ids they hold (or
            ``{"kind": ..., "status": ..., "role": ..., "note": [...]}``, or
            an ``Id``); for ``tool``, beyond the result type's ``Id`` fields.
        mints: Parameters whose values a successful ``write`` brings into
            existence (they enter the ledger verified; ``{"kind": ...,
            "role": ...}`` or ``Id(kind, role=...)`` names them).
        effect: ``"read"`` or ``"write"``; a tool with none is a write (the
            strict side).
        verifies: How a successful ``read`` verifies a user-typed id it took:
            only when a declared result field returns it (``True``, the
            default; ``False`` means the same), or on any success
            (``"on_success"``, for a read that fails for unknown ids).
        description: The tool's description (default for ``tool``: the
            function's docstring); ids of a kind's shape quoted in it are
            placeholders, refused as ``example``.
        egress: A ``read`` that sends data out even though it changes
            nothing (fetching a URL, loading an image): the ids it takes are
            weighed by their kinds' ``user_typed``, ``mentions`` and
            ``outside`` policies, as a write's are (default: False).
        outside: An outside party writes what the tool returns (a web page,
            a received e-mail): every id its results hold, declared or
            mentioned, keeps the outside mark (default: False).
        fails: What a result of the tool looks like when it failed, for a
            tool that reports failure in its result rather than by raising:
            a text prefix (``"Error:"``), a pattern (``"re:^Failed"``), a
            field and its value (``{"field": "status", "value": "error"}``),
            a function ``(result) -> bool``, a list of these, or ``False``
            (no rule). Not given: the guard's rule (by default, a text that
            starts ``Error:``). A failed result harvests, verifies and
            mints nothing (see :mod:`guardrail._declare.failure`).
    """

    ids: Mapping[str, ParamDecl] | None
    produces: Mapping[str, ProducerDecl] | None
    mints: Mapping[str, ParamDecl] | None
    effect: Effect | None
    verifies: Verifies
    description: str | None
    egress: bool
    outside: bool
    fails: Fails


class ToolOptions(DeclareOptions, total=False):
    """The options of ``Guard.tool`` and ``Guard.patch``: :class:`DeclareOptions` and ``name``.

    Attributes:
        name: The tool's name, as the model calls it (default: the
            function's ``__name__``).
    """

    name: str | None


def check_options(call: str, options: Mapping[str, object], allowed: frozenset[str]) -> None:
    """Refuse an option ``call`` does not take, naming the ones it does (a ``TypeError``)."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        names = ", ".join(sorted(allowed))
        raise TypeError(f"{call} got an unexpected option {unknown[0]!r}; its options: {names}")


def _as_id(decl: object, *, tool: str, where: str) -> Id:
    if isinstance(decl, Id):
        return decl
    if isinstance(decl, str) or (
        isinstance(decl, Sequence) and not isinstance(decl, (str, bytes, Mapping))
    ):
        return Id(cast(Sequence[str], decl))
    if isinstance(decl, Mapping):
        unknown = set(decl) - {
            "kind",
            "kinds",
            "sep",
            "role",
            "status",
            "default_ok",
            "note",
            "outside",
        }
        if unknown:
            raise GuardrailUsageError(
                f"tool {tool!r}: {where}: unknown option(s) {sorted(unknown)}; "
                "use kind (or kinds), sep, role, status, note, default_ok, outside",
                tool=tool,
                param=where,
            )
        kinds = decl.get("kinds", decl.get("kind"))
        if kinds is None:
            raise GuardrailUsageError(
                f"tool {tool!r}: {where}: names no kind", tool=tool, param=where
            )
        return Id(
            kinds,
            sep=decl.get("sep"),
            role=decl.get("role"),
            status=decl.get("status"),
            default_ok=decl.get("default_ok", False),
            note=decl.get("note", True),
            outside=decl.get("outside", False),
        )
    raise GuardrailUsageError(
        f"tool {tool!r}: {where}: expected a kind name, a list of kind names or Id(...), "
        f"got {decl!r}",
        tool=tool,
        param=where,
    )


def param_specs(decls: Mapping[str, ParamDecl] | None, *, tool: str) -> list[ParamSpec]:
    """Compile ``{"order_id": "order", "items[*].sku": ["sku", "item"]}``."""
    specs: list[ParamSpec] = []
    for where, decl in (decls or {}).items():
        marker = _as_id(decl, tool=tool, where=where)
        path = compile_path(where, tool=tool, param=where)
        if path.head is None:
            raise GuardrailUsageError(
                f"tool {tool!r}: parameter path {where!r} must start with a parameter name",
                tool=tool,
                param=where,
            )
        specs.append(
            ParamSpec(
                path=path,
                kinds=marker.kinds,
                sep=marker.sep,
                default_ok=marker.default_ok,
                role=marker.role,
            )
        )
    return specs


def producers(decls: Mapping[str, ProducerDecl] | None, *, tool: str) -> list[Producer]:
    """Compile ``{"orders[*].order_id": "order", "re:(cert_\\d+)": "certificate"}``."""
    compiled: list[Producer] = []
    for where, decl in (decls or {}).items():
        marker = _as_id(decl, tool=tool, where=where)
        if len(marker.kinds) != 1:
            raise GuardrailUsageError(
                f"tool {tool!r}: result path {where!r} must produce exactly one kind",
                tool=tool,
                param=where,
            )
        kind = marker.kinds[0]
        if where.startswith("re:"):
            try:
                regex = re.compile(where[3:])
            except re.error as exc:
                raise GuardrailUsageError(
                    f"tool {tool!r}: bad regex producer {where!r}: {exc}", tool=tool, param=where
                ) from None
            _note_paths(marker, None, tool=tool, where=where)  # a regex has no record beside it
            compiled.append(
                Producer(kind=kind, regex=regex, role=marker.role, note=(), outside=marker.outside)
            )
        else:
            path = compile_path(where, tool=tool, param=where)
            if marker.status is not None and path.steps and path.steps[-1][0] not in (KEY, KEYS):
                raise GuardrailUsageError(
                    f"tool {tool!r}: a status is read beside an id, so {where!r} must end in "
                    "a key or '.~'",
                    tool=tool,
                    param=where,
                )
            compiled.append(_producer(kind, path, marker, tool=tool))
    return compiled


def _producer(kind: str, path: Path, marker: Id, *, tool: str | None) -> Producer:
    """The producer of ``kind`` at ``path``, its note fields compiled."""
    note = _note_paths(marker, path, tool=tool, where=path.text)
    return Producer(
        kind=kind,
        path=path,
        role=marker.role,
        status=marker.status,
        note=note,
        outside=marker.outside,
    )


def _note_paths(
    marker: Id, path: Path | None, *, tool: str | None, where: str
) -> tuple[Path, ...] | None:
    """The compiled note fields of a producer: None for the default ones, () for none.

    A note is read from the record holding the id, so only a path ending in a
    key (or ``.~``) has one; elsewhere the default is no note and declared
    fields are an error.
    """
    beside = path is not None and bool(path.steps) and path.steps[-1][0] in (KEY, KEYS)
    if marker.note is True:
        return None if beside else ()
    if marker.note is False or not marker.note:
        return ()
    if not beside:
        raise GuardrailUsageError(
            f"tool {tool!r}: a note is read from the record holding the id, so {where!r} "
            "must end in a key or '.~' (not '$', '[*]' or 're:')",
            tool=tool,
            param=where,
        )
    return tuple(compile_path(field, tool=tool, param=f"{where} note") for field in marker.note)


# -- declarations read from type annotations ------------------------------------------------

_NONE = type(None)


def _ids_in(metadata: Iterable[object]) -> Id | None:
    for item in metadata:
        if isinstance(item, Id):
            return item
    return None


def _text_of(steps: Sequence[Step]) -> str:
    text = ""
    for op, arg in steps:
        if op == KEY:
            text += f".{arg}" if text else str(arg)
        elif op == EACH:
            text += "[*]"
        elif op == VALUES:
            text += ".*" if text else "*"
        elif op == KEYS:
            text += ".~" if text else "~"
    return text or "$"


def _is_structured(tp: object) -> bool:
    return isinstance(tp, type) and (
        hasattr(tp, "model_fields")
        or hasattr(tp, "__dataclass_fields__")
        or (issubclass(tp, dict) and hasattr(tp, "__annotations__") and hasattr(tp, "__total__"))
    )


def annotation_ids(
    tp: object, prefix: tuple[Step, ...] = (), _seen: frozenset[object] = frozenset()
) -> list[tuple[Path, Id]]:
    """Every ``Id`` reachable in a type: ``(path, marker)`` pairs, paths rooted at ``prefix``.

    Walks ``Annotated``, optionals and unions, lists, tuples, sets, dicts
    (an ``Id`` on the key type is ``.~``), pydantic models, dataclasses and
    TypedDicts. A type that refers to itself is walked once.
    """
    found: list[tuple[Path, Id]] = []
    origin = get_origin(tp)
    if origin is Annotated:
        inner, *metadata = get_args(tp)
        marker = _ids_in(metadata)
        if marker is not None:
            steps = prefix
            if get_origin(inner) in (list, tuple, set, frozenset) or inner in (list, tuple, set):
                steps = (*prefix, (EACH, None))
            found.append((Path(_text_of(steps), steps), marker))
            return found
        return annotation_ids(inner, prefix, _seen)
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            if arg is not _NONE:
                found.extend(annotation_ids(arg, prefix, _seen))
        return found
    if origin in (list, tuple, set, frozenset, Sequence, typing.Sequence, Iterable):
        for arg in get_args(tp):
            if arg is not Ellipsis:
                found.extend(annotation_ids(arg, (*prefix, (EACH, None)), _seen))
        return found
    if origin in (dict, Mapping, typing.Mapping):
        args = get_args(tp)
        if len(args) == 2:
            key_tp, value_tp = args
            if get_origin(key_tp) is Annotated:
                marker = _ids_in(get_args(key_tp)[1:])
                if marker is not None:
                    steps = (*prefix, (KEYS, None))
                    found.append((Path(_text_of(steps), steps), marker))
            found.extend(annotation_ids(value_tp, (*prefix, (VALUES, None)), _seen))
        return found
    if _is_structured(tp) and tp not in _seen:
        seen = _seen | {tp}
        model_fields = getattr(tp, "model_fields", None)
        if isinstance(model_fields, Mapping):
            # Pydantic has resolved forward references already; its metadata holds the Id.
            for name, info in model_fields.items():
                hint = info.annotation
                if info.metadata:
                    hint = Annotated[(hint, *info.metadata)]
                found.extend(annotation_ids(hint, (*prefix, (KEY, name)), seen))
            return found
        try:
            hints = typing.get_type_hints(tp, include_extras=True)
        except Exception as exc:
            raise GuardrailUsageError(
                f"cannot read the annotations of {getattr(tp, '__qualname__', tp)} ({exc}); "
                "define the types it refers to at module level"
            ) from None
        for name, hint in hints.items():
            if not name.startswith("_"):
                found.extend(annotation_ids(hint, (*prefix, (KEY, name)), seen))
    return found


def signature_ids(fn: Callable[..., Any]) -> tuple[list[ParamSpec], list[Producer]]:
    """The ``Id`` annotations of a function: its identifier parameters and its result fields."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise GuardrailUsageError(
            f"tool {getattr(fn, '__name__', fn)!r}: cannot read its annotations ({exc}); "
            "declare its ids with ids=/produces= instead",
            tool=getattr(fn, "__name__", None),
        ) from None
    params: list[ParamSpec] = []
    produced: list[Producer] = []
    for name, hint in hints.items():
        if name == "return":
            produced = _producers_of(annotation_ids(hint), tool=getattr(fn, "__name__", None))
            continue
        for path, marker in annotation_ids(hint, ((KEY, name),)):
            params.append(
                ParamSpec(
                    path=path, kinds=marker.kinds, sep=marker.sep, default_ok=marker.default_ok
                )
            )
    return params, produced


def _producers_of(pairs: Iterable[tuple[Path, Id]], *, tool: str | None) -> list[Producer]:
    produced = []
    for path, marker in pairs:
        if len(marker.kinds) != 1:
            raise GuardrailUsageError(
                f"tool {tool!r}: result field {path.text!r} must produce exactly one kind, "
                f"not {list(marker.kinds)}",
                tool=tool,
                param=path.text,
            )
        produced.append(_producer(marker.kinds[0], path, marker, tool=tool))
    return produced


@functools.lru_cache(maxsize=512)
def type_producers(tp: type) -> tuple[Producer, ...]:
    """Producers for a result that is an instance of ``tp``, read from its annotations."""
    return tuple(_producers_of(annotation_ids(tp), tool=tp.__name__))
