"""Which conversation a run belongs to: the run's ``AgentSession``, or what ``session=`` says.

Private to :mod:`guardrail.integrations.agent_framework`, which re-exports
:data:`SessionOf`. The middleware, the context provider and the per-call
middleware all open the conversation's ledger through :class:`Sessions`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from agent_framework import AgentSession

from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger

__all__ = ["SessionOf", "Sessions"]

SessionOf = Callable[[AgentSession | None], "str | None"]
"""What names a run's conversation: the run's ``AgentSession`` (None: it has none) in, an id out.

None out: the ``with guard.session(...)`` open around the run, else the guard's default session.
"""


class Sessions:
    """The ledger of a run: its ``AgentSession``'s id by default, else ``session(...)``'s."""

    __slots__ = ("guard", "session")

    def __init__(self, guard: Guard, session: SessionOf | None) -> None:
        if not isinstance(guard, Guard):
            raise GuardrailUsageError(
                f"the Agent Framework adapter needs a guardrail Guard, not {type(guard).__name__}"
            )
        if session is not None and not callable(session):
            raise GuardrailUsageError(
                "session= takes a function of the run's AgentSession (None where the run has "
                "none) that returns the conversation id, e.g. lambda session: "
                f"session.state['user_id'], not {session!r}"
            )
        self.guard = guard
        self.session = session

    def id_of(self, agent_session: AgentSession | None) -> str | None:
        """The conversation id of a run with ``agent_session`` (None: the scope open around it)."""
        if self.session is not None:
            found = self.session(agent_session)
        else:
            found = agent_session.session_id if agent_session is not None else None
        if found is not None and not isinstance(found, str):
            raise GuardrailUsageError(
                f"session= returned {found!r}: return the conversation id as a string, or None "
                "to use the session open around agent.run"
            )
        return found or None

    @contextlib.asynccontextmanager
    async def scope(self, agent_session: AgentSession | None) -> AsyncIterator[Ledger]:
        """The run's conversation made current for the block: its ledger."""
        found = self.id_of(agent_session)
        if found is None:
            yield self._current()
            return
        async with self.guard.session(found) as ledger:
            yield ledger

    def _current(self) -> Ledger:
        try:
            return self.guard.ledger
        except GuardrailUsageError:
            raise GuardrailUsageError(
                "guardrail cannot tell which conversation this agent run belongs to: pass "
                "session=agent.create_session(session_id=conversation_id) to agent.run (the "
                "conversation is the session's), or run inside `with guard.session(...)`, or "
                "build the Guard with default_session="
            ) from None
