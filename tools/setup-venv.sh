#!/usr/bin/env bash
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

# Create (or update) the virtualenv in .venv with cyborg installed, with
# what the all-in-one needs (embedded Placement, the openstack CLI).
# Usage: tools/setup-venv.sh [--test|--bench]
#   --test adds the test requirements (uWSGI among them, built from
#   source: needs a C compiler and the Python headers) and, unless it is
#   there, upstream OpenStack Cyborg in .venv-upstream
#   (tools/bench/upstream-venv.sh: the upstream import tests run its
#   migrations); --bench adds those and the benchmarks'.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip setuptools wheel

reqs=(-e ".[all-in-one]")
case "${1:-}" in
    --test) reqs+=(-r test-requirements.txt) ;;
    --bench) reqs+=(-r test-requirements.txt -r tools/bench/requirements.txt) ;;
    "") ;;
    *) echo "usage: $0 [--test|--bench]" >&2; exit 2 ;;
esac
"$VENV/bin/pip" install -q -c tools/constraints.txt "${reqs[@]}"
if [ -n "${1:-}" ] && [ ! -x .venv-upstream/bin/cyborg-dbsync ]; then
    VENV=.venv-upstream tools/bench/upstream-venv.sh
fi
