"""How an identifier parameter is described to the model in a tool's JSON schema.

Every identifier's schema carries its kind (``x-guardrail-kind``) and an
instruction to copy the value exactly from a tool result or the ID LEDGER;
these helpers write that instruction, after any description of the user's
own, wherever a schema marks an identifier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from guardrail.errors import GuardrailUsageError

#: The JSON schema key naming an identifier's kind (a list where it accepts several).
KIND_KEY = "x-guardrail-kind"
#: The JSON schema key holding the separator of an identifier parameter that packs several.
SEP_KEY = "x-guardrail-sep"
#: What every identifier's description tells the model; also how an added one is known.
ID_INSTRUCTION = "copy the value exactly from a tool result or the ID LEDGER, never from memory"


def id_description(kinds: Sequence[str], sep: str | None = None) -> str:
    """The instruction an identifier's JSON schema carries, naming its kinds."""
    text = f"Identifier ({' or '.join(kinds)}): {ID_INSTRUCTION}."
    if sep:
        text += f" Several are separated by {sep!r}."
    return text


def describe_node(node: dict[str, Any]) -> None:
    """Add the instruction to the description of one identifier schema, after the user's own."""
    kinds = node.get(KIND_KEY)
    if isinstance(kinds, str):
        kinds = [kinds]
    if not isinstance(kinds, list) or not all(isinstance(kind, str) for kind in kinds):
        return
    sep = node.get(SEP_KEY)
    instruct(node, kinds, sep if isinstance(sep, str) else None)


def instruct(node: dict[str, Any], kinds: Sequence[str], sep: str | None = None) -> None:
    """Put the instruction for an id of ``kinds`` in a schema node's description, after its own.

    Used for identifiers that a declaration names but the schema does not
    mark (``guard.declare``, a manifest): the model must read it all the same.
    """
    ours = id_description(kinds, sep)
    own = node.get("description")
    if not isinstance(own, str) or not own.strip():
        node["description"] = ours
    elif ID_INSTRUCTION not in own:
        own = own.rstrip()
        node["description"] = f"{own}{'' if own.endswith(('.', '!', '?')) else '.'} {ours}"


def describe_ids(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a JSON schema in which every identifier's description says how to fill it.

    pydantic writes the instruction when it builds a schema from
    ``Annotated[str, Id(...)]``, but a field description set afterwards (as
    frameworks do with a docstring's ``Args:``) replaces it; the
    ``x-guardrail-kind`` stays. This puts the instruction back after that
    description, everywhere in the schema (nested objects, list items,
    ``$defs``), and leaves everything else as it was. Call it on a tool's
    parameter schema before it goes to the model; calling it twice adds
    nothing.
    """
    if not isinstance(schema, Mapping):
        raise GuardrailUsageError(
            f"describe_ids takes a JSON schema (a mapping), not {type(schema).__name__}"
        )
    return cast("dict[str, Any]", _described(schema))


def _described(value: Any) -> Any:
    """:func:`describe_ids` on any JSON value: mappings and lists copied, the rest as is."""
    if isinstance(value, Mapping):
        node = {key: _described(item) for key, item in value.items()}
        if KIND_KEY in node:
            describe_node(node)
        return node
    if isinstance(value, list):
        return [_described(item) for item in value]
    return value
