"""What a tool takes and gives: parameter and result paths, tool specs, manifests.

The first step of the pipeline (declare, harvest, ledger, check, guard):
everything a program says about its tools is validated and compiled here,
once, into the :class:`~guardrail._declare.spec.ToolSpec` the later steps read.

- :mod:`~guardrail._declare.paths`: the path syntax (``a.b``, ``a[*]``, ``a.*``,
  ``a.~``) compiled, and walked over results and arguments.
- :mod:`~guardrail._declare.spec`: ``Id`` annotations, decorator options and
  declarations made one :class:`~guardrail._declare.spec.ToolSpec`.
- :mod:`~guardrail._declare.failure`: a tool's failure rule (``fails=``): what
  its results look like when it failed, compiled.
- :mod:`~guardrail._declare.manifest`: kinds and tools as data (JSON or TOML).
- :mod:`~guardrail.kinds._operator`: the ids of a kind the operator knows before a
  conversation starts (a catalog, a loader, a policy text), tier ``operator``.
- :mod:`~guardrail._declare.definitions`: tool definitions as sent to a model
  (OpenAI, Anthropic, MCP), read as one shape.
- :mod:`~guardrail._declare.describe`: how an identifier parameter is described
  to the model in a tool's JSON schema.
- :mod:`~guardrail._declare.arguments`: a call's arguments as the model gave
  them (a mapping, or JSON text) made one mapping.

Imports: :mod:`guardrail.kinds` (normalisers), :mod:`guardrail.errors`, and its
own modules (``spec`` reads ``paths``, ``describe`` and ``failure``; ``failure``
reads ``paths``).
"""
