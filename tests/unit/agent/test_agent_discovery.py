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

"""The agent: driver loading, discovery and identity checks."""

import json
from unittest import mock

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.agent import discovery
from cyborg.common import exception
from cyborg.domain import device_tree


class Broken(base.AcceleratorDriver):
    name = 'broken'

    def discover(self):
        raise RuntimeError('sysfs exploded')


def test_load_fake_driver(conf):
    drivers = discovery.load_drivers(conf)
    assert [d.name for d in drivers] == ['fake_driver']
    assert isinstance(drivers[0], fake.FakeDriver)


def test_unknown_driver_is_a_clear_error(conf):
    conf.set_override(
        'enabled_drivers', ['fake_driver', 'nope'], group='agent'
    )
    with pytest.raises(exception.ConfigInvalid) as error:
        discovery.load_drivers(conf)
    assert 'unknown drivers: nope' in str(error.value)
    conf.clear_override('enabled_drivers', group='agent')


@pytest.mark.parametrize(
    'host, rp_name',
    [
        ('', 'node.example'),
        ('node 1', 'node.example'),
        ('node1', 'a/b'),
        ('node1', ' node'),
        ('x' * 256, 'node'),
    ],
)
def test_bad_identity_is_refused(host, rp_name):
    with pytest.raises(exception.ConfigInvalid):
        discovery.check_identity(host, rp_name)


def test_good_identity():
    discovery.check_identity('compute-1', 'compute-1.example.org')


def test_rp_name_defaults_to_fqdn(conf):
    with mock.patch('socket.getfqdn', return_value='c1.example.org'):
        assert discovery.resource_provider_name(conf) == 'c1.example.org'
    conf.set_override('resource_provider_name', 'c1', group='agent')
    assert discovery.resource_provider_name(conf) == 'c1'
    conf.clear_override('resource_provider_name', group='agent')


def test_failing_driver_is_reported_not_fatal(conf):
    conductor = mock.Mock()
    finder = discovery.Discovery(
        'h1', 'h1.example', [Broken(), fake.FakeDriver(conf)], conductor
    )
    wire, failed = finder.collect()
    assert failed == ['broken']
    assert [d['driver'] for d in wire] == ['fake_driver']
    finder.report(mock.sentinel.context)
    args = conductor.report_inventory.call_args[0]
    assert args[1:3] == ('h1', 'h1.example')
    assert args[5] == ['broken']


def test_digest_changes_with_the_tree_only(conf):
    finder = discovery.Discovery(
        'h1', 'h1', [fake.FakeDriver(conf)], mock.Mock()
    )
    first = device_tree.tree_digest(finder.collect()[0])
    assert first == device_tree.tree_digest(finder.collect()[0])
    conf.set_override('num_devices', 2, group='fake_driver')
    assert first != device_tree.tree_digest(finder.collect()[0])
    conf.clear_override('num_devices', group='fake_driver')


def test_a_tree_the_conductor_answered_is_sent_as_acknowledged(conf):
    """Once the conductor answered a report, the next reports of the same
    tree say so (the client then sends the digest alone); a new tree, or
    one whose report went unanswered, does not."""
    conductor = mock.Mock()
    conductor.report_inventory.return_value = {'changed': True,
                                               'synced': True}
    finder = discovery.Discovery(
        'h1', 'h1', [fake.FakeDriver(conf)], conductor
    )

    def acknowledged():
        finder.report(mock.sentinel.context)
        return conductor.report_inventory.call_args[1]['acknowledged']
    assert acknowledged() is False
    assert acknowledged() is True
    conf.set_override('num_devices', 2, group='fake_driver')
    try:
        conductor.report_inventory.side_effect = messaging.MessagingTimeout()
        assert acknowledged() is False
        conductor.report_inventory.side_effect = None
        assert acknowledged() is False
        assert acknowledged() is True
    finally:
        conf.clear_override('num_devices', group='fake_driver')
    assert acknowledged() is False


def test_conductor_timeout_is_survived(conf):
    conductor = mock.Mock()
    conductor.report_inventory.side_effect = messaging.MessagingTimeout()
    finder = discovery.Discovery(
        'h1', 'h1', [fake.FakeDriver(conf)], conductor
    )
    assert finder.report(mock.sentinel.context) is None


def test_fake_driver_handle_shapes(conf):
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    device = fake.FakeDriver(conf).discover()[0]
    handle = device.deployables[0].attach_handles[0]
    assert handle.attach_info == {
        'domain': '0000',
        'bus': '10',
        'device': '00',
        'function': '1',
    }
    conf.set_override('handle_type', 'MDEV', group='fake_driver')
    handle = (
        fake.FakeDriver(conf).discover()[0].deployables[0].attach_handles[0]
    )
    assert handle.attach_type == 'MDEV'
    assert handle.attach_info['asked_type'] == 'fake-mdev-1'
    conf.clear_override('handle_type', group='fake_driver')


