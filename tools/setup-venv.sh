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
#   pip runs only the first time and when setup.cfg, a requirements file
#   or the constraints changed since (see STAMP below).
#   --test adds the test requirements (uWSGI among them, built from
#   source: needs a C compiler and the Python headers) and, unless it is
#   there, upstream OpenStack Cyborg in .venv-upstream
#   (tools/bench/upstream-venv.sh: the upstream import tests run its
#   migrations); --bench adds those and the benchmarks'.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

reqs=(-e ".[all-in-one]")
case "${1:-}" in
    --test) reqs+=(-r test-requirements.txt); mode=test ;;
    --bench) reqs+=(-r test-requirements.txt -r tools/bench/requirements.txt)
             mode=bench ;;
    "") mode=run ;;
    *) echo "usage: $0 [--test|--bench]" >&2; exit 2 ;;
esac

# The upstream import tests and benchmark run upstream OpenStack Cyborg's
# own migrations, from a virtualenv of its own; made once.
if [ "$mode" != run ] && [ ! -x .venv-upstream/bin/cyborg-dbsync ]; then
    VENV=.venv-upstream tools/bench/upstream-venv.sh
fi

# pip runs only when the dependencies changed: the hash of the files that
# name them is kept in the virtualenv with the mode installed (a --bench
# install serves --test and a plain run too). An editable install needs
# nothing more when only the code changes.
STAMP="$VENV/.cyborg-setup"
hash=$(cat setup.cfg setup.py requirements.txt test-requirements.txt \
           doc/requirements.txt tools/constraints.txt \
           tools/bench/requirements.txt 2>/dev/null | sha256sum | cut -c1-64)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ]; then
    read -r done_hash done_mode < "$STAMP" || true
    if [ "$done_hash" = "$hash" ]; then
        case "$mode:$done_mode" in
            run:*|test:test|test:bench|bench:bench) exit 0 ;;
        esac
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "Creating the virtualenv $VENV and installing cyborg and its" \
         "dependencies into it (a few minutes the first time)..."
    "$PYTHON" -m venv "$VENV"
else
    echo "Dependencies changed: updating $VENV..."
fi
rm -f "$STAMP"
"$VENV/bin/pip" install -q --upgrade pip setuptools wheel
# Without -q: pip shows what it collects and installs, as it goes.
"$VENV/bin/pip" install --progress-bar on -c tools/constraints.txt \
    "${reqs[@]}" | { grep -v '^Requirement already satisfied' || true; }
"$VENV/bin/python" -c 'import cyborg' # the install did finish
echo "$hash $mode" > "$STAMP"
