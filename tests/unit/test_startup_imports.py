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

"""What each service imports at start.

A service's start-up CPU is mostly imports (about 2.5 s of a 2-core
machine's CPU for a conductor that imported everything). Libraries a
process uses only for some work are imported when that work first runs:
openstacksdk with Glance (FPGA programming) and oslo.limit's enforcer,
SQLAlchemy and pecan only where there is a database or an API, and
eventlet's green DNS resolver never (:mod:`cyborg.common.eventlet_unused`).
Each case runs in a fresh interpreter, as the service starts.
"""

import json
import os
import subprocess
import sys

import pytest

# Modules a process must not have imported after importing its entry
# point, per entry point.
LATER = ('openstack', 'oslo_limit.limit', 'eventlet.support.greendns',
         'dns')
NOT_AT_START = {
    'cyborg.cmd.agent': LATER + ('sqlalchemy', 'oslo_db.sqlalchemy', 'pecan'),
    'cyborg.cmd.conductor': LATER + ('pecan',),
    'cyborg.cmd.api': LATER,
    'cyborg.cmd.dbsync': LATER + ('pecan',),
    'cyborg.cmd.manage': LATER,
    'cyborg.wsgi': LATER,
}

PROBE = '''
import json, sys
import %s
print(json.dumps(sorted(sys.modules)))
'''


def _imported(module: str, env: dict | None = None) -> set[str]:
    result = subprocess.run([sys.executable, '-c', PROBE % module],
                            capture_output=True, text=True, check=True,
                            env=env)
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize('entry_point', sorted(NOT_AT_START))
def test_an_entry_point_imports_only_what_its_start_needs(entry_point):
    imported = _imported(entry_point)
    early = sorted(name for name in imported
                   for later in NOT_AT_START[entry_point]
                   if name == later or name.startswith(later + '.'))
    assert early == []


def test_an_operator_can_keep_eventlets_green_dns():
    """The environment's own EVENTLET_NO_GREENDNS wins."""
    env = dict(os.environ, EVENTLET_NO_GREENDNS='no')
    imported = _imported('cyborg.cmd.conductor', env)
    assert 'eventlet.support.greendns' in imported
