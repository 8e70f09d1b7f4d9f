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

#: What :func:`written_checks` writes for each parameter: its value from the keywords, else
#: from its position (``{positional}``), else its default; then :data:`_LOOKUP`.
_PARAM = """\
if {name!r} in _kwargs:
    _value = _kwargs[{name!r}]
else:
    _value = {positional}
"""

#: :data:`_PARAM` in a function whose parameters are the tool's own: the value is the local
#: variable ``{name}`` (a parameter name, checked to be an identifier). Every name the
#: written code uses besides starts with ``_``, so no parameter hides one.
_LOCAL_PARAM = "_value = {name}\n"

#: The look-up of the value ``{i}`` read by :data:`_PARAM` or :data:`_LOCAL_PARAM`. An
#: absent argument with no default, like ``None``, is not checked. Any exception (an id
#: not held, not verified on a write, not text, a normaliser that fails) means "not allowed
#: outright": the code around it catches it and sends the call to the full check.
_LOOKUP = """\
if _type(_value) is _str:
    _entry{i} = _tables[{kind!r}][_normalize{i}(_value)]{refused}
elif _value is None:
    _entry{i} = None
else:
    raise _LookupError
"""

#: What a write adds to each look-up: an entry not verified is not allowed outright.
_UNVERIFIED = "\n    if not _entry{i}.verified:\n        raise _LookupError"

#: The built-ins the written code uses, under the names it uses them by (see
#: :data:`_LOCAL_PARAM`): to bind in the globals of any function embedding it.
BUILTINS: dict[str, Any] = {
    "_type": type,
    "_str": str,
    "_len": len,
    "_LookupError": LookupError,
    "_Exception": Exception,
}

#: The function around the parameters: a normaliser that fails sends the call to the full
#: check, as in :func:`allowed_entries`; the entries used are then touched.
_FUNCTION = """\
def factory({bound}):
    def allowed(_args, _kwargs, _state):
        _tables = _state.tables
        try:
{checks}\
        except _Exception:
            return None
        _epoch = _state.epoch
{touches}\
        return {used}
    return allowed
"""


class WrittenChecks(NamedTuple):
    """The allowed path of one tool's parameters, as source to embed in a function.

    ``checks`` reads ``_args``, ``_kwargs`` (or the parameters themselves) and
    ``_tables`` (the state's) and sets ``_entry0``, ``_entry1``... (None: the
    argument is absent or None), raising if any is not allowed outright;
    ``touches`` (after it, outside the ``try``) marks the entries used in
    ``_epoch`` of ``_state``; ``used`` is the list of the entries. Every name
    the code uses starts with ``_``; the built-ins it uses are bound as
    :data:`BUILTINS` names them. Names and kinds enter the code only as
    ``repr`` literals, normalisers and defaults only as the values ``bound``
    names: nothing declared is ever run as code.
    """

    checks: str
    touches: str
    used: str
    bound: dict[str, Any]


def written_checks(fast: FastParams, read: bool, *, local: bool = False) -> WrittenChecks:
    """The look-ups of :func:`allowed_entries` for ``fast``, one straight-line block per id.

    For parameters of one kind each (see :func:`compile_allowed`). With ``local``
    each value is read from a local variable of the parameter's own name (code
    embedded in a function with the tool's own parameters, which Python has
    already bound, defaults included), not from ``args`` and ``kwargs``.
    """
    params = []
    touches = []
    bound: dict[str, Any] = {}
    for i, (name, position, kind, normalize, _, default) in enumerate(fast):
        bound[f"_normalize{i}"] = normalize
        refused = "" if read else _UNVERIFIED.format(i=i)
        if local:
            if not str(name).isidentifier() or str(name).startswith("_"):
                raise ValueError(f"{name!r} is not a parameter name the written code can take")
            params.append(_LOCAL_PARAM.format(name=name))
        else:
            bound[f"_default{i}"] = None if default is NO_DEFAULT else default
            positional = (
                f"_args[{position}] if _len(_args) > {position} else _default{i}"
                if position >= 0
                else f"_default{i}"
            )
            params.append(_PARAM.format(name=str(name), positional=positional))
        params.append(_LOOKUP.format(kind=str(kind), i=i, refused=refused))
        touches.append(
            f"if _entry{i} is not None and _entry{i}.epoch != _epoch:\n"
            f"    _state.touch(_entry{i})\n"
        )
    entries = ", ".join(f"_entry{i}" for i in range(len(fast)))
    skipped = " or ".join(f"_entry{i} is None" for i in range(len(fast)))
    used = f"[{entries}] if not ({skipped}) else [_e for _e in ({entries},) if _e is not None]"
    return WrittenChecks("".join(params), "".join(touches), f"({used})", bound)


def writes_out(fast: FastParams | None) -> bool:
    """Whether :func:`written_checks` can write the allowed path of ``fast``."""
    return bool(fast) and not any(others for _, _, _, _, others, _ in fast or ())


def compile_allowed(fast: FastParams, read: bool) -> AllowedPath:
    """The allowed path of one tool: :func:`allowed_entries` for ``fast``, written out.

    Parameters that accept several kinds keep the general loop.
    """
    if not writes_out(fast):
        return lambda args, kwargs, state: allowed_entries(fast, read, args, kwargs, state)
    written = written_checks(fast, read)
    source = _FUNCTION.format(
        bound=", ".join(written.bound),
        checks=textwrap.indent(written.checks, " " * 12),
        touches=textwrap.indent(written.touches, " " * 8),
        used=written.used,
    )
    namespace: dict[str, Any] = dict(BUILTINS)
    # The code holds no declared text but repr literals (see above): nothing of a program runs.
    code = compile(source, f"<guardrail allowed path of {len(fast)} id(s)>", "exec")
    exec(code, namespace)  # noqa: S102
    allowed: AllowedPath = namespace["factory"](**written.bound)
    return allowed
