"""A runtime's tools as the guard sees them: declared by their ``Id`` marks, bound to the schema.

Every adapter meets the tools of its runtime the same way, through
:func:`bind` (cached per adapter by :class:`Bindings`):

- **The marks are the declaration.** ``Annotated[str, Id("order")]`` puts
  ``x-guardrail-kind`` into the JSON schema pydantic writes for a tool's
  parameters, which is the schema every runtime builds from the function
  (and MCP servers publish); a result type's ``Id`` fields name the ids a
  tool returns. A tool the guard does not know is declared from them, as a
  ``write`` (the strict side). A tool it knows (``guard.declare``, a
  manifest, ``@guard.tool``) must agree: a parameter marked but not checked
  by the declaration is a usage error, not a gap.
- **The check reads what the model sent, by the name it sent.** Every
  declared id parameter must be one the model can send: a path the schema
  the model is given does not hold is a usage error at the tool's first
  use. Where the runtime validates arguments with a pydantic model (or a
  signature) whose fields have aliases, the check reads the value under
  whichever name the model used, and the tool gets only the value the check
  saw, under that name.
- **What the model reads says how to fill an id.** The schema the model is
  given carries, on every declared id parameter, the instruction to copy the
  value exactly (:func:`guardrail.describe_ids`), also where a framework's
  docstring parsing replaced the description, and where the declaration
  came from ``guard.declare`` rather than a mark.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from guardrail._declare.describe import describe_ids, instruct
from guardrail._declare.paths import EACH, INDEX, KEY, KEYS, VALUES, Path, Step
from guardrail._declare.spec import Id, ToolSpec, annotation_ids
from guardrail._guard.facade import internals
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.marks import MAX_DEPTH, follow, kinds_in, marks_in, plain

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = ["Bindings", "Bound", "bind", "kinds_in", "marks_in"]

# -- the names a runtime accepts for a field ----------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """One argument field: every name the runtime's validator may read it by, and its type."""

    keys: tuple[str, ...]
    annotation: Any


def _names(name: str, info: Any) -> tuple[str, ...]:
    """A field's names: its validation alias (or choices), its alias, its own name."""
    keys: list[str] = []
    validation = getattr(info, "validation_alias", None)
    if isinstance(validation, str):
        keys.append(validation)
    else:
        choices = getattr(validation, "choices", None) or ()
        keys.extend(choice for choice in choices if isinstance(choice, str))
    alias = getattr(info, "alias", None)
    if isinstance(alias, str):
        keys.append(alias)
    keys.append(name)
    return tuple(dict.fromkeys(keys))


def _field_info(metadata: Iterable[object]) -> Any:
    for item in metadata:
        if type(item).__name__ == "FieldInfo":
            return item
    return None


def _fields(source: Any) -> dict[str, _Field] | None:
    """The fields of a pydantic model class or of a function's parameters, by every name.

    None where ``source`` is neither (the schema is then all there is to go by).
    """
    model_fields = getattr(source, "model_fields", None) if isinstance(source, type) else None
    if isinstance(model_fields, Mapping):
        by_key: dict[str, _Field] = {}
        for name, info in model_fields.items():
            hint = info.annotation
            field = _Field(_names(name, info), hint)
            for key in field.keys:
                by_key.setdefault(key, field)
        return by_key
    if callable(source) and not isinstance(source, type):
        try:
            signature = inspect.signature(source)
            hints = typing.get_type_hints(source, include_extras=True)
        except (TypeError, ValueError, NameError):
            return None
        by_key = {}
        for name, parameter in signature.parameters.items():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            hint = hints.get(name, Any)
            info = _field_info(get_args(hint)[1:]) if get_origin(hint) is Annotated else None
            field = _Field(_names(name, info), hint)
            for key in field.keys:
                by_key.setdefault(key, field)
        return by_key
    return None


