"""``guardrail init``: a starter manifest proposed from the tool definitions an agent already has.

Most agents describe their tools to the model as OpenAI-style, Anthropic or
MCP definitions (``tools=[...]``, ``get_info()``, a ``tools/list`` answer):
every parameter is named there, often with a description quoting an example
id. ``guardrail init tools.json`` reads them and writes a TOML manifest that
proposes, with the reason for each:

- the identifier parameters: a name ending in ``_id``/``_ids`` (or ``id``), a
  text parameter whose name ends in ``_number`` (``flight_number``, not an
  integer ``page_number``), or a description calling the value an id or
  identifier; nested ones too (``payment_methods[*].payment_id``,
  ``item_ids[*]``, ``flights[*].flight_number``);
- a kind per id, named from the parameter (``order_id`` -> ``order``; ``id`` of
  ``get_order`` -> ``order``), with the values its descriptions quote as
  ``examples`` (placeholders a model may copy, which the guard refuses);
- each tool's effect, from its name's first word (``get_``, ``list_``,
  ``search_``... read; anything else write, the strict side).

What a tool's results produce is not in a definition: each read tool gets a
commented ``produces`` line to fill in from a real result (``guardrail check``
then names a declared path that matched nothing). The file is a proposal:
read each line, confirm or correct it, then try it with ``guardrail check``
and ``guardrail replay``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from guardrail._declare.definitions import Definition, read_definitions
from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError

#: The first word of a tool name that says it only looks things up.
READ_VERBS = frozenset(
    (
        *("get", "list", "search", "find", "read", "fetch", "lookup", "look", "query", "show"),
        *("view", "check", "calculate", "count", "describe", "retrieve", "load", "think"),
        *("compute", "validate", "verify", "browse"),
    )
)
#: ``order_id``, ``item_ids``, ``id``; ``customerId`` (camel case).
_ID_NAME = re.compile(
    r"^(?:(?P<stem>.+?)_)?(?:id|ids|Id|Ids|ID|IDs)$|^(?P<camel>.+?)(?:Id|Ids|ID)$"
)
_ID_WORDS = re.compile(r"\b(?:id|ids|identifier|identifiers)\b", re.IGNORECASE)
#: ``flight_number``, ``trackingNumber``: a text that names one thing. Only when the schema
#: says it is text: an integer ``page_number`` counts, it names nothing.
_NUMBER_NAME = re.compile(r"^(?:(?P<stem>.+?)_)(?:number|numbers)$|^(?P<camel>.+?)Numbers?$")
#: A value quoted in a description: '#W0000000', "sara_doe_496", `ord_123`.
_QUOTED = re.compile(r"""['"`\u2018\u201c]([^'"`\u2019\u201d\s]{3,40})['"`\u2019\u201d]""")


@dataclass
class Proposal:
    """One identifier parameter proposed: where, of which kind, and why."""

    tool: str
    path: str
    kind: str
    reason: str
    examples: list[str] = field(default_factory=list)


def add_parser(commands: Any) -> None:
    """The ``init`` subcommand, on the ``guardrail`` parser's subcommands."""
    init = commands.add_parser(
        "init",
        help="propose a starter manifest from OpenAI-style or MCP tool definitions",
        description="Read tool definitions (a JSON file: a list of OpenAI, Anthropic or MCP "
        "definitions, or an MCP tools/list answer) and write a TOML manifest proposing each "
        "tool's effect, its identifier parameters and their kinds, with the reason for each, "
        "for you to confirm.",
    )
    init.add_argument("definitions", metavar="DEFINITIONS", help="the tool definitions (JSON)")
    init.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default="manifest.toml",
        help="where to write the manifest (default: manifest.toml; - prints it)",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing FILE")


def _kind_from(stem: str) -> str:
    """``payment_method`` from ``payment_method``; ``customerId`` stems as ``customer``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()
    words = re.sub(r"[^a-z0-9_]+", "_", words).strip("_")
    return words or "id"


def _tool_noun(tool: str) -> str:
    """The thing a tool acts on, for a parameter named plainly ``id``: ``get_order`` -> order."""
    words = _kind_from(tool).split("_")
    rest = words[1:] if len(words) > 1 and words[0] in READ_VERBS | {"update", "delete"} else words
    noun = "_".join(rest) or "id"
    return noun[:-1] if noun.endswith("s") and not noun.endswith("ss") else noun


def _quoted(text: str) -> list[str]:
    return list(dict.fromkeys(match.group(1) for match in _QUOTED.finditer(text)))


def _walk(tool: str, path: str, name: str, schema: Mapping[str, Any]) -> Iterator[Proposal]:
    """The id parameters at ``path`` (named ``name``) and inside it."""
    kind_of = schema.get("type")
    description = str(schema.get("description") or "")
    if kind_of == "array" and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        if items.get("type") == "object":
            yield from _walk(tool, f"{path}[*]", name, items)
            return
        inner = dict(items)
        inner.setdefault("description", description)
        yield from _walk(tool, f"{path}[*]", name, inner)
        return
    if kind_of == "object" and isinstance(schema.get("properties"), Mapping):
        for key, child in schema["properties"].items():
            if isinstance(child, Mapping):
                yield from _walk(tool, f"{path}.{key}" if path else str(key), str(key), child)
        return
    if kind_of not in (None, "string", "integer", "number"):
        return
    match = _ID_NAME.match(name)
    if match is not None:
        stem = match.group("stem") or match.group("camel")
        kind = _kind_from(stem) if stem else _tool_noun(tool)
        reason = f"its name {name!r} ends in id"
    elif kind_of == "string" and (number := _NUMBER_NAME.match(name)) is not None:
        kind = _kind_from(number.group("stem") or number.group("camel"))
        reason = f"its name {name!r} ends in number and it takes text"
    elif _ID_WORDS.search(description):
        kind = _kind_from(path.replace("[*]", "").replace(".", "_"))  # payment.method: both words
        reason = "its description calls it an id"
    else:
        return
    examples = _quoted(description)
    if examples:
        reason += f"; its description quotes {', '.join(repr(e) for e in examples)}"
    yield Proposal(tool, path, kind, reason, examples)


def propose(definitions: list[Definition]) -> list[Proposal]:
    """Every identifier parameter the definitions suggest, in tool and parameter order."""
    found: list[Proposal] = []
    for definition in definitions:
        schema = dict(definition.parameters)
        schema.setdefault("type", "object")
        found.extend(_walk(definition.name, "", "", schema))
    return found


def _effect(tool: str) -> tuple[str, str]:
    first = _kind_from(tool).split("_")[0]
    if first in READ_VERBS:
        return "read", f"its name starts with {first!r}"
    return "write", f"its name starts with {first!r}, not a lookup verb (the strict side)"


def _toml(value: str) -> str:
    return json.dumps(value)


def _key(path: str) -> str:
    return path if re.fullmatch(r"[A-Za-z0-9_-]+", path) else _toml(path)


def render(definitions: list[Definition], proposals: list[Proposal], source: str) -> str:
    """The starter manifest, as TOML with the reason for each proposal in a comment."""
    lines = [
        f"# A starter manifest proposed by `guardrail init` from {source}.",
        "# Every line is a proposal: confirm or correct each one (the reasons are beside them),",
        "# fill in what each read tool's results produce, then try it:",
        "#   guardrail check --manifest THIS_FILE --result ... --call ...",
        "# Every key is explained in the manifest reference (docs/manifest.md).",
        "",
        "version = 1",
    ]
    kinds: dict[str, list[str]] = {}
    for proposal in proposals:
        kinds.setdefault(proposal.kind, [])
        for example in proposal.examples:
            if example not in kinds[proposal.kind]:
                kinds[proposal.kind].append(example)
    for kind, examples in kinds.items():
        users = sorted({f"{p.tool}.{p.path}" for p in proposals if p.kind == kind})
        lines += ["", f"# ids of: {', '.join(users)}", f"[kinds.{kind}]"]
        lines.append('# pattern = "..."  # a regex of its shape: lets the guard read typed ids')
        if examples:
            shown = ", ".join(_toml(example) for example in examples)
            lines.append(f"examples = [{shown}]  # quoted in descriptions: placeholders")
    for definition in definitions:
        effect, why = _effect(definition.name)
        lines += ["", f"[tools.{_key(definition.name)}]", f'effect = "{effect}"  # {why}']
        if effect == "read":  # before the ids table: a line after it would land inside it
            lines.append(
                '# produces = { "PATH.TO.id" = "KIND" }  # where its results hold ids: '
                "see a real result"
            )
        own = [p for p in proposals if p.tool == definition.name]
        if own:
            lines.append(f"[tools.{_key(definition.name)}.ids]")
            lines += [f'{_key(p.path)} = "{p.kind}"  # {p.reason}' for p in own]
    return "\n".join(lines) + "\n"


def run_init(args: argparse.Namespace, console: Console) -> int:
    """Run ``guardrail init``; returns the exit code."""
    definitions = read_definitions(args.definitions)
    if not definitions:
        raise GuardrailUsageError(f"{args.definitions}: no tool definitions in it")
    proposals = propose(definitions)
    text = render(definitions, proposals, Path(args.definitions).name)
    Guard.from_manifest(_parse(text))  # what it writes always loads
    if args.output == "-":
        console.print(Text(text), end="")
        return 0
    target = Path(args.output)
    if target.exists() and not args.force:
        raise GuardrailUsageError(f"{target} exists; pass --force to overwrite it")
    target.write_text(text, encoding="utf-8")
    console.print(
        Text(
            f"wrote {target}: {len(definitions)} tools, {len(proposals)} id parameters "
            f"proposed, of {len({p.kind for p in proposals})} kinds"
        )
    )
    for proposal in proposals:
        console.print(
            Text(f"  {proposal.tool}.{proposal.path} -> {proposal.kind}: {proposal.reason}"),
            soft_wrap=True,
        )
    console.print(
        Text(
            "Confirm or correct each proposal in the file, add each read tool's produces, "
            f"then: guardrail check --manifest {target} ..."
        ),
        soft_wrap=True,
    )
    return 0


def _parse(text: str) -> dict[str, Any]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)
