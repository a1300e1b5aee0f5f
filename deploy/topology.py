"""The topology files (`deploy/*.toml`) and their loader.

The model and its table checks live below the actors (`actors.settings.topology`), so every
layer can read a topology; here they are wired to the engines layer, which constructs (never
loads) the engines of the host a process runs on to check their settings and languages.
"""

from __future__ import annotations

import os
from pathlib import Path

from voxweft.actors.engines import check_engine
from voxweft.actors.settings import topology as model
from voxweft.actors.settings.topology import Host, Topology, TopologyError

__all__ = ["DEFAULT_TOPOLOGY", "Host", "Topology", "TopologyError", "load", "parse"]

DEFAULT_TOPOLOGY = Path(__file__).with_name("default.toml")


def parse(raw: dict, source: str = "<topology>", host: str | None = None) -> Topology:
    """Validate a topology read from TOML for `host` (None: every host), engines included."""
    return model.parse(raw, source, host, check_engine)


def load(path: str | os.PathLike | None = None, host: str | None = None) -> Topology:
    """Read and validate a topology file (the default one when `path` is None) for `host`.

    A process that knows its host passes it: the engines of other hosts are not imported.
    """
    return model.load(path or DEFAULT_TOPOLOGY, host, check_engine)