def _inner(tp: Any, step: str) -> Any:
    """The type a step into a value of type ``tp`` reaches (a list's item, a map's value)."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        options = [arg for arg in get_args(tp) if arg is not type(None)]
        tp = options[0] if len(options) == 1 else None
    if tp is None:
        return None
    args = get_args(tp)
    if step == EACH and args:
        return args[0]
    if step == VALUES and len(args) == 2:
        return args[1]
    return tp if step == KEY else None


# -- binding a declaration to the schema the model sees -----------------------------------------


@dataclass(frozen=True)
class _Rename:
    """At one object of the arguments: a declared key, every name the model may send it by."""

    declared: str
    #: The schema's name first, then the field's other names.
    keys: tuple[str, ...]
    below: tuple[_Node, ...] = ()


@dataclass(frozen=True)
class _Across:
    """At a list (``[*]``, ``[n]``) or a map (``.*``): the same renames in every element."""

    op: str
    below: tuple[_Node, ...]


_Node = _Rename | _Across


def _schema_node(root: Any, node: Any) -> Any:
    """``node`` with its local ``$ref`` followed (once per level)."""
    seen = 0
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < MAX_DEPTH:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            return None
        node = follow(root, ref)
        seen += 1
    return node


def _options(root: Any, node: Any) -> list[Mapping[str, Any]]:
    """The schema node and the branches of its ``anyOf``/``oneOf``/``allOf``, refs followed."""
    node = _schema_node(root, node)
    if not isinstance(node, Mapping):
        return []
    found = [node]
    for branch in ("anyOf", "oneOf", "allOf"):
        for option in node.get(branch) or ():
            found.extend(_options(root, option))
    return found


def _open(node: Mapping[str, Any]) -> bool:
    """Whether an object schema takes keys it does not list (or lists nothing at all)."""
    extra = node.get("additionalProperties")
    return (
        extra is True
        or isinstance(extra, Mapping)
        or ("properties" not in node and node.get("type") in (None, "object"))
    )


class _Unresolved(Exception):
    """A declared path the schema cannot hold: what was looked for, and what was there."""

    def __init__(self, wanted: str, offered: Sequence[str]) -> None:
        super().__init__(wanted)
        self.wanted = wanted
        self.offered = list(offered)


def _resolve(
    root: Any, node: Any, steps: Sequence[Step], source: Any
) -> tuple[list[Step], tuple[_Node, ...]]:
    """A declared path read in the schema: its steps by the model's names, and the renames.

    Raises :class:`_Unresolved` where a key is neither in the schema nor a
    name of a field whose schema name is.
    """
    if not steps:
        return [], ()
    (op, arg), rest = steps[0], steps[1:]
    options = _options(root, node)
    if op == KEY:
        key = str(arg)
        fields = _fields(source)
        field = fields.get(key) if fields is not None else None
        names = field.keys if field is not None else (key,)
        for option in options:
            properties = option.get("properties")
            listed = properties if isinstance(properties, Mapping) else {}
            wire = next((name for name in names if name in listed), None)
            if wire is None:
                continue
            inner = _inner(field.annotation, KEY) if field is not None else None
            wire_rest, lower = _resolve(root, listed[wire], rest, inner)
            keys = (wire, *(name for name in names if name != wire))
            if len(keys) > 1 or lower:
                return [(KEY, wire), *wire_rest], (_Rename(key, keys, lower),)
            return [(KEY, wire), *wire_rest], ()
        if not options or any(_open(option) for option in options):
            return [(op, arg), *rest], ()  # a free-form object: nothing to hold the path to
        offered = [
            name
            for option in options
            for name in (option.get("properties") or {})
            if isinstance(name, str)
        ]
        raise _Unresolved(key, offered)
    if op == KEYS:
        return [(op, arg), *rest], ()
    key_of = "items" if op in (EACH, INDEX) else "additionalProperties"
    child = next(
        (option[key_of] for option in options if isinstance(option.get(key_of), Mapping)), None
    )
    inner = _inner(source, EACH if op == INDEX else op) if source is not None else None
    wire_rest, lower = _resolve(root, child, rest, inner)
    return [(op, arg), *wire_rest], (_Across(op, lower),) if lower else ()


def _text(steps: Sequence[Step]) -> str:
    text = ""
    for op, arg in steps:
        if op == KEY:
            key = str(arg)
            part = key if plain(key) else f"[{json.dumps(key)}]"
            text += part if not text or part.startswith("[") else f".{part}"
        elif op == EACH:
            text += "[*]"
        elif op == INDEX:
            text += f"[{arg}]"
        elif op == VALUES:
            text += ".*" if text else "*"
        elif op == KEYS:
            text += ".~" if text else "~"
    return text or "$"


# -- the arguments: the model's names in, the declared ones to check, the model's back out ------


def _merge(nodes: Iterable[_Node]) -> tuple[_Node, ...]:
    """The renames of several paths, one per declared key (and per kind of step below)."""
    renames: dict[str, _Rename] = {}
    across: dict[str, _Across] = {}
    for node in nodes:
        if isinstance(node, _Rename):
            held = renames.get(node.declared)
            renames[node.declared] = (
                node
                if held is None
                else _Rename(held.declared, held.keys, _merge((*held.below, *node.below)))
            )
        else:
            held_across = across.get(node.op)
            across[node.op] = (
                node
                if held_across is None
                else _Across(node.op, _merge((*held_across.below, *node.below)))
            )
    return (*renames.values(), *across.values())


def _parsed(value: Any) -> Any:
    """A list or object the model sent as JSON text, parsed (the check reads it so too)."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _to_check(value: Any, nodes: tuple[_Node, ...]) -> tuple[Any, Any]:
    """``value`` with the model's names turned into the declared ones; how to turn them back."""
    value = _parsed(value)
    for node in nodes:
        if isinstance(node, _Across):
            if node.op == VALUES and isinstance(value, Mapping):
                pairs = {key: _to_check(item, node.below) for key, item in value.items()}
                return (
                    {key: pair[0] for key, pair in pairs.items()},
                    ("map", {key: pair[1] for key, pair in pairs.items()}),
                )
            if node.op != VALUES and isinstance(value, list):
                done = [_to_check(item, node.below) for item in value]
                return [pair[0] for pair in done], ("list", [pair[1] for pair in done])
    if not isinstance(value, Mapping):
        return value, None
    out = dict(value)
    undo: dict[str, tuple[str, Any]] = {}
    for node in nodes:
        if not isinstance(node, _Rename):
            continue
        sent = [key for key in node.keys if key in out]
        if not sent:
            continue
        chosen = out[sent[0]]
        for key in sent:
            del out[key]  # the tool gets the one value the check sees
        chosen, below = _to_check(chosen, node.below) if node.below else (chosen, None)
        out[node.declared] = chosen
        undo[node.declared] = (sent[0], below)
    return out, undo or None


