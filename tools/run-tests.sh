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

# Set up everything the tests need and run the whole suite: lint, unit,
# functional (real PostgreSQL, RabbitMQ and HTTP) and client compatibility.
# Extra arguments go to pytest.
#
# The suite runs in CYBORG_TEST_WORKERS (default 4) pytest-xdist workers,
# a module whole on one worker (--dist loadfile: its module-scoped
# deployments start once), the longest modules handed out first
# (tests/conftest.py; --no-loadscope-reorder keeps that order). Most
# functional tests wait on the services they started, so even a 2-core
# machine runs more workers than cores. The 20 slowest tests are listed
# at the end.
#
# The tree is compiled to bytecode first: the suite starts many
# processes that import this checkout's cyborg (services, commands, fake
# vendor tools), and where PYTHONDONTWRITEBYTECODE is set (as in many CI
# images) none of them writes what it compiled, so each would compile
# its modules again (about 0.4 s of CPU for a service's 200 modules).
# So are the test modules as pytest rewrites them (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-test-deps.sh
tools/setup-venv.sh --test
.venv/bin/ruff check cyborg tests tools
.venv/bin/pycodestyle cyborg tests tools
.venv/bin/mypy
.venv/bin/python -m compileall -q -j 0 cyborg tests tools
# pytest keeps a test module's assertion rewrite only where bytecode may
# be written; each worker would otherwise rewrite every module again
# (about 13 s of CPU a worker). Two collections, one per core, write them.
PYTHONDONTWRITEBYTECODE= .venv/bin/pytest -p no:cacheprovider --collect-only \
    -q tests/unit >/dev/null &
PYTHONDONTWRITEBYTECODE= .venv/bin/pytest -p no:cacheprovider --collect-only \
    -q tests --ignore=tests/unit >/dev/null
wait $!
exec .venv/bin/pytest -p no:cacheprovider -n "${CYBORG_TEST_WORKERS:-4}" \
    --dist loadfile --no-loadscope-reorder --durations=20 tests "$@"
