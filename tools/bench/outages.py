#!/usr/bin/env python3
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

"""Whole-service outages of an operator's length under Nova's cycle.

The scenarios of tests/functional/test_outages.py
(tests/functional/outage_scenarios.py), with the outage an operator
meets (60 s by default) and the services' production timeouts (``[api]
conductor_timeout`` 4 s, as the tests set it, ``[DEFAULT]
service_down_time`` 60 s): RabbitMQ stopped, the database unreachable
(every connection reset, new ones refused, through a proxy), every
database connection killed at once on the server; each while
``--clients`` clients run Nova's cycle against nova_flow.py's deployment
(two conductors, the API, one agent, a fake Nova) on a private
PostgreSQL or MariaDB (``--db``), RabbitMQ and Placement; each client
waits for its bind to resolve as long as Nova does by default (``[DEFAULT]
arq_binding_timeout``, 300 s), so a bind caught by the outage counts as
stuck only if it is. Prints, per
scenario: answers by step and status, write and read 503s, the longest
503, reads served during the outage, seconds from the end of the outage
to the first completed cycle, and what must be 0 afterwards: stuck
ARQs, ARQs left, handles in use, undelivered events, events Nova got
other than once::

    .venv/bin/python tools/bench/outages.py [--outage 60] [--db mysql]
        [--scenario 'broker down'] [--clients 4]
"""

import argparse
import os
import sys
import tempfile
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from tests.functional import outage_scenarios as scenarios  # noqa: E402
from tests.functional import placement as placement_server  # noqa: E402
from tests.functional import servers  # noqa: E402

DATABASES = {'postgresql': servers.PostgreSQLServer,
             'mysql': servers.MariaDBServer}
# What a production deployment keeps: services are seen down after 60 s.
SERVICE_DOWN_TIME = 60
# Nova's [DEFAULT] arq_binding_timeout at its default: how long a build
# waits for its bind to resolve. A bind in flight when an outage longer
# than the load's usual 30 s begins resolves after it, within this.
NOVA_ARQ_BINDING_TIMEOUT = 300
# Every number the run must leave at 0.
MUST_BE_ZERO = ('stuck', 'left_arqs', 'handles_in_use', 'unsent_events',
                'events_lost_or_twice')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--outage', type=float, default=60,
                        help='seconds each outage lasts (default 60)')
    parser.add_argument('--db', choices=sorted(DATABASES),
                        default='postgresql')
    parser.add_argument('--scenario', action='append',
                        choices=sorted(scenarios.SCENARIOS),
                        help='run only this scenario (repeatable)')
    parser.add_argument('--clients', type=int, default=4)
    args = parser.parse_args()
    chosen = args.scenario or list(scenarios.SCENARIOS)
    work_dir = tempfile.mkdtemp(prefix='cyborg-outages-')
    failed = False
    with DATABASES[args.db]() as db, servers.RabbitMQServer() as broker, \
            placement_server.PlacementServer() as placement, \
            scenarios.deployment('bench-outages', db, broker, placement,
                                 work_dir, SERVICE_DOWN_TIME) as flow:
        profile = flow.create_profile([{'resources:FPGA': '1',
                                        'trait:' + flow.trait: 'required'}])
        print('%s, %d clients, outages of %ss (load average %s)'
              % (args.db, args.clients, args.outage, _load()))
        for name in chosen:
            outage = scenarios.SCENARIOS[name](
                flow, profile, args.outage if name != 'every connection '
                'killed' else 1.0, clients=args.clients,
                recovery_timeout=args.outage + 60,
                resolve_timeout=NOVA_ARQ_BINDING_TIMEOUT)
            summary = outage.summary()
            if name == 'every connection killed':
                summary['connections_killed'] = outage.killed
            print('\n%s:' % name)
            for key, value in summary.items():
                print('  %-22s %s' % (key, value))
            bad = {key: summary[key] for key in MUST_BE_ZERO if summary[key]}
            unexpected = outage.result.unexpected()
            if bad or unexpected:
                failed = True
                print('  NOT CLEAN: %s %s' % (bad, [
                    (a.step, a.status, a.text[:100])
                    for a in unexpected[:5]]))
    print('\nload average after: %s' % _load())
    return 1 if failed else 0


def _load() -> str:
    return ' '.join('%.2f' % v for v in os.getloadavg())


if __name__ == '__main__':
    sys.exit(main())