def _to_run(value: Any, undo: Any) -> Any:
    """The checked arguments under the names the model sent them by."""
    if undo is None:
        return value
    if isinstance(undo, tuple):
        how, inner = undo
        if how == "list" and isinstance(value, list):
            return [_to_run(item, below) for item, below in zip(value, inner, strict=False)]
        if how == "map" and isinstance(value, Mapping):
            return {key: _to_run(item, inner.get(key)) for key, item in value.items()}
        return value
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    for declared, (sent, below) in undo.items():
        if declared in out:
            out[sent] = _to_run(out.pop(declared), below)
    return out


@dataclass(frozen=True)
class Bound:
    """One tool of a runtime, bound: its spec (None: undeclared) and what the model is given.

    ``schema`` is the parameter schema to give the model (every id parameter
    described); ``to_check`` turns the arguments the model sent into the ones
    the guard checks, ``to_run`` the verdict's arguments into the ones the
    tool runs with. Both are the identity for the usual tool, whose model
    names are its declared ones.
    """

    name: str
    spec: ToolSpec | None
    schema: Mapping[str, Any] | None
    renames: tuple[_Node, ...] = ()
    #: The schema the model would be given without the guard (to tell whether it changed).
    given: Any = None

    def to_check(self, arguments: Any) -> tuple[Any, Any]:
        """The arguments to check (declared names), and how :meth:`to_run` turns them back."""
        if not self.renames:
            return arguments, None
        return _to_check(arguments, self.renames)

    def to_run(self, checked: Any, undo: Any, sent: Any) -> Any:
        """The arguments to run the tool with: the verdict's (``checked``) by the model's names.

        ``sent`` is what the model sent: returned as it is where the verdict gave no
        arguments. The check never rewrites a value: what differs from ``sent`` is
        only the shape, an id sent under two names of one field reaching the tool
        once, under the name the check read it by.
        """
        if checked is None:
            return sent
        if undo is None:
            return checked
        return _to_run(checked, undo)


def _declared_paths(spec: ToolSpec) -> list[tuple[Path, tuple[str, ...], str | None]]:
    return [(param.path, param.kinds, param.sep) for param in (*spec.params, *spec.mints)]


def _return_producers(function: Callable[..., Any] | None) -> dict[str, Id]:
    """``produces=`` from the ``Id`` fields of a return type ({}: none, or unreadable)."""
    if function is None:
        return {}
    try:
        hint = typing.get_type_hints(function, include_extras=True).get("return")
    except Exception:  # a runtime's tool whose annotations name types not in scope
        return {}
    if hint is None:
        return {}
    produced: dict[str, Id] = {}
    for path, marker in annotation_ids(hint):
        if len(marker.kinds) == 1:
            produced[path.text] = Id(
                marker.kinds[0], role=marker.role, status=marker.status, note=marker.note
            )
    return produced


