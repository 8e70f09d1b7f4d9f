"""The allowed path: a call whose every identifier argument is held, in a few look-ups.

A tool whose id parameters are all plain top-level arguments is checked
here first, straight from the call's ``args`` and ``kwargs``: each id is one
look-up in its kind's table, under its kind's normaliser. Anything else (an
id not held, unverified on a write, not text, a normaliser that fails) is
sent to the full check (:func:`guardrail._check.plan.check_arguments`),
which also finds the problems.

:func:`allowed_entries` is that path for any such tool, reading a tuple of
parameters per call; :func:`compile_allowed` writes it out once per tool
(the way :mod:`dataclasses` writes ``__init__``) for the common case of
parameters of one kind each, so a call runs straight-line code with no loop
and nothing to unpack. Both return the same entries for the same call, and
touch them the same way.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from guardrail.ledger import Entry
from guardrail.ledger._state import LedgerState

#: No default: an omitted argument is not checked.
NO_DEFAULT: Final[Any] = object()


class OtherKind(NamedTuple):
    """A further kind a fast parameter accepts: its name and normaliser."""

    name: str
    normalize: Callable[[str], str]


#: One plain top-level id parameter, as the allowed path reads it: its name, its position
#: in the signature (-1: keyword only or unknown), the first accepted kind's name and
#: normaliser, the other kinds it accepts (:class:`OtherKind`, usually none), and the
#: default an omitted argument takes (``NO_DEFAULT``: none to check). A plain tuple on
#: purpose: :func:`allowed_entries` unpacks one per parameter per call, and Python unpacks
#: an exact tuple fastest.
FastParam = tuple[str, int, str, Callable[[str], str], tuple[OtherKind, ...], Any]


#: The parameters of a tool whose id parameters are all plain top-level arguments.
FastParams = tuple[FastParam, ...]

#: The allowed path of one tool: ``(args, kwargs, state)`` to the entries used, else None.
AllowedPath = Callable[[Sequence[Any], Mapping[str, Any], LedgerState], "list[Entry] | None"]


def refer(_args: Sequence[Any], _kwargs: Mapping[str, Any], _state: LedgerState) -> None:
    """The allowed path of a tool that has none: every call goes to the full check."""


def allowed_entries(
    fast: FastParams,
    read: bool,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    state: LedgerState,
) -> list[Entry] | None:
    """The entries a call uses when every identifier argument is allowed outright, else None.

    The allowed path of :func:`~guardrail._check.plan.check_arguments` for
    plain top-level parameters, read from a call's ``args`` and ``kwargs``
    (a mapping of arguments is ``((), arguments)``). The entries are marked
    used. None sends the call through the full check, which also finds the
    problems; so does a normaliser that fails, which the full check reports
    as a malformed value. Nothing is rewritten: the tool gets what the model
    wrote.
    """
    by_kind = state.tables
    used: list[Entry] = []
    try:
        for name, position, kind, normalize, others, default in fast:
            if name in kwargs:
                value = kwargs[name]
            elif 0 <= position < len(args):
                value = args[position]
            elif default is NO_DEFAULT:
                continue
            else:
                value = default
            if value is None:
                continue
            if type(value) is not str:
                return None
            table = by_kind.get(kind)
            entry = None if table is None else table.get(normalize(value))
            if entry is None or not (entry.verified or read):
                for other, normalize_other in others:
                    table = by_kind.get(other)
                    entry = None if table is None else table.get(normalize_other(value))
                    if entry is not None and (entry.verified or read):
                        break
                else:
                    return None
            used.append(entry)
    except Exception:  # a user normaliser failed, or gave a key no table can hold
        return None
    epoch = state.epoch
    for entry in used:
        if entry.epoch != epoch:
            state.touch(entry)
    return used


# -- one tool's allowed path, written out ---------------------------------------------------------

#: What :func:`compile_allowed` writes for each parameter ``{i}``: its value from the
#: keywords, else from its position (``{positional}``), else its default; then one look-up.
#: An absent argument with no default, like ``None``, is not checked.
_PARAM = """\
value = kwargs.get({name!r}, ABSENT)
if value is ABSENT:
    value = {positional}
if type(value) is str:
    entry{i} = tables.get({kind!r}, EMPTY).get(normalize{i}(value))
    if entry{i} is None{refused}:
        return None
elif value is None:
    entry{i} = None
else:
    return None
"""

#: The function around the parameters: a normaliser that fails sends the call to the full
#: check, as in :func:`allowed_entries`; the entries used are then touched.
_FUNCTION = """\
def factory(ABSENT, EMPTY, {normalizers}):
    def allowed(args, kwargs, state):
        tables = state.tables
        try:
{params}\
        except Exception:
            return None
        used = [{entries}]
        if {any_skipped}:
            used = [entry for entry in used if entry is not None]
        epoch = state.epoch
        for entry in used:
            if entry.epoch != epoch:
                state.touch(entry)
        return used
    return allowed
"""

_ABSENT: Final[Any] = object()
_EMPTY: Final[Mapping[str, Entry]] = {}


def compile_allowed(fast: FastParams, read: bool) -> AllowedPath:
    """The allowed path of one tool: :func:`allowed_entries` for ``fast``, written out.

    Parameters that accept several kinds keep the general loop. Names and
    kinds enter the code only as ``repr`` literals, normalisers and defaults
    only as values bound to the function: nothing declared is ever run as code.
    """
    if not fast or any(others for _, _, _, _, others, _ in fast):
        return lambda args, kwargs, state: allowed_entries(fast, read, args, kwargs, state)
    params = []
    bound: dict[str, Any] = {}
    for i, (name, position, kind, normalize, _, default) in enumerate(fast):
        given = None if default is NO_DEFAULT else default
        bound[f"normalize{i}"] = normalize
        bound[f"default{i}"] = given
        positional = (
            f"args[{position}] if len(args) > {position} else default{i}"
            if position >= 0
            else f"default{i}"
        )
        params.append(
            _PARAM.format(
                name=str(name),
                kind=str(kind),
                i=i,
                positional=positional,
                refused="" if read else f" or not entry{i}.verified",
            )
        )
    body = textwrap.indent("".join(params), " " * 12)
    source = _FUNCTION.format(
        normalizers=", ".join(bound),
        params=body,
        entries=", ".join(f"entry{i}" for i in range(len(fast))),
        any_skipped=" or ".join(f"entry{i} is None" for i in range(len(fast))),
    )
    namespace: dict[str, Any] = {}
    # The code holds no declared text but repr literals (see above): nothing of a program runs.
    code = compile(source, f"<guardrail allowed path of {len(fast)} id(s)>", "exec")
    exec(code, namespace)  # noqa: S102
    allowed: AllowedPath = namespace["factory"](_ABSENT, _EMPTY, **bound)
    return allowed
