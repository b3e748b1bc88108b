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

"""Benchmark: how long a driver's health signal takes to reach Placement.

Runs ``cyborg-all-in-one`` (its embedded Placement, SQLite) with the fake
driver reading a devices file at every discovery, every ``--interval``
seconds. ``--samples`` times, at a random moment of the discovery cycle,
the device's entry gets the signal ``--signal`` (by default
``pcie.aer-fatal``, a NoSchedule taint of the default remediation
catalog); the time until the taint's trait is on the device's resource
provider in Placement is measured, polling every 50 ms. The signal is
then cleared and the time until the trait is gone measured too (the
catalog's recovery: ``[remediation] recovery_reports`` clean reports,
``--recovery-reports``).

Prints each sample, their p50 and max, and the target: the signal in
Placement within one report interval plus 5 seconds.

    .venv/bin/python tools/bench/taint_latency.py [--interval 5]
        [--samples 5]
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

import requests  # noqa: E402

from cyborg.domain import remediation  # noqa: E402
from cyborg.domain import taints  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402

ADDRESS = '0000:10:00.0'
RUNNING = 'Cyborg all-in-one is running.'
PLACEMENT = {'OpenStack-API-Version': 'placement 1.39',
             'X-Auth-Token': 'admin'}
POLL = 0.05


def _write(path: str, signals: list[str]) -> None:
    device = {'address': ADDRESS, 'type': 'FPGA', 'resource_class': 'FPGA',
              'accelerators': 4, 'signals': signals}
    with open(path + '.new', 'w') as f:
        json.dump([device], f)
    os.replace(path + '.new', path)


def _placement_url(log: str) -> str:
    with open(log) as f:
        for line in f:
            if 'Placement:' in line:
                return line.split('Placement:', 1)[1].split()[0]
    raise RuntimeError('no Placement URL in %s' % log)


def _device_providers(placement: str) -> list[str]:
    """Every resource provider but the compute node's root."""
    response = requests.get(placement + '/resource_providers',
                            headers=PLACEMENT, timeout=10)
    response.raise_for_status()
    return [rp['uuid'] for rp in response.json()['resource_providers']
            if rp['parent_provider_uuid']]


def _has_trait(placement: str, rp: str, trait: str) -> bool:
    response = requests.get(placement + '/resource_providers/%s/traits' % rp,
                            headers=PLACEMENT, timeout=10)
    return response.ok and trait in response.json()['traits']


def _until(predicate, timeout: float) -> float | None:
    """Seconds until ``predicate()`` is true; None after ``timeout``."""
    begun = time.monotonic()
    while time.monotonic() - begun < timeout:
        if predicate():
            return time.monotonic() - begun
        time.sleep(POLL)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--interval', type=int, default=5,
                        help='[agent] discovery_interval (5)')
    parser.add_argument('--samples', type=int, default=5)
    parser.add_argument('--signal', default='pcie.aer-fatal')
    parser.add_argument('--recovery-reports', type=int, default=1,
                        help='[remediation] recovery_reports (1)')
    args = parser.parse_args()
    remedy = remediation.load_catalog(()).lookup(args.signal)
    trait = taints.trait_name(remedy.taint_key(args.signal))
    work = tempfile.mkdtemp(prefix='cyborg-bench-taint-')
    devices = os.path.join(work, 'devices.json')
    _write(devices, [])
    port = servers.free_port()
    process = servers.CyborgProcess(
        'cyborg-all-in-one', {
            'DEFAULT': {'host': 'bench-taints'},
            'agent': {'discovery_interval': args.interval},
            'remediation': {'recovery_reports': args.recovery_reports},
            'fake_driver': {'devices_file': devices}},
        work, args=['--host', servers.LOOPBACK, '--port', str(port),
                    '--placement-port', '0',
                    '--state-dir', os.path.join(work, 'state')])
    process.start()
    try:
        process.wait_log(RUNNING, 120)
        placement = _placement_url(process.log)
        [rp] = _device_providers(placement)
        print('all-in-one: discovery every %d s, signal %s -> trait %s '
              '(%s)' % (args.interval, args.signal, trait,
                        remedy.action.value))
        arrivals, departures = [], []
        for sample in range(args.samples):
            # At a random moment of the discovery cycle.
            time.sleep(random.uniform(0, args.interval))
            _write(devices, [args.signal])
            arrived = _until(lambda: _has_trait(placement, rp, trait),
                             args.interval * 3 + 30)
            _write(devices, [])
            gone = _until(lambda: not _has_trait(placement, rp, trait),
                          args.interval * (args.recovery_reports + 3) + 30)
            print('sample %d: in Placement after %s s, gone %s s after '
                  'it was cleared' % (
                      sample + 1,
                      'never' if arrived is None else '%.2f' % arrived,
                      'never' if gone is None else '%.2f' % gone))
            if arrived is None or gone is None:
                return 1
            arrivals.append(arrived)
            departures.append(gone)
        print('signal to Placement: p50 %.2f s, max %.2f s (target: at most '
              'one report interval plus 5 s = %d s): %s' % (
                  statistics.median(arrivals), max(arrivals),
                  args.interval + 5,
                  'met' if max(arrivals) <= args.interval + 5
                  else 'NOT met'))
        print('cleared to gone from Placement: p50 %.2f s, max %.2f s '
              '(%d clean reports)' % (statistics.median(departures),
                                      max(departures),
                                      args.recovery_reports))
    finally:
        process.stop()
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
