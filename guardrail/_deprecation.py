"""Old spellings that keep working for one release, each with a warning that names the new one.

Three kinds: a module's old name (:func:`renamed_names`, a module
``__getattr__``, so importing the new name never warns), a function's old
keyword or positional options (:func:`legacy_arguments`, which keeps the
new signature the only one type checkers and ``inspect`` see), and
anything else a function checks itself (:func:`warn`). Every warning is a
``DeprecationWarning`` pointing at the line that used the old spelling.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from guardrail.errors import GuardrailUsageError

P = ParamSpec("P")
R = TypeVar("R")

_GOES = "the old spelling goes in the next release"


def warn(message: str, *, stacklevel: int = 1) -> None:
    """Warn that something is deprecated, at the line ``stacklevel`` frames above the caller."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 2)


def renamed_names(
    module: str, renamed: Mapping[str, str], namespace: Mapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving each old name of ``renamed`` (old -> new) the new object."""

    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn(f"{module}.{name} is now {module}.{new}; {_GOES}", stacklevel=1)
        return namespace[new]

    return __getattr__


def legacy_arguments(
    call: str,
    *,
    positional: int | None = None,
    keywords: Sequence[str] = (),
    renamed: Mapping[str, str] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Accept a function's old calling forms for a release, each with a warning.

    ``positional`` is how many arguments the function now takes by position;
    extra ones are read as ``keywords`` (in the old order). ``renamed`` maps
    old keyword names to new ones; passing both spellings of one option is
    a :class:`GuardrailUsageError`. ``call`` names the function in messages.
    """
    renames = dict(renamed or {})

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> R:
            if positional is not None and len(args) > positional:
                args, kwargs = _by_keyword(call, positional, keywords, args, kwargs)
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise GuardrailUsageError(
                            f"{call}: pass {new}= only ({old}= is its old spelling)"
                        )
                    warn(f"{call}: {old}= is now {new}=; {_GOES}")
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        # The new signature is the only one type checkers see (inspect follows __wrapped__).
        return cast("Callable[P, R]", wrapper)

    return decorate


def _by_keyword(
    call: str,
    positional: int,
    keywords: Sequence[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments past the first ``positional`` moved to their ``keywords``, with a warning."""
    extra = args[positional:]
    if len(extra) > len(keywords):
        raise TypeError(
            f"{call} takes {positional + len(keywords)} positional arguments at most "
            f"({positional} from the next release), not {len(args)}"
        )
    given = dict(zip(keywords, extra, strict=False))
    for name in given:
        if name in kwargs:
            raise TypeError(f"{call} got multiple values for argument {name!r}")
    written = ", ".join(f"{name}=..." for name in given)
    warn(
        f"{call}: pass {', '.join(given)} by keyword ({written}); passing them by position "
        "stops working in the next release",
        stacklevel=2,
    )
    return args[:positional], {**kwargs, **given}
