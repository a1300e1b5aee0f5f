#!/usr/bin/env bash
# Install everything voxweft needs (system packages, then a virtualenv in .venv) and run
# the demo on the bundled sample. Debian/Ubuntu (as root or with sudo) or macOS + Homebrew.
#   tools/install.sh            install and run the demo
#   tools/install.sh --no-demo  install only
# On macOS it first checks the machine (Apple Silicon, a native arm64 shell, macOS 14 or
# later: mlx and torch have wheels for nothing else) and stops with one line saying what to
# do, before installing anything.
# VOXWEFT_INSTALL_PREFLIGHT_ONLY=1 (for the tests, tests/unit/test_install_mac.py): run those
# platform checks, then exit 0 without installing anything.
set -euo pipefail
cd "$(dirname "$0")/.."

# Refuse, with one line on stderr, a Mac that mlx==0.32.4 and torch==2.13.0 have no wheel for
# (they ship macOS 14+ arm64 wheels only; pip's resolver would otherwise die saying nothing).
mac_preflight() {
  local arch translated version major
  arch=$(uname -m)
  if [ "$arch" != "arm64" ]; then
    translated=$(sysctl -n sysctl.proc_translated 2>/dev/null || true)
    if [ "$arch" = "x86_64" ] && [ "$translated" = "1" ]; then
      echo "install: this shell runs under Rosetta (x86_64 on Apple Silicon); open a native arm64 terminal (e.g. arch -arm64 /bin/zsh) and rerun tools/install.sh" >&2
    else
      echo "install: this is an Intel Mac ($arch): voxweft's Mac engines (MLX) need an Apple Silicon Mac (M1 or later)" >&2
    fi
    exit 1
  fi
  version=$(sw_vers -productVersion 2>/dev/null || true)
  major=${version%%.*}
  case "$major" in
    '' | *[!0-9]*)
      echo "install: could not read the macOS version (sw_vers -productVersion printed '$version'); voxweft's MLX and torch wheels need macOS 14 (Sonoma) or later" >&2
      exit 1 ;;
  esac
  if [ "$major" -lt 14 ]; then
    echo "install: macOS $version: voxweft's MLX and torch wheels need macOS 14 (Sonoma) or later; update macOS (System Settings > General > Software Update)" >&2
    exit 1
  fi
}

# Room for what is installed, before anything is: the virtualenv is ~2.8 GB (4 GB asked, for
# pip's downloads beside it), 1 GB to update an existing one. The models go elsewhere
# (`voxweft models fetch` checks its own room).
disk_preflight() {
  local need_kb free_kb
  need_kb=$((4 * 1024 * 1024))
  [ -x .venv/bin/python ] && need_kb=$((1024 * 1024))
  free_kb=$(df -Pk . 2>/dev/null | awk 'NR == 2 {print $4}')
  case "$free_kb" in '' | *[!0-9]*) return 0 ;; esac   # df said nothing usable: go on
  if [ "$free_kb" -lt "$need_kb" ]; then
    echo "install: $((free_kb / 1024)) MB free in $(pwd), and the install needs about $((need_kb / 1024 / 1024)) GB there (the virtualenv); free some space and rerun tools/install.sh" >&2
    exit 1
  fi
}

# The architecture of the Python that will run voxweft, not the shell's: on a Mac an Intel
# Python (an old Homebrew in /usr/local, a python.org build run under Rosetta) gets no mlx
# or torch wheel, and a .venv made by another Python than this one is not reused.
python_arch() {
  "$1" -c 'import platform; print(platform.machine())' 2>/dev/null || true
}
arch_preflight() {
  local want have
  want=$(python_arch "$PYTHON")
  if [ "$(uname -s)" = Darwin ] && [ "$want" != "arm64" ]; then
    echo "install: $PYTHON runs as ${want:-nothing (it does not start)}, not arm64: MLX and torch wheels need a native arm64 Python; use Homebrew's in /opt/homebrew (PYTHON=/opt/homebrew/bin/python3.11 tools/install.sh)" >&2
    exit 1
  fi
  if [ -e .venv/bin/python ]; then
    have=$(python_arch .venv/bin/python)
    if [ "$have" != "$want" ]; then
      echo "install: the existing .venv's Python runs as ${have:-nothing (it does not start)}, $PYTHON as $want: remove it (rm -rf .venv) and rerun tools/install.sh" >&2
      exit 1
    fi
  fi
}

# The platform checks are done: with VOXWEFT_INSTALL_PREFLIGHT_ONLY=1, stop here.
preflight_done() {
  if [ "${VOXWEFT_INSTALL_PREFLIGHT_ONLY:-}" = "1" ]; then
    echo "install: preflight passed ($(uname -s) $(uname -m)); VOXWEFT_INSTALL_PREFLIGHT_ONLY=1, installing nothing"
    exit 0
  fi
}

case "$(uname -s)" in
  Darwin)
    mac_preflight
    disk_preflight
    preflight_done
    command -v brew >/dev/null || { echo "install Homebrew first (https://brew.sh)"; exit 1; }
    # What the Mac topologies (deploy/mac.toml; two Macs, the same engines: mlx-whisper,
    # CTranslate2 NLLB, VoxCPM2) and the rest need: espeak-ng for Kokoro (`voxweft demo`, the
    # default topology); portaudio and libsndfile for sounddevice and soundfile; speexdsp for
    # capture's echo canceller. No apertium:
    # no Mac topology uses it; `brew install apertium` adds the rule-based MT if you want it.
    brew install python@3.11 portaudio espeak-ng libsndfile speexdsp
    PYTHON=${PYTHON:-python3.11}
    ;;
  Linux)
    disk_preflight
    preflight_done
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    # What running needs, nothing more (tools/test.sh installs what the tests need):
    # espeak-ng: phonemes for Kokoro and the espeak engine; libportaudio2: sound devices;
    # libsndfile1: audio files; libspeexdsp1: capture's echo canceller (docs/echo.md);
    # apertium-*: rule-based MT en<->es, en<->ca, fr<->es;
    # libopenblas0-pthread: preloaded into an mlx-whisper asr (MLX's CPU build has only a
    # reference BLAS: ~5x slower).
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-dev espeak-ng libportaudio2 libsndfile1 libspeexdsp1 libopenblas0-pthread \
      apertium apertium-eng-spa apertium-eng-cat apertium-fr-es >/dev/null
    PYTHON=${PYTHON:-python3}
    ;;
  *) echo "unsupported system $(uname -s): use Debian/Ubuntu or macOS"; exit 1 ;;
esac

"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "voxweft needs Python >= 3.11"'
arch_preflight
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# mlx: the MLX engines (Metal on a Mac; the CPU build on Linux, where CI checks them);
# voxcpm: what VoxCPM2's torch backend needs, then voxcpm itself without the dependencies it
# declares (gradio, funasr, modelscope, a CUDA torchaudio...: its VoxCPM2 path needs none).
# Not -q: ~2.8 GB of wheels, each named as it comes (a silent pip looks stuck).
.venv/bin/python -m pip install --progress-bar off -e ".[mlx,voxcpm]"
.venv/bin/python -m pip install -q --no-deps "voxcpm==2.0.3" "resemblyzer==0.1.4"
echo "voxweft installed in $(pwd)/.venv (activate with: source .venv/bin/activate)"

if [ "${1:-}" != "--no-demo" ]; then
  echo "demo: interpreting tools/samples/demo-en.wav (English) into Portuguese..."
  .venv/bin/voxweft demo --out demo-out
fi
