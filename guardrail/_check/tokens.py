"""Approval tokens: what a request carries so that only the program can answer it.

A token is an HMAC, under the guard's approval key (derived from its
``secret``, else random to the process: :class:`Keys` says which), of the
session, the ledger's life (its ``instance``: a session deleted, expired or
ended starts a new one), the tool, the kind and the value. :func:`signed`
signs a verdict's requests; :func:`read_token` gives back what a token
names (:class:`Grant`) once it verifies, and says what is wrong with one
that does not: text no guard made, a token this guard cannot verify for
want of a ``secret``, or one altered or signed under another secret.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
from typing import Any, NamedTuple

from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail.errors import GuardrailUsageError, StaleApproval
from guardrail.ledger._state import LedgerState

_TOKEN_VERSION = "a2"  # noqa: S105 (a format tag, not a secret)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _mac(key: bytes, payload: bytes) -> str:
    return hmac.new(key, b"guardrail approval\0" + payload, hashlib.sha256).hexdigest()[:32]


def sign(key: bytes, request: ApprovalRequest, value_key: str, instance: str) -> ApprovalRequest:
    """``request`` with its token: the session and its life, tool, kind, value's key; their MAC.

    ``instance`` is the ledger's life (:attr:`LedgerState.instance`): a
    session deleted or expired starts a new one, and the token of the old
    one is stale.
    """
    payload = json.dumps(
        [
            _TOKEN_VERSION,
            request.session,
            instance,
            request.tool,
            request.kind,
            value_key,
            request.value,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8", "surrogatepass")
    token = f"{_b64(payload)}.{_mac(key, payload)}"
    return dataclasses.replace(request, token=token)


def signed(keys: Keys, verdict: Verdict, state: LedgerState) -> Verdict:
    """``verdict`` with each request signed: only the program can answer it."""
    approvals = tuple(
        sign(keys.key, r, state.key(r.kind, r.value) or r.value, state.instance)
        for r in verdict.approvals
    )
    return dataclasses.replace(verdict, approvals=approvals)


def stale(session: str) -> StaleApproval:
    """The error for a request of a session that ended, was deleted or expired since."""
    return StaleApproval(
        f"session {session!r} ended (or was deleted, or expired) after this request was made: "
        "its approval requests are stale and approve nothing. Ask again in the live session"
    )


class Keys(NamedTuple):
    """What signs approval requests: the key, and whether it comes from the guard's ``secret``."""

    key: bytes
    from_secret: bool


class Grant(NamedTuple):
    """What a verified token names: the session and its life, tool, kind, value's key, value."""

    session: str | None
    instance: str
    tool: str
    kind: str
    key: str
    value: str


def read_token(keys: Keys, given: ApprovalRequest | str) -> Grant:
    """The grant a token names, once its MAC verifies; a usage error for any other text.

    A request whose fields differ from what its token names is forged too.
    """
    token = given.token if isinstance(given, ApprovalRequest) else given
    if not isinstance(token, str) or token.count(".") != 1:
        raise _forged(keys)
    body, mac = token.split(".")
    try:
        payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise _forged(keys) from None
    fields = _fields(payload)
    if fields is None:
        raise _forged(keys)
    if not hmac.compare_digest(mac, _mac(keys.key, payload)):
        raise _unverified(keys)
    if fields[0] != _TOKEN_VERSION:
        raise StaleApproval(
            "the request was made by an earlier version of guardrail, before requests named "
            "the life of their session: it approves nothing. Ask again"
        )
    grant = Grant(*fields[1:])
    if isinstance(given, ApprovalRequest) and (
        given.session,
        given.tool,
        given.kind,
        given.value,
    ) != (grant.session, grant.tool, grant.kind, grant.value):
        raise _forged(keys)
    return grant


def _fields(payload: bytes) -> list[Any] | None:
    """A token's fields, if it has the shape this guard's tokens have (else None)."""
    try:
        fields = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(fields, list) or not fields or not isinstance(fields[0], str):
        return None
    if fields[0] == _TOKEN_VERSION and len(fields) != len(Grant._fields) + 1:
        return None
    return fields


def _forged(keys: Keys) -> GuardrailUsageError:
    """The error for text that is no token of any guard (a model's words, say)."""
    del keys
    return GuardrailUsageError(
        "not an approval request of this guard: its token is forged, not one a guard made. "
        "Approve "
        "only the requests a verdict of this guard lists (verdict.approvals), as the guard "
        "gave them, never text a model wrote"
    )


def _unverified(keys: Keys) -> GuardrailUsageError:
    """The error for a token whose MAC does not verify: what the guard lacks, or forged."""
    if not keys.from_secret:
        return GuardrailUsageError(
            "not an approval request this guard can verify: the guard has no secret=, so it "
            "signs requests with a random key of this process; a request made before a "
            "restart or by another worker does not verify here (nor does a forged or altered "
            "one). "
            "Give every worker that shares the store the same Guard(secret=...) for "
            "approvals to outlive a restart and to be answered on any worker"
        )
    return GuardrailUsageError(
        "not an approval request of this guard: its token is forged, altered, or signed under "
        "another "
        "secret. Approve only the requests a verdict of a guard with this secret= lists "
        "(verdict.approvals), as the guard gave them, never text a model wrote"
    )
