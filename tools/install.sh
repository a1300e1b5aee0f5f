#!/usr/bin/env bash
# Install everything voxweft needs (system packages, then a virtualenv in .venv) and run
# the demo on the bundled sample. Debian/Ubuntu (as root or with sudo) or macOS + Homebrew.
#   tools/install.sh            install and run the demo
#   tools/install.sh --no-demo  install only
set -euo pipefail
cd "$(dirname "$0")/.."

case "$(uname -s)" in
  Darwin)
    command -v brew >/dev/null || { echo "install Homebrew first (https://brew.sh)"; exit 1; }
    brew install python@3.11 portaudio espeak-ng libsndfile apertium
    PYTHON=${PYTHON:-python3.11}
    ;;
  Linux)
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    # espeak-ng: phonemes for Kokoro and the espeak engine; libportaudio2: sound devices;
    # libsndfile1: audio files; pulseaudio: the null sink the device tests play into;
    # apertium-*: rule-based MT en<->es, en<->ca, fr<->es; libopenblas0-pthread: preloaded
    # into an mlx-whisper asr (MLX's CPU build has only a reference BLAS: ~5x slower);
    # iproute2: the network namespaces the two-host tests run in; faketime: one of those
    # hosts' clock shifted (libfaketime), for the clock-offset test; chromium and
    # chromium-driver: the captions page is tested in a real (headless) browser.
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-dev espeak-ng libportaudio2 libsndfile1 libopenblas0-pthread \
      pulseaudio pulseaudio-utils libasound2-plugins iproute2 faketime \
      chromium chromium-driver \
      apertium apertium-eng-spa apertium-eng-cat apertium-fr-es >/dev/null
    PYTHON=${PYTHON:-python3}
    ;;
  *) echo "unsupported system $(uname -s): use Debian/Ubuntu or macOS"; exit 1 ;;
esac

"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "voxweft needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# mlx: the MLX engines (Metal on a Mac; the CPU build on Linux, where CI checks them);
# voxcpm: what VoxCPM2's torch backend needs, then voxcpm itself without the dependencies it
# declares (gradio, funasr, modelscope, a CUDA torchaudio...: its VoxCPM2 path needs none).
.venv/bin/python -m pip install -q -e ".[test,mlx,voxcpm]"
.venv/bin/python -m pip install -q --no-deps "voxcpm==2.0.3" "resemblyzer==0.1.4"
echo "voxweft installed in $(pwd)/.venv (activate with: source .venv/bin/activate)"

if [ "${1:-}" != "--no-demo" ]; then
  echo "demo: interpreting tools/samples/demo-en.wav (English) into Portuguese..."
  .venv/bin/voxweft demo --out demo-out
fi
