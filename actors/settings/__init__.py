"""What every layer above the wire reads: checked settings, tables, topology and manifest.

The actors' tables, the topology model and the engine manifest: data and checks only; no
model, no socket, nothing from a layer above.
"""
