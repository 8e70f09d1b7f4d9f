"""What a call brings into the ledger, and on whose word.

- :mod:`~guardrail._provenance.coverage`: which declared result paths reach
  something in a result, and where a value sits in one.
- :mod:`~guardrail._provenance.harvest`: a result in, the ids at its declared
  places out (JSON paths, ``Id`` fields, a ``$`` or ``re:`` producer).
- :mod:`~guardrail._provenance.columns`: the ids one field of a list of plain
  records holds, with their statuses and notes, read a column at a time.
- :mod:`~guardrail._provenance.failure`: whether a result is a failure, by the
  tool's failure rule (``fails=``): the one rule every reader of results
  follows; a failed result yields nothing.
- :mod:`~guardrail._provenance.notes`: a few words from the record an id came
  from, so a model can tell one id from another (never harvested).
- :mod:`~guardrail._provenance.mentions`: values of a kind's shape in a result's
  free text, kept apart from declared ids (tier ``mentioned``).
- :mod:`~guardrail._provenance.recall`: the batches of a plain record a tool
  returned before, taken again without walking it when it comes back equal.
- :mod:`~guardrail._provenance.taken`: the ids a successful call vouches for by
  taking them (a write's mints, a verifying lookup's arguments).
- :mod:`~guardrail._provenance.seal`: results a server recorded, told apart
  from those a client wrote when a ledger is rebuilt from a transcript.

Imports: :mod:`guardrail._declare`, :mod:`guardrail.ledger`,
:mod:`guardrail._transcript`, :mod:`guardrail.kinds` and below; its own modules
in the order above (``failure``, ``mentions`` and ``taken`` read ``harvest``).
"""
