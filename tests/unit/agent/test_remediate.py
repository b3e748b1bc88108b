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

"""The agent's remediation: its catalog from [remediation], driver taints
and health in every report, resets only where the conductor says nothing
is bound, a failed driver's taints kept, changes logged once."""

import json
import logging

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import remediate
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.domain import remediation

FIRST, SECOND = '0000:10:00.0', '0000:11:00.0'


@pytest.fixture
def devices(conf, tmp_path):
    """``devices(specs)`` writes the fake driver's devices file."""
    path = tmp_path / 'devices.json'
    conf.set_override('devices_file', str(path), group='fake_driver')

    def write(*specs):
        path.write_text(json.dumps(list(specs)))
    write({'address': FIRST}, {'address': SECOND})
    yield write
    conf.clear_override('devices_file', group='fake_driver')


def _finder(conf, bound=lambda context: [], overrides=()):
    locks = driver_calls.DriverLocks()
    driver = fake.FakeDriver(conf)
    driver.name = 'fake_driver'
    return discovery.Discovery(
        'h1', 'h1', [driver], None, locks=locks,
        remediator=remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(overrides), 3),
            locks, bound_devices=bound))


def _taints(finder, context=None):
    wire, _failed, _u = finder.collect_all(context)
    return {d['address']: (d['health'], [t['key'] for t in
                                         d.get('taints', [])])
            for d in wire}


def test_an_invalid_override_stops_the_agent(conf):
    conf.set_override('override', ['xid.48: action=explode'],
                      group='remediation')
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    try:
        with pytest.raises(exception.ConfigInvalid,
                           match=r'\[remediation\] override.*explode'):
            agent_service.create(conf, transport)
    finally:
        transport.cleanup()
        conf.clear_override('override', group='remediation')


def test_overrides_reach_the_catalog(conf):
    conf.set_override('override', ['xid.94: action=ignore'],
                      group='remediation')
    assert agent_service.catalog(conf).lookup('xid.94').action == 'ignore'
    conf.clear_override('override', group='remediation')


def test_signals_and_resets_of_the_fake_driver(conf, devices, caplog):
    devices({'address': FIRST, 'signals': ['xid.48']},
            {'address': SECOND, 'signals': ['xid.48'], 'reset': 'fail'})
    finder = _finder(conf)
    # A discovery that is not sent resets nothing.
    assert _taints(finder) == {
        FIRST: ('unhealthy', ['cyborg.xid.48']),
        SECOND: ('unhealthy', ['cyborg.xid.48'])}
    devices({'address': FIRST}, {'address': SECOND, 'reset': 'fail'})
    with caplog.at_level(logging.INFO):
        found = _taints(finder, context=object())
    assert found == {
        FIRST: ('unhealthy', ['cyborg.reboot-required']),
        SECOND: ('unhealthy', ['cyborg.reboot-required', 'cyborg.xid.48'])}
    assert 'Reset device %s (fake_driver)' % FIRST in caplog.text
    assert 'Resetting device %s (fake_driver) failed' % SECOND in (
        caplog.text)


def test_a_bound_device_waits_for_its_reset(conf, devices, caplog):
    bound = [FIRST]
    devices({'address': FIRST, 'signals': ['xid.48']})
    finder = _finder(conf, bound=lambda context: bound)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert _taints(finder, object())[FIRST][0] == 'unhealthy'
    assert caplog.text.count('waits for its accelerator requests') == 1
    bound.clear()
    devices({'address': FIRST})
    assert _taints(finder, object())[FIRST] == ('healthy', [])


def test_no_reset_when_the_conductor_cannot_say(conf, devices, caplog):
    def unreachable(context):
        raise messaging.MessagingTimeout('no conductor')
    devices({'address': FIRST, 'signals': ['xid.48']})
    finder = _finder(conf, bound=unreachable)
    with caplog.at_level(logging.WARNING):
        assert _taints(finder, object())[FIRST][0] == 'unhealthy'
    assert 'no device is reset now' in caplog.text


def test_no_reset_when_disabled(conf, devices):
    devices({'address': FIRST, 'signals': ['xid.48']})
    locks = driver_calls.DriverLocks()
    driver = fake.FakeDriver(conf)
    driver.name = 'fake_driver'
    calls = []
    finder = discovery.Discovery(
        'h1', 'h1', [driver], None, locks=locks,
        remediator=remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(()), 3), locks,
            bound_devices=lambda context: calls.append(1) or [],
            reset_devices=False))
    _taints(finder, object())
    devices({'address': FIRST})
    for _ in range(3):
        assert _taints(finder, object())[FIRST][0] == 'unhealthy'
    assert calls == []


def test_a_failed_drivers_taints_are_kept(conf, devices, monkeypatch):
    devices({'address': FIRST, 'signals': ['xid.62']})
    finder = _finder(conf)
    _taints(finder)
    monkeypatch.setattr(fake.FakeDriver, 'discover',
                        lambda self: 1 / 0)
    for _ in range(5):
        assert finder.collect()[1] == ['fake_driver']
    monkeypatch.undo()
    devices({'address': FIRST})
    # Back: its taint had not been forgotten (three clean reports now).
    assert _taints(finder)[FIRST] == ('unhealthy', ['cyborg.xid.62'])


def test_taint_changes_are_logged_once(conf, devices, caplog):
    devices({'address': FIRST, 'signals': ['pcie.link-width']})
    finder = _finder(conf)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            _taints(finder)
        devices({'address': FIRST})
        for _ in range(4):
            _taints(finder)
    assert caplog.text.count('tainted cyborg.pcie.link-width=') == 1
    assert caplog.text.count('no longer tainted cyborg.pcie.link-width') == 1


def test_the_fake_drivers_unhealthy_option_is_the_unhealthy_taint(
        conf, devices):
    devices({'address': FIRST, 'health': 'unhealthy'})
    finder = _finder(conf)
    assert _taints(finder)[FIRST] == ('unhealthy', ['cyborg.unhealthy'])
    devices({'address': FIRST})
    assert _taints(finder)[FIRST] == ('healthy', [])


def test_taints_a_driver_declared_are_kept_beside_the_catalogs():
    from cyborg.agent import remediate
    from cyborg.domain import taints

    declared = [taints.Taint('site.maintenance', 'NoSchedule'),
                taints.Taint('cyborg.unhealthy', 'None')]
    tracked = [taints.Taint('cyborg.unhealthy', 'NoSchedule')]
    assert remediate._merged(declared, tracked) == [declared[0],
                                                    tracked[0]]
    assert remediate._merged([], tracked) == tracked
