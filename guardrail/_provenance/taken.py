"""The ids a successful call vouches for by taking them: a write's mints, a lookup's arguments.

A read declared to verify on success confirms the unverified ids it took
(an order the user typed exists if ``get_order`` found it); a write brings
its ``mints=`` parameters into existence. An id that entered introduced (a
server that cannot tell the user's ids from the model's) or mentioned (seen
in a result's free text) is never confirmed this way: only a declared result
field that returns it verifies it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardrail._data.batch import Batch
from guardrail._data.verdict import Verdict
from guardrail._declare.spec import ParamSpec, ToolSpec
from guardrail._provenance.harvest import append_id, unreadable_problem
from guardrail.kinds import Kind
from guardrail.ledger._state import LedgerState

#: The provenance of ids a read brought in that appear nowhere else (see ``Engine.introduce``):
#: unverified like the user's, but a lookup's mere success never confirms them.
INTRODUCED = "introduced"
#: The declared path of the ids a call vouches for by taking them (its arguments).
ARGUMENTS = "arguments"


def taken_ids(
    kinds: Mapping[str, Kind],
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    verdict: Verdict | None,
    problems: list[str],
    state: LedgerState,
) -> list[Batch]:
    """Ids a successful call vouches for: a write's mints, an ``on_success`` read's arguments.

    Any other read confirms only what its result returns, which the harvest reads. An
    introduced id is no argument the user gave: only a result that returns it confirms it.
    """
    if spec.confirms_arguments:
        if verdict is None or not verdict.allowed:
            # Under the one path that names a call's taken ids: their spelling is the call's,
            # never one a result wrote (see guardrail._data.entry.tool_written).
            named = argument_ids(kinds, spec.params, arguments, problems)
            return unintroduced([batch._replace(path=ARGUMENTS) for batch in named], state)
        taken: list[Batch] = []
        for typed in verdict.typed:
            append_id(taken, typed.kind, ARGUMENTS, typed.value, typed.key)
        for entry in verdict.used:
            if not entry.verified and entry.tier != "mentioned":  # a mention never verifies
                append_id(taken, entry.kind, ARGUMENTS, entry.value, entry.key)
        return unintroduced(taken, state)
    if spec.effect == "write" and spec.mints:
        minted = argument_ids(kinds, spec.mints, arguments, problems)
        return [batch._replace(tier="minted") for batch in minted]
    return []


def argument_ids(
    kinds: Mapping[str, Kind],
    params: Sequence[ParamSpec],
    arguments: Mapping[str, Any],
    problems: list[str],
) -> list[Batch]:
    """The ids a successful call took, each of the kind it fits best, in order.

    A value the kind's normaliser cannot read is skipped and reported in ``problems``.
    """
    taken: list[Batch] = []
    unreadable = 0
    for param in params:
        fits = [kinds[name] for name in param.kinds]
        for value in param.path.extract(arguments, parse_json_strings=True):
            texts = (
                [part.strip() for part in value.split(param.sep) if part.strip()]
                if param.sep and isinstance(value, str)
                else [value]
            )
            for text in texts:
                if isinstance(text, bool) or not isinstance(text, (str, int)):
                    continue
                text = str(text)
                kind = next((k for k in fits if k.has_pattern and k.matches(text)), fits[0])
                key = kind.key(text)
                if key is None:
                    unreadable += 1
                elif key and key not in kind.examples:
                    append_id(taken, kind.name, param.path.text, text, key, param.role)
    if unreadable:
        problems.append(unreadable_problem(unreadable))
    return taken


def unintroduced(batches: list[Batch], state: LedgerState) -> list[Batch]:
    """``batches`` without the ids that entered introduced or mentioned and the user never typed.

    An introduced id came from a runtime that could not tell the user's ids
    from the model's: a lookup's success proves it exists, not that it is
    this conversation's, so only a result that returns it may confirm it.
    """
    kept: list[Batch] = []
    for batch in batches:
        table = state.tables.get(batch.kind)
        pairs = [
            (value, key)
            for value, key in zip(batch.values, batch.keys, strict=True)
            if table is None
            or (entry := table.get(key)) is None
            or entry.verified
            or (entry.source.tool != INTRODUCED and entry.tier != "mentioned")
            or state.typed_by_user(value)
        ]
        if pairs:
            values, keys = (list(column) for column in zip(*pairs, strict=True))
            kept.append(batch._replace(values=values, keys=keys, statuses=None, notes=None))
    return kept
