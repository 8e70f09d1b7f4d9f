"""Manifests: kinds and tool specs as data (JSON or TOML), for tools with no Python function.

A manifest is an object with two tables::

    [kinds.order]
    pattern = "#?W\\d{7}"
    normalize = ["strip", "prefix:#"]
    examples = ["#W0000000"]

    [tools.get_order]
    effect = "read"
    ids = { order_id = "order" }
    produces = { "items[*].item_id" = "item" }

A kind takes ``pattern``, ``normalize``, ``examples``, ``enforce``,
``description``, the approval policies ``user_typed``, ``mentions``,
``outside`` and ``operator``, and the operator's own ids of the kind
(``operator_ids``: a list, or a loader as ``"module:function"``, run per
``operator_per``: ``"guard"`` or ``"session"``; see ``Guard.add_kind``), or
``like`` (a ready-made kind: ``"email"``, ``"uuid"``, ``"url"``, ``"phone"``,
``"phone:+1"``, ``"iban"``, ``"prefixed:cus_"``) in place of ``pattern`` and
``normalize``. A tool takes ``effect`` (``read`` or ``write``;
absent means ``write``), ``egress`` (a read that sends data out), ``outside``
(an outside party writes its results: a web page, a received e-mail), ``verifies``
(``true``, ``false`` or ``"on_success"``, see ``Guard.tool``), ``description``,
``ids`` and ``mints`` (parameter path -> kind, list of kinds, or ``{kind, sep}``;
a mint also ``role``), ``produces`` (result path or ``re:PATTERN`` -> kind or
``{kind, role, status, note, outside}``, ``note`` a list of fields beside the id or
``false``), and ``fails`` (what its results look like when it failed: a text
prefix, ``"re:PATTERN"``, ``{field, value}``, a list of these, or ``false`` for
no rule; see :mod:`guardrail._declare.failure`). A top-level ``fails`` is the
rule of the manifest's tools that declare none. The
shape is checked with JSON Schema before anything is compiled, and every
error names the file and the place in it. A JSON key written twice in one
object (a tool declared twice) is an error, not the last one winning.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

from guardrail.errors import ManifestError

if TYPE_CHECKING:
    import jsonschema

_KIND_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
_KIND_PROPERTIES: dict[str, object] = {
    "kind": {"type": "string", "minLength": 1},
    "kinds": _KIND_LIST,
    "sep": {"type": "string", "minLength": 1},
}


def _declaration(properties: dict[str, object]) -> dict[str, object]:
    """The schema of an id parameter's declaration: a kind, a list of kinds, or an object."""
    return {
        "oneOf": [
            {"type": "string", "minLength": 1},
            _KIND_LIST,
            {
                "type": "object",
                "properties": properties,
                "additionalProperties": False,
                "oneOf": [{"required": ["kind"]}, {"required": ["kinds"]}],
            },
        ]
    }


