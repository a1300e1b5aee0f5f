"""What an engine takes from its host: memory once loaded, and whether it computes on a GPU.

Every stage's interface (`AsrEngine`, `MtEngine`, `TtsEngine`) has these; an engine whose
model size varies works its memory out from the model's files (`models.weights_bytes`).
The start-up check (`voxweft up`, `interpret`, `doctor`) adds them up per host before
anything loads; the budget counts a GPU engine's time against the GPU, not the cores.
"""

from __future__ import annotations

from typing import ClassVar

MB = 1_000_000


class Resources:
    """Memory and device of an engine; estimated without loading anything."""

    #: Resident memory once loaded, in MB, for an engine that does not work it out.
    MEMORY_MB: ClassVar[int] = 300

    def memory_mb(self) -> int:
        """Resident memory its actor needs once loaded, in MB, estimated without loading."""
        return self.MEMORY_MB

    def on_gpu(self) -> bool:
        """Whether it computes on a GPU once loaded (its budget is then GPU time)."""
        return False


def weights_mb(size: int | None, default_mb: int) -> int:
    """MB of a model's files, or `default_mb` when their size is not known."""
    return default_mb if size is None else round(size / MB)
