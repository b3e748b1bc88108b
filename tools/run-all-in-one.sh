#!/usr/bin/env bash
# Set up cyborg in .venv and run the all-in-one service on 127.0.0.1:6666.
# Extra arguments go to cyborg-all-in-one (--port, --state-dir, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup-venv.sh
exec .venv/bin/cyborg-all-in-one "$@"
