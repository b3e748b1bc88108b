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

# Prove the lower bounds in requirements.txt: in a fresh virtualenv,
# install every requirement at exactly its ">=" floor (a constraints file
# generated from requirements.txt), install cyborg itself with --no-deps,
# then import every module of the service, migrate a SQLite database,
# generate the sample config and policy, and run the unit tests on SQLite.
# A requirement without a ">=" floor fails the check.
# Usage: tools/check-floors.sh [extra pytest arguments]
# FLOORS_VENV names the virtualenv (default: a temporary one, removed at
# the end); PYTHON the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# Libraries warn of their dependencies' deprecations (eventlet).
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::DeprecationWarning}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
VENV=${FLOORS_VENV:-$work/venv}

# requirements.txt -> constraints pinning each requirement to its floor.
"$PYTHON" - requirements.txt > "$work/floors.txt" <<'EOF'
import re
import sys

line_re = re.compile(
    r'^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?'
    r'\s*>=\s*(?P<floor>[0-9][^,;\s]*)\s*(?:,[^;]*)?(?:;.*)?$')
bad = []
with open(sys.argv[1]) as f:
    for line in f:
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        match = line_re.match(line)
        if not match:
            bad.append(line)
            continue
        print('%s==%s' % (match['name'], match['floor']))
if bad:
    sys.exit('requirements without a ">=" floor: %s' % ', '.join(bad))
EOF
echo "Floors:"
sed 's/^/  /' "$work/floors.txt"

if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
    echo "$VENV is not a virtualenv: not replacing it" >&2
    exit 1
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# What the unit tests need besides the service comes unpinned.
"$VENV/bin/pip" install -q -c "$work/floors.txt" -r requirements.txt \
    pytest pytest-timeout hypothesis gunicorn
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/pip" check

# Every requirement is installed at its floor, not above it.
"$VENV/bin/python" - "$work/floors.txt" <<'EOF'
import sys
from importlib import metadata

wrong = []
for line in open(sys.argv[1]):
    name, floor = line.strip().split('==')
    installed = metadata.version(name)
    if installed != floor:
        wrong.append('%s %s (floor %s)' % (name, installed, floor))
if wrong:
    sys.exit('not at the floor: %s' % ', '.join(wrong))
print('All %d requirements at their floor.' % len(open(sys.argv[1]).readlines()))
EOF

# A private configuration: SQLite, no keystone, in-process RPC.
cat > "$work/cyborg.conf" <<EOF
[DEFAULT]
transport_url = inproc://
[api]
auth_strategy = noauth
[database]
connection = sqlite:///$work/cyborg.sqlite
EOF

"$VENV/bin/cyborg-dbsync" --config-file "$work/cyborg.conf" upgrade
"$VENV/bin/cyborg-dbsync" --config-file "$work/cyborg.conf" version
# Placement is not configured here: only the database check must pass.
"$VENV/bin/cyborg-status" --config-file "$work/cyborg.conf" upgrade check \
    > "$work/status.txt" || [ $? -le 2 ]
grep -A1 'Check: Database schema' "$work/status.txt" | grep -q 'Result: Success'

# Import every module (but alembic's env.py, which only runs inside a
# migration); cyborg.wsgi.api builds the WSGI application.
CYBORG_CONFIG_FILES="$work/cyborg.conf" "$VENV/bin/python" - <<'EOF'
import importlib
import pathlib

names = sorted(
    '.'.join(path.with_suffix('').parts).removesuffix('.__init__')
    for path in pathlib.Path('cyborg').rglob('*.py')
    if path != pathlib.Path('cyborg/db/alembic/env.py'))
for name in names:
    importlib.import_module(name)
app = importlib.import_module('cyborg.wsgi.api').application
assert callable(app), app
print('Imported %d modules; cyborg.wsgi.api:application is %r.'
      % (len(names), type(app).__name__))
EOF

"$VENV/bin/oslo-config-generator" \
    --config-file=etc/cyborg/cyborg-config-generator.conf \
    --output-file "$work/cyborg.conf.sample"
"$VENV/bin/oslopolicy-sample-generator" \
    --config-file=etc/cyborg/cyborg-policy-generator.conf \
    --output-file "$work/policy.yaml.sample"

# The unit tests, on SQLite; test_requirements.py checks the declarations
# against every installed distribution (the test requirements included).
CYBORG_TEST_DATABASES=sqlite "$VENV/bin/pytest" -p no:cacheprovider -q \
    -W ignore::UserWarning tests/unit \
    --ignore tests/unit/test_requirements.py "$@"
