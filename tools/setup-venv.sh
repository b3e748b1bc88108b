#!/usr/bin/env bash
# Create (or update) the virtualenv in .venv with cyborg installed, with
# what the all-in-one needs (embedded Placement, the openstack CLI).
# Usage: tools/setup-venv.sh [--test]   (--test adds the test requirements)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip setuptools wheel

reqs=(-e ".[all-in-one]")
if [ "${1:-}" = "--test" ]; then
    reqs+=(-r test-requirements.txt)
fi
"$VENV/bin/pip" install -q -c tools/constraints.txt "${reqs[@]}"
