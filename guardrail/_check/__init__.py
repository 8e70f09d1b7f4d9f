"""The verdict on one call: findings, near misses, asks and re-prompts.

- :mod:`~guardrail._check.plan`: a tool's check plan, compiled once, and the
  check of a call's identifier arguments against a ledger.
- :mod:`~guardrail._check.allowed`: the allowed path, a call whose every id is
  held, written out once per tool: one look-up per id.
- :mod:`~guardrail._check.closest`: where a refused value is closest (cut short,
  one edit off an entry, of which of a parameter's kinds), or that it is nowhere.
- :mod:`~guardrail._check.nearmiss`: a refused value one edit, one swap or only
  look-alike letters from a ledger value.
- :mod:`~guardrail._check.tokens`: the token an approval request carries,
  bound to its session's life, and reading one back.
- :mod:`~guardrail._check.approvals`: when a value's provenance calls for the
  user's word (the operator's ids too), the signed request, and recording the answer
  (and its scope).
- :mod:`~guardrail._check.reprompt`: what a refused call returns, worded for
  the model: what was wrong and what to do next.

Imports: :mod:`guardrail.ledger`, :mod:`guardrail._declare`,
:mod:`guardrail._transcript`, :mod:`guardrail.kinds` and below, never
:mod:`guardrail._provenance`; its own modules top-down in the order above.
"""