def test_fake_driver_devices_file(conf, tmp_path):
    path = tmp_path / 'devices.json'
    path.write_text(
        json.dumps(
            [
                {
                    'address': '0000:3b:00.0',
                    'type': 'GPU',
                    'resource_class': 'PGPU',
                    'traits': ['CUSTOM_T4'],
                    'accelerators': 1,
                    'health': 'unhealthy',
                },
            ]
        )
    )
    conf.set_override('devices_file', str(path), group='fake_driver')
    (device,) = fake.FakeDriver(conf).discover()
    assert (device.type, device.health) == ('GPU', 'unhealthy')
    assert device.deployables[0].resource_class == 'PGPU'
    assert device.deployables[0].num_accelerators == 1
    path.write_text('not json')
    with pytest.raises(ValueError):
        fake.FakeDriver(conf).discover()
    conf.clear_override('devices_file', group='fake_driver')


def test_unhealthy_devices_option(conf):
    conf.set_override(
        'unhealthy_devices', ['0000:10:00.0'], group='fake_driver'
    )
    assert fake.FakeDriver(conf).discover()[0].health == 'unhealthy'
    conf.clear_override('unhealthy_devices', group='fake_driver')


def test_periodic_task_retries_sooner_when_asked():
    import threading

    from cyborg.common import service
    runs = []
    done = threading.Event()

    def task():
        runs.append(1)
        if len(runs) == 3:
            done.set()
        return 0.01  # retry almost at once

    periodic = service.PeriodicTask('t', task, interval=60)
    periodic.start()
    assert done.wait(5)
    periodic.stop()
    periodic.wait(5)


@pytest.mark.parametrize('outcome', ['returns', 'raises'])
def test_first_run_done_is_set_after_the_first_run_whatever_its_outcome(
        outcome):
    import threading

    from cyborg.common import service
    release = threading.Event()

    def task():
        release.wait(5)
        if outcome == 'raises':
            raise RuntimeError('discovery failed')

    periodic = service.PeriodicTask('t', task, interval=60)
    periodic.start()
    try:
        assert not periodic.first_run_done.wait(0.1)  # still running
        release.set()
        assert periodic.first_run_done.wait(5)
    finally:
        periodic.stop()
        periodic.wait(5)


def test_service_waits_for_the_first_runs_of_all_its_tasks(monkeypatch):
    from cyborg.common import rpc
    from cyborg.common import service
    monkeypatch.setattr(rpc, 'get_server', lambda *args: None)
    fast = service.PeriodicTask('fast', lambda: None, interval=60)
    slow = service.PeriodicTask('slow', lambda: None, interval=60)
    svc = service.RPCService(None, 'topic', 'host', None,
                             periodic_tasks=[fast, slow])
    fast.first_run_done.set()
    assert not svc.wait_first_runs(0.05)  # slow has not run
    slow.first_run_done.set()
    assert svc.wait_first_runs(0.05)


class Measured(fake.FakeDriver):
    """The fake driver, measuring its devices with ``readings``."""

    name = 'fake_driver'

    def __init__(self, conf, readings):
        super().__init__(conf)
        self.readings = readings

    def utilization(self, devices):
        if isinstance(self.readings, Exception):
            raise self.readings
        return self.readings


def _sent(conductor):
    """(digest, utilization) of the last report sent."""
    call = conductor.report_inventory.call_args
    return call[0][4], call[1]['utilization']


def test_utilization_is_sent_outside_the_digest(conf):
    """Only the utilization changed: same digest (no diff, no Placement
    call at the conductor), the new readings go with it."""
    conductor = mock.Mock()
    driver = Measured(conf, {})
    finder = discovery.Discovery('h1', 'h1', [driver], conductor)
    address = driver.discover()[0].address
    driver.readings = {address: {'gpu_percent': 10}}
    finder.report(mock.sentinel.context)
    first_digest, first = _sent(conductor)
    driver.readings = {address: {'gpu_percent': 90, 'memory_used_mib': 5}}
    finder.report(mock.sentinel.context)
    digest, utilization = _sent(conductor)
    assert digest == first_digest
    assert first == {address: {'gpu_percent': 10.0}}
    assert utilization == {address: {'gpu_percent': 90.0,
                                     'memory_used_mib': 5}}


def test_only_known_metrics_of_the_drivers_devices_are_sent(conf):
    conductor = mock.Mock()
    driver = Measured(conf, {})
    address = driver.discover()[0].address
    driver.readings = {
        address: {'gpu_percent': 101, 'memory_used_mib': -1,
                  'vfs_in_use': 1.5, 'temperature': 40, 'vfs_total': 4},
        '0000:99:00.0': {'gpu_percent': 1}}  # not one of its devices
    discovery.Discovery('h1', 'h1', [driver], conductor).report(None)
    assert _sent(conductor)[1] == {address: {'vfs_total': 4}}


def test_a_failing_utilization_costs_only_the_utilization(conf, caplog):
    conductor = mock.Mock()
    driver = Measured(conf, RuntimeError('nvidia-smi exploded'))
    finder = discovery.Discovery('h1', 'h1', [driver], conductor)
    wire, failed, utilization = finder.collect_all()
    assert (len(wire), failed, utilization) == (1, [], {})
    assert 'failed to read the utilization' in caplog.text
