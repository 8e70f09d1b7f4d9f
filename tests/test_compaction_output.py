"""compact() on a sample of the airline corpus writes, byte for byte, what it wrote before.

Work done to make compaction faster must not change what it writes: the
compacted messages and the report of every second conversation of the
first forty, at keep_recent 0, 2 and 4, are hashed and compared with the
digest stored here. The seal is left out (each ledger draws its own key);
tokens are counted as characters, so tiktoken being installed or not
changes nothing. A change that means to alter the output updates the
digest, and says why in its commit.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from guardrail import Guard
from guardrail._guard.audit import SilentLogger
from guardrail.compaction import compact, compact_text

from .conftest import AIRLINE_MANIFEST, corpus_conversations

#: sha256 of the sample's compacted messages and reports (airports noted by the flight that
#: names them, ids the user named said so where that tells them apart).
DIGEST = "8efb76992d10c775028547c2b70932d32804c5ca5e8cd282db29547859890326"

_SEAL = re.compile(r"\(seal [0-9a-f]{32}\)")


def sample_digest() -> str:
    guard = Guard.from_manifest(AIRLINE_MANIFEST, logger=SilentLogger())
    digest = hashlib.sha256()
    for messages in corpus_conversations()[:40:2]:
        for keep in (0, 2, 4):
            out = compact(messages, guard.new_ledger(), guard=guard, keep_recent=keep, tokens=len)
            written = json.dumps([out.messages, out.report.to_dict()], sort_keys=True, default=repr)
            digest.update(_SEAL.sub("(seal)", written).encode())
    return digest.hexdigest()


def test_corpus_sample_compacts_as_before() -> None:
    assert sample_digest() == DIGEST


#: sha256 of more paths through compaction on the same sample: keep_recent 1, the
#: characters / 4 estimate (no token counter given), a second compaction of the grown
#: conversation on the live ledger (the earlier block read back), compact_text, and what
#: a summarizer of its own is given (the masked part, the roles, the notes).
WIDER_DIGEST = "d0c806401eb304e09133d4af80799621467b80b46b01255e14958c97cc6e8394"


def _seen_by(record: list[Any]) -> Any:
    def summarize(messages: Any, roles: Any, *, notes: Any = None) -> str:
        record.append([messages, roles, notes])
        return "The user asked; the agent answered."

    return summarize


def wider_digest() -> str:
    guard = Guard.from_manifest(AIRLINE_MANIFEST, logger=SilentLogger())
    digest = hashlib.sha256()

    def add(value: Any) -> None:
        written = json.dumps(value, sort_keys=True, default=repr)
        digest.update(_SEAL.sub("(seal)", written).encode())

    for messages in corpus_conversations()[:40:2]:
        out = compact(messages, guard.new_ledger(), guard=guard, keep_recent=1)
        add([out.messages, out.report.to_dict()])
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        third, two_thirds = users[len(users) // 3], users[2 * len(users) // 3]
        ledger = guard.new_ledger()
        first = compact(messages[:third], ledger, guard=guard, keep_recent=1, tokens=len)
        grown = [*first.messages, *messages[third:two_thirds]]
        second = compact(grown, ledger, guard=guard, keep_recent=2, tokens=len)
        grown = [*second.messages, *messages[two_thirds:]]
        again = compact(grown, ledger, guard=guard, keep_recent=1)
        add([first.report.to_dict(), second.messages, second.report.to_dict()])
        add([again.messages, again.report.to_dict()])
        add(compact_text(messages, guard.new_ledger(), guard=guard))
        record: list[Any] = []
        mine = compact(messages, guard.new_ledger(), guard=guard, summarize=_seen_by(record))
        add([record, mine.messages, mine.report.to_dict()])
    return digest.hexdigest()


def test_wider_sample_compacts_as_before() -> None:
    assert wider_digest() == WIDER_DIGEST
