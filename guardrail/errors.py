"""The whole exception tree.

``GuardrailError`` is the root. Mistakes in how the library is used
(``GuardrailUsageError``) are kept apart from refusals of a tool call
(``IdentifierViolation``), so a program can let the first crash loudly and
handle the second as part of the agent loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardrail._data.verdict import ApprovalRequest, Finding, Verdict

__all__ = [
    "ApprovalRequired",
    "GuardrailError",
    "GuardrailUsageError",
    "IdentifierViolation",
    "ManifestError",
    "RepromptLimitExceeded",
    "SessionDeleted",
    "StaleApproval",
    "StoreError",
    "TraceFileError",
    "TranscriptError",
]


class GuardrailError(Exception):
    """Root of every exception the library raises."""


class GuardrailUsageError(GuardrailError, ValueError):
    """The library was used wrongly: a bad declaration, no session, a bad option.

    The message says what to change. ``tool`` and ``param`` name the
    declaration at fault where there is one.
    """

    def __init__(self, message: str, *, tool: str | None = None, param: str | None = None):
        super().__init__(message)
        self.tool = tool
        self.param = param


class ManifestError(GuardrailUsageError):
    """A manifest could not be read: ``where`` is the file and the JSON path at fault."""

    def __init__(self, message: str, *, where: str = "", tool: str | None = None):
        super().__init__(f"{where}: {message}" if where else message, tool=tool)
        self.where = where


class StoreError(GuardrailError):
    """A session could not be saved or loaded: the database is gone, replaced or locked.

    ``session_id`` names the session; the message says what to do. The
    ledger in memory is intact, so saving it again once the cause is fixed
    loses nothing.
    """

    def __init__(self, message: str, *, session_id: str | None = None):
        super().__init__(message)
        self.session_id = session_id


class SessionDeleted(StoreError):
    """A write was refused: the session was deleted (or expired) after the writer read it.

    A delete wins over every write that began before it: the store writes
    nothing of the change, and the guard drops its cached copy, so the ids
    the deleted session held are refused again. Open the session anew to
    start a new conversation under the same id.
    """


class IdentifierViolation(GuardrailError):
    """A tool call was refused because an identifier argument did not come from a tool result.

    ``verdict`` carries the findings; ``str(exc)`` is the same text a model
    would be re-prompted with.
    """

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings of the refused call, most specific first."""
        return self.verdict.findings


class ApprovalRequired(IdentifierViolation):
    """The call waits for the user: some of its ids need their approval (none is refused).

    ``requests`` (the verdict's ``approvals``) carry the tool, argument,
    value, kind, tier, evidence and token of each; show them to the user and
    pass the approved ones to ``guard.approve`` (the declined to
    ``guard.deny``), then call again.
    """

    @property
    def requests(self) -> tuple[ApprovalRequest, ...]:
        """What the user is asked to approve, one request per value."""
        return self.verdict.approvals


class StaleApproval(GuardrailUsageError):
    """An approval request of a session that ended (or no longer exists): it approves nothing.

    Ask again in a live session: the user's answer applies to the session it was asked in.
    """


class RepromptLimitExceeded(IdentifierViolation):
    """The model was re-prompted ``limit`` times for one tool in one turn and still sent bad ids.

    A turn starts with each user message (``guard.observe_user``), which starts the count again.
    """

    def __init__(self, verdict: Verdict, *, limit: int):
        super().__init__(verdict)
        self.limit = limit
        self.args = (
            (
                f"{verdict.message}\n(guardrail: {limit} refusals of {verdict.tool} this turn; "
                "stopping instead of re-prompting again. Look the identifiers up with a tool "
                "or ask the user.)"
            ),
        )


class TranscriptError(GuardrailError, ValueError):
    """A message list could not be read; ``index`` is the position of the message at fault."""

    def __init__(self, message: str, *, index: int | None = None):
        super().__init__(f"message {index}: {message}" if index is not None else message)
        self.index = index


class TraceFileError(GuardrailUsageError):
    """A trace file could not be read at all; ``path`` names it and ``line`` the place, if any.

    Lines that are read but malformed are not errors: a replay counts and
    reports them. This is for a file that is missing, not text, or not JSON.
    """

    def __init__(self, message: str, *, path: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class BroadPatternWarning(UserWarning):
    """A kind's pattern takes plain English words as ids (``close``, ``issue``, ``please``).

    Warned once where the kind is declared; the guard's audit says so too
    (``guardrail.broad_pattern``) the first time such a word is taken from
    what a user wrote. Narrow the pattern (a prefix, digits, a length), or
    use a ready-made kind: ``guard.add_kind("email", like="email")``.
    """

    def __init__(self, message: str, *, kind: str, words: tuple[str, ...]):
        super().__init__(message)
        self.kind = kind
        self.words = words
