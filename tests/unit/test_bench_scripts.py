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

"""Every benchmark script still starts: its imports resolve and it
parses its arguments (``--help``), so a moved module cannot leave a
benchmark broken until someone runs it."""

import os
import sys

import pytest

from cyborg.domain import device_tree
from tests.functional import servers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, 'tools', 'bench')


def _scripts() -> list[str]:
    scripts = []
    for name in sorted(os.listdir(BENCH)):
        if not name.endswith('.py'):
            continue
        with open(os.path.join(BENCH, name), encoding='utf-8') as f:
            if "if __name__ == '__main__':" in f.read():
                scripts.append(name)
    return scripts


def test_the_benchmarks_are_found():
    assert {'nova_cycle.py', 'inventory_sync.py'} <= set(_scripts())


@pytest.mark.parametrize('script', _scripts())
def test_a_benchmark_starts(script):
    # Through the fork server (tests.functional.forkserver): the
    # script's own imports still run in the child.
    result = servers.run(
        [sys.executable, os.path.join(BENCH, script), '--help'],
        timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert 'usage:' in result.stdout


def test_the_inventory_benchmark_builds_a_reportable_tree():
    sys.path.insert(0, ROOT)
    try:
        from tools.bench import inventory_sync
    finally:
        sys.path.remove(ROOT)
    wire = inventory_sync.bench_tree(2)
    assert [d['address'] for d in wire] == ['0000:10:00.0', '0000:11:00.0']
    changed = inventory_sync.bench_tree(2, changed=True)
    assert changed[0]['deployables'][0]['num_accelerators'] == 5
    assert changed[1] == wire[1]


@pytest.mark.parametrize('kind,devices,accelerators', [
    ('gpu8', 8, 1), ('qat2x16', 2, 16)])
def test_the_hardware_trees_are_what_the_drivers_report(
        kind, devices, accelerators):
    sys.path.insert(0, ROOT)
    try:
        from tools.bench import hardware_trees
    finally:
        sys.path.remove(ROOT)
    wire = hardware_trees.wire_tree(kind)
    assert len(wire) == devices
    assert {sum(dep['num_accelerators'] for dep, _, _ in
                device_tree.walk_wire(d['deployables']))
            for d in wire} == {accelerators}
    assert {d['health'] for d in wire} == {'healthy'}
    assert hardware_trees.wire_tree(kind) == wire  # stable
    assert hardware_trees.wire_tree(kind, changed=True) != wire


def test_the_upstream_import_benchmark_data_is_our_fake_drivers():
    """The generated upstream rows import without a problem, and each
    device's handles name the PCI functions our fake driver reports for
    the device at the same address (what adoption matches on)."""
    from oslo_config import cfg

    from cyborg.accelerator.drivers.fake import driver as fake
    from cyborg.accelerator.drivers.fake import opts as fake_driver_conf
    from cyborg.db import upstream_import
    from cyborg.domain import adoption
    from cyborg.domain import upstream
    sys.path.insert(0, ROOT)
    try:
        from tools.bench import upstream_import as bench
    finally:
        sys.path.remove(ROOT)
    rows = bench.upstream_rows(['h0', 'h1'], 2, 8)
    report = upstream.ImportReport('source', 'b47c8f2d1e3a')
    planned = upstream_import.plan(rows, report)
    assert report.problems == []
    assert report.states['Bound'] == {'Bound': 4}
    conf = cfg.ConfigOpts()
    fake_driver_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('num_devices', 2, group='fake_driver')
    ours = {device['address']: {
        adoption.pci_function(handle['attach_info'])
        for handle in device['deployables'][0]['attach_handles']}
        for device in device_tree.tree_to_wire(
            fake.FakeDriver(conf).discover())}
    by_uuid = {d['uuid']: d for d in planned.rows['devices']}
    functions: dict[tuple[str, str], set] = {}
    deployables = {d['uuid']: d for d in planned.rows['deployables']}
    for handle in planned.rows['attach_handles']:
        device = by_uuid[deployables[handle['_deployable']]['_device']]
        functions.setdefault((device['hostname'], device['address']),
                             set()).add(
            adoption.pci_function(handle['attach_info']))
    assert functions == {(host, address): ours[address]
                         for host in ('h0', 'h1') for address in ours}
