#!/usr/bin/env bash
# Run every test: lint, the layers contract, unit, integration (real sockets, real supervisord)
# and the slow end-to-end runs on real speech. Needs tools/install.sh first; installs what the
# tests need beyond running, once (and says so).
#   tools/test.sh -m "not slow"   the quick subset while developing
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests need and running does not: pulseaudio (+ utils, and ALSA's plugin for it):
# the null sink the device tests play into; iproute2: the network namespaces the two-host
# tests run in; faketime: one of those hosts' clock shifted (libfaketime); chromium and
# chromium-driver: the captions page tested in a real (headless) browser; pip's `test` extra.
TEST_APT="pulseaudio pulseaudio-utils libasound2-plugins iproute2 faketime chromium chromium-driver"
STAMP=.venv/.voxweft-test-deps

test_deps() {
  local want sudo=""
  [ -x .venv/bin/python ] || { echo "test: no .venv here: run tools/install.sh first" >&2; exit 1; }
  # What is installed is written down: the same list and pyproject.toml again install nothing.
  want="$(uname -s) apt: $TEST_APT; pip: $(cksum < pyproject.toml)"
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && return 0
  echo "test: installing what the tests need (once; tools/install.sh installs only what running needs)"
  if [ "$(uname -s)" = Linux ]; then
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "test: system packages: $TEST_APT"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      $TEST_APT >/dev/null
  fi
  echo "test: Python packages: voxweft's test extra (pytest, ruff, import-linter, selenium...)"
  # voxcpm is installed without the dependencies it declares (install.sh): pip would call
  # that an ERROR here, though nothing of it is missing for voxweft.
  .venv/bin/python -m pip install -q --no-warn-conflicts -e ".[test]"
  echo "$want" > "$STAMP"
}

test_deps
.venv/bin/ruff check actors protocol deploy tools tests
.venv/bin/lint-imports --no-cache   # the layers: arrows point down only (pyproject.toml)
exec .venv/bin/python -m pytest "$@"
