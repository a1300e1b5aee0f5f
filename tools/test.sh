#!/usr/bin/env bash
# Run every test: lint, the layers contract, unit, integration (real sockets, real supervisord)
# and the slow end-to-end runs on real speech. Needs tools/install.sh first.
#   tools/test.sh -m "not slow"   the quick subset while developing
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check actors protocol deploy tools tests
.venv/bin/lint-imports --no-cache   # the layers: arrows point down only (pyproject.toml)
exec .venv/bin/python -m pytest "$@"