_PARAM = _declaration(_KIND_PROPERTIES)
# A mint takes what a parameter takes, and a role for the ids it brings into existence.
_MINT = _declaration({**_KIND_PROPERTIES, "role": {"type": "string", "minLength": 1}})
_PRODUCER = {
    "oneOf": [
        {"type": "string", "minLength": 1},
        {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "minLength": 1},
                "role": {"type": "string", "minLength": 1},
                "status": {"type": "string", "minLength": 1},
                "note": {
                    "oneOf": [
                        {"type": "boolean"},
                        {"type": "array", "items": {"type": "string", "minLength": 1}},
                    ]
                },
                "outside": {"type": "boolean"},
            },
            "required": ["kind"],
            "additionalProperties": False,
        },
    ]
}
#: One failure rule as data: a text prefix or ``re:PATTERN``, or a field and its value.
_FAILS_RULE = {
    "oneOf": [
        {"type": "string", "minLength": 1},
        {
            "type": "object",
            "properties": {
                "field": {"type": "string", "minLength": 1},
                "value": {"type": ["string", "number", "boolean", "null"]},
            },
            "required": ["field", "value"],
            "additionalProperties": False,
        },
    ]
}
#: ``fails``: a rule, a list of rules, or ``false`` (no rule: see guardrail._declare.failure).
_FAILS = {
    "oneOf": [
        {"const": False},
        _FAILS_RULE,
        {"type": "array", "items": _FAILS_RULE, "minItems": 1},
    ]
}
#: ``operator_ids``: the operator's ids of a kind, or a loader named ``module:function``.
_OPERATOR_IDS = {
    "oneOf": [
        {"type": "array", "items": {"type": "string", "minLength": 1}},
        {"type": "string", "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"},
    ]
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "guardrail manifest",
    "type": "object",
    "properties": {
        "$schema": {"type": "string"},
        "version": {"const": 1},
        "description": {"type": "string"},
        "fails": _FAILS,
        "kinds": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "like": {"type": "string", "minLength": 1},
                    "pattern": {"type": "string"},
                    "normalize": {
                        "oneOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "string"}},
                        ]
                    },
                    "examples": {"type": "array", "items": {"type": "string"}},
                    "enforce": {"type": "boolean"},
                    "description": {"type": "string"},
                    "user_typed": {"enum": ["verify", "allow", "ask"]},
                    "mentions": {"enum": ["ignore", "ask", "refuse", "read"]},
                    "outside": {"enum": ["allow", "ask", "refuse"]},
                    "operator": {"enum": ["allow", "ask", "verify"]},
                    "operator_ids": _OPERATOR_IDS,
                    "operator_per": {"enum": ["guard", "session"]},
                },
                "additionalProperties": False,
            },
        },
        "tools": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "effect": {"enum": ["read", "write"]},
                    "verifies": {"enum": [True, False, "on_success"]},
                    "egress": {"type": "boolean"},
                    "outside": {"type": "boolean"},
                    "description": {"type": "string"},
                    "ids": {"type": "object", "additionalProperties": _PARAM},
                    "mints": {"type": "object", "additionalProperties": _MINT},
                    "produces": {"type": "object", "additionalProperties": _PRODUCER},
                    "fails": _FAILS,
                },
                "additionalProperties": False,
            },
        },
    },
    "required": ["tools"],
    "additionalProperties": False,
}


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    """The schema's validator, built when the first manifest is read.

    jsonschema takes tens of milliseconds to import: ``import guardrail`` must
    not pay for it when no manifest is read.
    """
    import jsonschema

    return jsonschema.Draft202012Validator(SCHEMA)


def read_manifest(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Read and validate a manifest from a mapping, or a ``.json`` or ``.toml`` file."""
    where = "manifest"
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = FilePath(source)
        where = str(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ManifestError(f"cannot read it: {exc.strerror or exc}", where=where) from None
        data = _parse(raw, path, where)
    if not isinstance(data, dict):
        raise ManifestError("a manifest is an object with 'kinds' and 'tools'", where=where)
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        place = _place(error.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ManifestError(f"at {place}: {_say(error)}{more}", where=where)
    return data


def _parse(raw: bytes, path: FilePath, where: str) -> Any:
    if path.suffix.lower() == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib

        try:
            return tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ManifestError(f"not valid TOML: {exc}", where=where) from None
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except _DuplicateKeyError as exc:
        raise ManifestError(
            f"names {exc.key!r} twice in one object; JSON would silently keep the last one, "
            "so remove or rename one of them",
            where=where,
        ) from None
    except ValueError as exc:
        hint = "" if path.suffix.lower() == ".json" else " (name TOML files *.toml)"
        raise ManifestError(f"not valid JSON: {exc}{hint}", where=where) from None


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key written twice (a tool declared twice)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKeyError(key)
        data[key] = value
    return data


def _place(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _say(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        allowed = sorted(schema.get("properties", {}))
        return f"{error.message}; allowed: {', '.join(allowed)}"
    if error.validator == "oneOf" and error.schema is _PARAM:
        return (
            f"{error.instance!r} is not a kind, a list of kinds, or {{kind, sep}}: "
            "write 'order' or ['customer', 'line']"
        )
    if error.validator == "oneOf" and error.schema is _OPERATOR_IDS:
        return (
            f"operator_ids {error.instance!r} is neither a list of ids (non-empty strings) nor "
            "a loader named 'module:function'"
        )
    if error.validator == "oneOf" and error.schema is _PRODUCER:
        return f"{error.instance!r} is not a kind or {{kind, role, status}}"
    if error.validator == "oneOf" and (error.schema is _FAILS or error.schema is _FAILS_RULE):
        return (
            f"fails {error.instance!r} is not a failure rule: write a text prefix "
            '("Error:"), a pattern ("re:^Failed"), {field, value} ({field = "status", '
            'value = "error"}), a list of these, or false (the tool\'s text never says it failed)'
        )
    return str(error.message)
