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

from guardrail import Guard
from guardrail._guard.audit import SilentLogger
from guardrail.compaction import compact

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