def bind(
    guard: Guard,
    name: str,
    schema: Mapping[str, Any] | None,
    *,
    runtime: str,
    source: Any = None,
    function: Callable[..., Any] | None = None,
) -> Bound:
    """Bind tool ``name`` of a runtime to the guard: declare it from its marks, check its paths.

    ``schema`` is the JSON schema of the tool's parameters as the model is
    given it (None: the runtime shows none); ``source`` the pydantic model
    class or the function whose fields the runtime validates the arguments
    with (for their aliases); ``function`` the function whose return type's
    ``Id`` fields the tool's results have. ``runtime`` names the runtime in
    the declaration's origin and in errors.

    Raises :class:`GuardrailUsageError` where the declaration and the tool
    disagree: an id parameter the model cannot send (not in ``schema``), or
    one the schema marks that the guard's declaration does not check.
    """
    marks = [mark for mark in marks_in(schema) if mark.path != "$"] if schema else []
    spec = guard.specs.get(name)
    if spec is None:
        produced = _return_producers(function)
        if marks or produced:
            spec = internals(guard).registry.declare(
                name,
                origin=f"the Id annotations of the {runtime} tool {name!r}",
                ids={mark.path: mark.declaration() for mark in marks},
                produces=produced,
                effect="write",
            )
    if spec is None:
        return Bound(name, None, describe_ids(schema) if schema else None, (), schema)
    if not isinstance(schema, Mapping):
        return Bound(name, spec, None, (), schema)
    renames: list[_Node] = []
    wired: dict[str, tuple[tuple[str, ...], str | None, list[Step]]] = {}
    for path, kinds, sep in _declared_paths(spec):
        try:
            wire, found = _resolve(schema, schema, path.steps, source)
        except _Unresolved as missing:
            offered = ", ".join(repr(key) for key in dict.fromkeys(missing.offered)) or "none"
            raise GuardrailUsageError(
                f"tool {name!r}: the guard checks the id parameter {path.text!r}, but the "
                f"{runtime} tool's schema, which is what the model is given, has no "
                f"{missing.wanted!r} there (it has: {offered}). The model cannot send it, and "
                "the id it sends under another name would not be checked. Declare the path "
                "by the names the schema uses.",
                tool=name,
                param=path.text,
            ) from None
        renames.extend(found)
        wired[_text(wire)] = (kinds, sep, wire)
    for mark in marks:
        held = wired.get(mark.path)
        if held is None or set(held[0]) != set(mark.kinds):
            checks = ", ".join(f"{text} ({'/'.join(k)})" for text, (k, _, _) in wired.items())
            marked = "/".join(mark.kinds)
            raise GuardrailUsageError(
                f"tool {name!r}: its parameter {mark.path!r} is marked Id({marked!r}) "
                f"but the guard's declaration of {name!r} "
                + (
                    f"checks it as {'/'.join(held[0])!r}"
                    if held is not None
                    else f"does not check it (it checks: {checks or 'nothing'})"
                )
                + ". Declare the tool with every id its parameters mark, or drop the mark.",
                tool=name,
                param=mark.path,
            )
    described = describe_ids(schema)
    for kinds, sep, steps in wired.values():
        _instruct_at(described, steps, kinds, sep)
    return Bound(name, spec, described, _merge(renames), schema)


def _instruct_at(
    schema: dict[str, Any], steps: Sequence[Step], kinds: Sequence[str], sep: str | None
) -> None:
    """Put the instruction on the schema node(s) a path (by the model's names) reaches."""
    nodes: list[Any] = [schema]
    for op, arg in steps:
        reached: list[Any] = []
        for node in nodes:
            for option in _options(schema, node):
                if op == KEY:
                    properties = option.get("properties")
                    if isinstance(properties, Mapping) and str(arg) in properties:
                        reached.append(properties[str(arg)])
                elif op in (EACH, INDEX) and isinstance(option.get("items"), Mapping):
                    reached.append(option["items"])
                elif op == VALUES and isinstance(option.get("additionalProperties"), Mapping):
                    reached.append(option["additionalProperties"])
        nodes = reached
    for node in nodes:
        if isinstance(node, dict) and node is not schema:
            instruct(node, kinds, sep)


class Bindings:
    """The tools of one adapter, bound once each and again when their spec or schema changes."""

    def __init__(self, guard: Guard, runtime: str) -> None:
        self.guard = guard
        self.runtime = runtime
        self._bound: dict[str, Bound] = {}

    def latest(self, name: str) -> Bound | None:
        """The tool as last bound, while its spec is the guard's (None: bind it first)."""
        held = self._bound.get(name)
        return held if held is not None and held.spec is self.guard.specs.get(name) else None

    def get(
        self,
        name: str,
        schema: Mapping[str, Any] | None,
        *,
        source: Any = None,
        function: Callable[..., Any] | None = None,
    ) -> Bound:
        """The tool bound (see :func:`bind`), from the cache while nothing changed."""
        held = self._bound.get(name)
        if (
            held is not None
            and held.spec is self.guard.specs.get(name)
            and (held.given is schema or held.given == schema)
        ):
            return held
        bound = bind(
            self.guard, name, schema, runtime=self.runtime, source=source, function=function
        )
        if len(self._bound) >= 10_000:  # a model inventing tool names gains no memory
            self._bound.clear()
        self._bound[name] = bound
        return bound
