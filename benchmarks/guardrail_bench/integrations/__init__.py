"""The runtime adapters' groups: what each adds to a tool call, beside the runtime's own cost.

One module per adapter, each importing its runtime only when its group runs, and
each measuring with the runtime's own fake or scripted model (no network).
"""
