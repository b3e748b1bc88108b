#!/usr/bin/env bash
# Set up everything the tests need and run the whole suite: lint, unit,
# functional (real PostgreSQL, RabbitMQ and HTTP) and client compatibility.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-test-deps.sh
tools/setup-venv.sh --test
.venv/bin/ruff check cyborg tests tools
exec .venv/bin/pytest -p no:cacheprovider tests "$@"
