"""Which conversation an ADK callback belongs to: one ledger per ADK session.

Private to :mod:`guardrail.integrations.google_adk`, which re-exports
:func:`session_key`. The guard's session of an ADK session is named after its
app, its user and its id together (:func:`session_key`), so two users who
give a session the same id never share a ledger.

Two context variables per plugin carry what a callback cannot be handed:

- the conversation of the run in progress, for ADK's compaction, whose
  summarizer is given events and nothing else;
- the tool call in progress, for a run that starts inside one (an
  ``AgentTool``'s agent, run by a runner of its own in a session of its own):
  its "user message" is the text the calling model wrote, not the user's.

ADK runs each tool call's callbacks and the tool in a task of its own, on a
copy of the context, so what a call sets reaches neither its sibling calls
nor the run around it.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass

from google.adk.sessions import Session

__all__ = ["Calling", "Scopes", "session_key"]


def session_key(session: Session) -> str:
    """The guard's session id of an ADK session: its app, user and id, as one JSON array.

    ``guard.ledger_for(session_key(session))`` is the conversation's ledger.
    """
    return json.dumps(
        [session.app_name, session.user_id, session.id], ensure_ascii=False, separators=(",", ":")
    )


@dataclass(frozen=True)
class Calling:
    """A tool call in progress: its conversation, and whether ADK drops a run it starts.

    An ``AgentTool`` runs its agent in a fresh in-memory session that ADK
    drops when the call returns; that session's ledger goes with it.
    """

    conversation: str
    discards_nested: bool


class Scopes:
    """The two context variables of one plugin (see the module's docstring)."""

    def __init__(self) -> None:
        self.conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            "guardrail.google_adk.conversation", default=None
        )
        self.calling: contextvars.ContextVar[Calling | None] = contextvars.ContextVar(
            "guardrail.google_adk.calling", default=None
        )
