"""What the MLX engines (mlx-whisper, VoxCPM2 on mlx-audio) share.

- `limit_cache`: MLX keeps freed buffers in a cache for reuse, by default up to the machine's
  memory limit (about its RAM): two MLX processes on one Mac (asr and tts) would each hold
  gigabytes of freed buffers and push each other out. Each engine bounds its own cache.
- `float32`: audio out of an MLX model as a float32 numpy array, whatever the model's dtype
  (`np.asarray` refuses a bfloat16 MLX array: numpy has no bfloat16).
- `on_metal`: whether MLX computes on the GPU here (Apple Silicon) or on the CPU (Linux CI).

MLX is imported inside each function: an engine module stays cheap to import.
"""

from __future__ import annotations

import numpy as np

MB = 1 << 20


def on_metal() -> bool:
    """Whether MLX runs on the GPU (Metal) in this process; False when MLX is missing."""
    try:
        import mlx.core as mx
    except ImportError:
        return False
    return bool(mx.metal.is_available())


def limit_cache(mb: int) -> int:
    """Bound MLX's cache of freed buffers to `mb` MiB (0: keep none); return the old bound."""
    import mlx.core as mx

    return int(mx.set_cache_limit(int(mb) * MB)) // MB


def float32(array) -> np.ndarray:
    """An MLX (or numpy) array as float32 numpy, bfloat16 and float16 included."""
    import mlx.core as mx

    if isinstance(array, mx.array):
        if array.dtype != mx.float32:
            array = array.astype(mx.float32)
        return np.array(array, copy=False)
    return np.asarray(array, np.float32)
