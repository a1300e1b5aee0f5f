#!/usr/bin/env bash
# Run every test: lint, unit, integration (real sockets, real supervisord) and the slow
# end-to-end runs on real speech. Needs tools/install.sh first.
#   tools/test.sh -m "not slow"   the quick subset while developing
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check actors protocol deploy tools tests
exec .venv/bin/python -m pytest "$@"
