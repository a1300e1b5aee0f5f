"""Voice activity detection for a 16 kHz mono float32 stream: the Silero VAD model, streaming.

:class:`SileroVad` runs the Silero VAD v6 ONNX model that ships inside faster-whisper, in
streaming form: it yields one speech probability per complete 512-sample window and carries
the LSTM state and the 64-sample context across calls, so feeding audio in arbitrary pieces
gives exactly the probabilities faster-whisper's offline ``SileroVADModel`` computes.
:class:`VadModel` is what the segmenter (:mod:`actors.segmenting`) asks of a VAD. Pure logic
(no sockets, no threads).

Window ``k`` of a stream covers samples ``[512 * k, 512 * (k + 1))`` at 16 kHz counted from
its start (media time = sample / 16000).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime

WINDOW_SAMPLES = 512
"""Samples per VAD window (32 ms); Silero v6 at 16 kHz is trained on exactly this size."""

CONTEXT_SAMPLES = 64
"""Tail of the previous window prepended to each window, as faster-whisper does."""

_STATE_SHAPE = (1, 1, 128)
# Bounds the ONNX input tensor when one push carries a lot of audio; the LSTM state is carried
# between chunks, so chunking does not change the result.
_MAX_WINDOWS_PER_RUN = 4096


def _as_mono_float32(samples: np.ndarray, *, strict: bool) -> np.ndarray:
    """Validate a mono block; ``strict`` refuses anything but float32 instead of converting."""
    array = np.asarray(samples)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D mono array, got shape {array.shape}")
    if array.dtype != np.float32:
        if strict:
            # A silent conversion would break the bit-identical pcm guarantee, and int16 input
            # would be misread as huge floats; make the caller decide.
            raise TypeError(f"expected float32 samples, got {array.dtype}")
        array = array.astype(np.float32)
    return array


class SileroVad:
    """Streaming Silero VAD v6 (the ONNX model bundled with faster-whisper), 16 kHz only.

    Each model input row is 576 samples: the last 64 samples of the previous window (zeros
    before the first window) followed by 512 new samples; the ``h``/``c`` LSTM state is carried
    from one window to the next. That is exactly what faster-whisper's ``SileroVADModel`` does
    over a whole file, so the streaming probabilities equal the offline ones.
    """

    def __init__(self, threads: int = 1, model_path: str | Path | None = None) -> None:
        """Load the model on the CPU with ``threads`` intra- and inter-op threads.

        ``model_path`` overrides the model bundled with faster-whisper (nothing is downloaded).
        """
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
        options.log_severity_level = 3  # errors only; ORT warnings are noise for a 2 MB model
        if model_path is None:
            model = resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"
            model_bytes = model.read_bytes()  # works even if the package is zipped
        else:
            model_bytes = Path(model_path).read_bytes()
        # The model is tiny and runs one window at a time: the CPU provider beats any GPU
        # round trip, and pinning it keeps an onnxruntime-gpu install from grabbing a device.
        self._session = onnxruntime.InferenceSession(
            model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.reset()

    def reset(self) -> None:
        """Forget the stream: zero LSTM state and context, drop buffered samples."""
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    @property
    def pending_samples(self) -> int:
        """Samples received but not yet scored (always fewer than one window)."""
        return len(self._pending)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Score the audio and return one speech probability per newly completed window.

        ``samples`` is 16 kHz mono of any length (float32 preferred; other dtypes are
        converted). Samples that do not complete a window are kept for the next call, so the
        k-th probability ever returned (since :meth:`reset`) always covers stream samples
        ``[512 * k, 512 * (k + 1))``.
        """
        samples = _as_mono_float32(samples, strict=False)
        if len(self._pending):
            samples = np.concatenate([self._pending, samples])
        n_windows = len(samples) // WINDOW_SAMPLES
        consumed = n_windows * WINDOW_SAMPLES
        self._pending = samples[consumed:].copy()
        if n_windows == 0:
            return np.zeros(0, dtype=np.float32)

        windows = samples[:consumed].reshape(n_windows, WINDOW_SAMPLES)
        batch = np.empty((n_windows, CONTEXT_SAMPLES + WINDOW_SAMPLES), dtype=np.float32)
        batch[0, :CONTEXT_SAMPLES] = self._context
        batch[1:, :CONTEXT_SAMPLES] = windows[:-1, -CONTEXT_SAMPLES:]
        batch[:, CONTEXT_SAMPLES:] = windows
        self._context = windows[-1, -CONTEXT_SAMPLES:].copy()

        # The v6 graph treats the batch axis as time for its LSTM (h/c are [1, 1, 128]), so a
        # multi-window run is the same computation as one run per window, only cheaper.
        probs = []
        for first in range(0, n_windows, _MAX_WINDOWS_PER_RUN):
            out, self._h, self._c = self._session.run(
                None,
                {"input": batch[first : first + _MAX_WINDOWS_PER_RUN], "h": self._h, "c": self._c},
            )
            probs.append(np.asarray(out, dtype=np.float32).reshape(-1))
        return np.concatenate(probs)


class VadModel(Protocol):
    """What the segmenter needs from a VAD; :class:`SileroVad` is the production one."""

    def reset(self) -> None:
        """Forget all state: the next sample starts a new stream."""

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Speech probabilities of every complete window in the buffered stream."""
