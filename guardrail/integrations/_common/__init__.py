"""What every runtime adapter shares; each adapter's own helpers live in its own folder.

- :mod:`~guardrail.integrations._common.tools`: a runtime's tool (its schema,
  its aliases, its ``Id`` annotations) bound to a guard's declaration.
- :mod:`~guardrail.integrations._common.asking`: a call that waits for the
  user, in any runtime: enforced, approved, declined, shown.
- :mod:`~guardrail.integrations._common.every_turn`: the ledger block put in
  front of the model every turn.
- :mod:`~guardrail.integrations._common.compaction`: compaction options checked
  once for every runtime.
- :mod:`~guardrail.integrations._common.marks`: the marks a schema carries for
  an identifier parameter.

Imports: the public guard and the core below it; no runtime's package.
"""
