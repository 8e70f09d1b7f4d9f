"""Guarding the tool functions of a module you cannot edit, in place, with wrapt.

``guard.patch("shop.api:issue_refund", ids={"order_id": "order"})`` replaces
``issue_refund`` in the module ``shop.api`` with a wrapper that checks,
runs and records each call exactly as ``@guard.tool`` does: the function is
put through the decorator itself (the same declarations, sessions, modes and
audit), and wrapt's :func:`wrapt.wrap_function_wrapper` puts the guarded
function in the original's place, so methods still bind and introspection
still sees the original. When the module is not imported yet, a wrapt
post-import hook patches it the moment it is. :meth:`Patch.undo` puts the
original back (or cancels a patch still waiting for its module).

Patching changes the module's attribute: code that imported the function by
name before the patch (``from shop.api import issue_refund``) keeps the
original. Patch before such imports run (a post-import hook does so for a
module not imported yet), or call the function through its module.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from guardrail.errors import GuardrailUsageError

if TYPE_CHECKING:
    from types import ModuleType

#: Guards a function; the class is given for a static or class method, which it names.
Decorate = Callable[[Callable[..., Any], "type | None"], Callable[..., Any]]


def _split(target: str) -> tuple[str, str]:
    module, colon, path = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not colon or not module or not path or not all(path.split(".")):
        raise GuardrailUsageError(
            f"patch() takes 'module:function' or 'module:Class.method' "
            f"(e.g. 'shop.api:issue_refund'), not {target!r}"
        )
    return module, path


class Patch:
    """One tool function of another module guarded in place; :meth:`undo` puts it back.

    ``target`` is ``"module:function"`` or ``"module:Class.method"``.
    ``applied`` says whether the module's attribute is the guarded function
    now (False while waiting for the module to be imported, and after
    :meth:`undo`). Also a context manager: the patch is undone on exit.
    """

    def __init__(self, target: str, decorate: Decorate) -> None:
        self.target = target
        self._module, self._path = _split(target)
        self._decorate = decorate
        self._lock = threading.Lock()
        self._undone = False
        #: (parent, attribute, original, the wrapper put in its place), once applied.
        self._applied: tuple[Any, str, Any, Any] | None = None
        import wrapt  # only a program that patches pays for the import

        module = sys.modules.get(self._module)
        if module is not None:
            self._apply(module)
        else:
            wrapt.register_post_import_hook(self._on_import, self._module)

    @property
    def applied(self) -> bool:
        """Whether the guarded function is in the module now."""
        return self._applied is not None

    def _on_import(self, module: ModuleType) -> None:
        """The post-import hook: patch the module as it is imported, unless undone meanwhile."""
        self._apply(module)

    def _apply(self, module: ModuleType) -> None:
        import wrapt

        with self._lock:
            if self._undone or self._applied is not None:
                return
            try:
                parent, attribute, original = wrapt.resolve_path(module, self._path)
            except Exception as exc:
                raise GuardrailUsageError(
                    f"patch({self.target!r}): {module.__name__} has no {self._path!r} ({exc})"
                ) from None
            function = (
                original.__func__ if isinstance(original, (classmethod, staticmethod)) else original
            )
            if not callable(function):
                raise GuardrailUsageError(
                    f"patch({self.target!r}): {self._path} is {type(original).__name__}, "
                    "not a function"
                )
            # The decorator itself guards the plain function: one machinery for both.
            static = isinstance(parent, type) and isinstance(original, (classmethod, staticmethod))
            guarded = self._decorate(function, cast(type, parent) if static else None)
            # A method gets its instance (or class) first, as the signature the decorator
            # read says; wrapt hands it over apart. A static method and a function get none.
            takes_instance = inspect.isclass(parent) and not isinstance(original, staticmethod)

            def guard_call(
                wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: Any
            ) -> Any:
                if takes_instance and instance is not None:
                    return guarded(instance, *args, **kwargs)
                return guarded(*args, **kwargs)

            wrapper = wrapt.wrap_function_wrapper(parent, attribute, guard_call)
            self._applied = (parent, attribute, original, wrapper)

    def undo(self) -> None:
        """Put the original function back (or cancel the patch if its module is not imported).

        Undoing twice is harmless. The tool stays declared to the guard, so
        patching it again later checks it the same way.
        """
        with self._lock:
            self._undone = True
            if self._applied is None:
                return
            parent, attribute, original, wrapper = self._applied
            current = vars(parent).get(attribute) if hasattr(parent, "__dict__") else None
            if current is not wrapper:
                raise GuardrailUsageError(
                    f"patch({self.target!r}).undo(): {self._path} was replaced again since "
                    "it was patched; undo that change first"
                )
            setattr(parent, attribute, original)
            self._applied = None

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "applied" if self.applied else ("undone" if self._undone else "waiting")
        return f"<Patch {self.target} {state}>"
