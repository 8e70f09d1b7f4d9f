"""Plain values every layer shares: the bottom of the package, importing nothing of guardrail.

- :mod:`~guardrail._data.entry`: what a ledger holds about one id (an entry,
  a tombstone, a drop mark) and each as a record, the one written form.
- :mod:`~guardrail._data.rows`: records as rows, the short form a store writes.
- :mod:`~guardrail._data.batch`: the ids one source found, as columns, the
  form ids travel in to a ledger.
- :mod:`~guardrail._data.verdict`: what a check decides (findings, verdicts,
  approval requests).
- :mod:`~guardrail._data.text`: what is repeated of a value, cut short; word
  characters, tokens and ellipses, defined once.

Imports: the standard library, and its own modules in the order above
(``rows`` reads ``entry``; ``verdict`` reads ``entry`` and ``text``).
"""
