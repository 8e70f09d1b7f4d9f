"""A scripted CrewAI model (a ``BaseLLM``) and the fixture that keeps CrewAI offline.

CrewAI's agents speak the ReAct text format: a reply names one tool and its
JSON input (``Action:`` / ``Action Input:``), or gives the final answer; the
tool's result comes back as the agent's ``Observation``. The script is a
function of the messages the model is sent, as a real model's reply is.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from crewai import BaseLLM

Messages = list[dict[str, Any]]
Script = Callable[[Messages], str]

#: What keeps CrewAI from calling out and from asking on the console: its telemetry and its
#: run tracing off, and its test switch, which also skips its first-run questions.
OFFLINE = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_TESTING": "true",
}


def act(tool: str, **arguments: Any) -> str:
    """A reply that calls ``tool`` with ``arguments``."""
    return f"Thought: I use {tool}.\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def final(text: str = "done") -> str:
    """A reply that ends the task with ``text``."""
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


def system_of(messages: Messages) -> str:
    """The system prompt the agent was sent (where the ledger block goes)."""
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


def observations(messages: Messages) -> list[str]:
    """What the agent read as its tools' results, in order."""
    found = []
    for message in messages:
        text = str(message.get("content") or "")
        if message["role"] == "assistant" and "\nObservation: " in text:
            found.append(text.split("\nObservation: ", 1)[1])
    return found


class ScriptedLLM(BaseLLM):
    """Answers each call with ``script(messages)``; keeps every message list it was sent."""

    def __init__(self, script: Script | Sequence[str]) -> None:
        super().__init__(model="scripted")
        if callable(script):
            self.script: Script = script
        else:
            replies = list(script)
            self.script = lambda messages: replies.pop(0) if replies else final()
        self.seen: list[Messages] = []

    def call(  # type: ignore[override]
        self,
        messages: str | Messages,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> str:
        given = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        copied = [dict(message) for message in given]
        self.seen.append(copied)
        return self.script(copied)

    def supports_function_calling(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 128_000


@pytest.fixture(autouse=True)
def crewai_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CrewAI's switches off, its files in a temporary folder, and no socket leaves the machine."""
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "crewai-data"))
    connect = socket.socket.connect

    def local_only(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if self.family != socket.AF_UNIX and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a CrewAI test tried to reach {address!r}")
        return connect(self, address)

    resolve = socket.getaddrinfo

    def resolve_local(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a CrewAI test tried to look up {host!r}")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    monkeypatch.setattr(socket, "getaddrinfo", resolve_local)
