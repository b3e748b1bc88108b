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

# Create (or update) .venv-upstream: upstream OpenStack Cyborg from PyPI
# (openstack-cyborg), for the benchmarks' --service upstream|both. It is a
# virtualenv of its own: upstream's "cyborg" package must never be
# importable from .venv, nor ours from here.
#
# Usage: tools/bench/upstream-venv.sh [VERSION]   (default 17.0.0)
#
# Versions are pinned by tools/bench/upstream-constraints.txt (a PyPI-only
# network cannot fetch OpenStack's upper-constraints from opendev.org).
# With 17.0.0 on Python 3.11 the newest releases of every dependency
# work, SQLAlchemy 2.1 and oslo.db 18 included; no pin had to be lowered.
# PyMySQL and psycopg2-binary are the database drivers of --db mysql and
# --db postgresql. The API runs under .venv's uWSGI (--virtualenv points
# it here), so both virtualenvs must use the same Python (3.11).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv-upstream}
VERSION=${1:-17.0.0}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip setuptools wheel
"$VENV/bin/pip" install -q -c tools/bench/upstream-constraints.txt \
    "openstack-cyborg==$VERSION" PyMySQL psycopg2-binary
"$VENV/bin/python" -c 'from importlib import metadata
print("openstack-cyborg", metadata.version("openstack-cyborg"))'
