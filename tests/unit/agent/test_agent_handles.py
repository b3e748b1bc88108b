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

"""The agent's ``prepare_attach_handle`` and ``release_attach_handle``
RPC methods: the driver is told the preparation it declared, a
:class:`~cyborg.accelerator.drivers.errors.DriverError` is the call's
expected failure, and each preparation done leaves one INFO line."""

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import discovery
from cyborg.agent import manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.domain import device_tree

LOGGER = 'cyborg.agent.manager'
INFO = {'bus': '0b', 'device': '00', 'domain': '0000', 'function': '1'}


class _Driver(base.AcceleratorDriver):
    name = 'recording'

    def __init__(self, fail=None, devices=()):
        self.fail = fail
        self.devices = list(devices)
        self.calls = []

    def discover(self):
        return self.devices

    def prepare_attach_handle(self, handle, handle_uuid, preparation):
        if self.fail is not None:
            raise self.fail
        self.calls.append(('prepare', handle.attach_type, handle_uuid,
                           preparation))

    def release_attach_handle(self, handle, handle_uuid, preparation):
        self.calls.append(('release', handle.attach_type, handle_uuid,
                           preparation))


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelname == 'INFO']


def test_each_preparation_and_release_is_logged(caplog):
    caplog.set_level('INFO', logger=LOGGER)
    driver = _Driver()
    agent = manager.AgentManager('host1', None, [driver])
    agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1',
                                preparation='vf')
    agent.release_attach_handle(None, 'recording', 'PCI', INFO, 'h1',
                                preparation='vf')
    assert driver.calls == [('prepare', 'PCI', 'h1', 'vf'),
                            ('release', 'PCI', 'h1', 'vf')]
    assert _lines(caplog) == [
        'Prepared attach handle h1 (PCI bus=0b device=00 domain=0000 '
        'function=1, preparation vf, driver recording)',
        'Released attach handle h1 (PCI bus=0b device=00 domain=0000 '
        'function=1, preparation vf, driver recording)']


def test_the_driver_gets_typed_values():
    driver = _Driver()
    agent = manager.AgentManager('host1', None, [driver])
    agent.prepare_attach_handle(None, 'recording', 'MDEV', INFO, 'h1',
                                preparation='mdev')
    [(_call, attach_type, _uuid, preparation)] = driver.calls
    assert attach_type is device_tree.AttachType.MDEV
    assert preparation is device_tree.Preparation.MDEV


def _reported(driver, preparation):
    handle = device_tree.AttachHandle(device_tree.AttachType.PCI, INFO)
    driver.devices = [device_tree.Device(
        'NIC', 'intel', 'x710', '0000:0b:00.0', [],
        [device_tree.Deployable('pf', 0, 'CUSTOM_NIC', children=[
            device_tree.Deployable('vfs', 1, 'CUSTOM_NIC',
                                   attach_handles=[handle],
                                   preparation=preparation)])])]


def test_a_call_without_preparation_gets_the_one_last_reported():
    """A conductor older than API 1.3 sends no preparation: the driver
    is told the one it declared in the host's last report."""
    driver = _Driver()
    finder = discovery.Discovery('host1', 'host1', [driver], None)
    agent = manager.AgentManager('host1', None, [driver],
                                 preparations=finder.preparations)
    _reported(driver, device_tree.Preparation.VF)
    finder.collect()
    agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1')
    # Not reported (yet): what its attach type needs by default.
    agent.release_attach_handle(None, 'recording', 'MDEV', INFO, 'h2')
    agent.release_attach_handle(None, 'recording', 'PCI', {'other': '1'},
                                'h3')
    assert driver.calls == [('prepare', 'PCI', 'h1', 'vf'),
                            ('release', 'MDEV', 'h2', 'mdev'),
                            ('release', 'PCI', 'h3', 'none')]
    # A later report without the handle forgets it.
    driver.devices = []
    finder.collect()
    agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1')
    assert driver.calls[-1] == ('prepare', 'PCI', 'h1', 'none')


def test_a_driver_error_is_the_expected_failure(caplog):
    caplog.set_level('INFO', logger=LOGGER)
    agent = manager.AgentManager('host1', None, [_Driver(
        fail=errors.PrepareFailed('no free VF'))])
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1',
                                    preparation='vf')
    assert isinstance(caught.value.exc_info[1], errors.PrepareFailed)
    assert _lines(caplog) == []


def test_any_other_exception_is_unexpected(caplog):
    caplog.set_level('INFO', logger=LOGGER)
    agent = manager.AgentManager('host1', None, [_Driver(
        fail=RuntimeError('bug'))])
    with pytest.raises(RuntimeError):
        agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1',
                                    preparation='vf')
    assert _lines(caplog) == []


@pytest.mark.parametrize('attach_type,preparation,message', [
    ('USB', 'vf', "'USB' is not a valid AttachType"),
    ('PCI', 'paint', "'paint' is not a valid Preparation")])
def test_unknown_values_are_refused(attach_type, preparation, message):
    driver = _Driver()
    agent = manager.AgentManager('host1', None, [driver])
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.release_attach_handle(None, 'recording', attach_type, INFO,
                                    'h1', preparation=preparation)
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.Invalid)
    assert str(error) == message
    assert driver.calls == []


@pytest.mark.parametrize('failure,expected', [
    (errors.PrepareFailed('no free VF'), True),
    (RuntimeError('bug'), False)])
def test_the_conductor_sees_the_failure_over_rpc(conf, caplog, failure,
                                                 expected):
    """Over a real oslo.messaging transport: a driver error reaches the
    conductor as the call's failure and leaves no traceback in the
    agent's log; any other exception reaches it too, logged as a bug."""
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    agent = manager.AgentManager('host1', None, [_Driver(fail=failure)])
    server = rpc.get_server(transport, constants.AGENT_TOPIC, 'host1', agent)
    server.start()
    try:
        api = agent_rpcapi.AgentAPI(transport, timeout=5)
        # RabbitMQ hands the conductor a RemoteError naming the class;
        # the fake transport, the exception itself.
        with pytest.raises((messaging.RemoteError, type(failure))) as caught:
            api.prepare_attach_handle(
                cyborg_context.get_admin_context(), 'host1', 'recording',
                'PCI', INFO, 'h1', 'vf')
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
    assert getattr(caught.value, 'exc_type', type(caught.value).__name__
                   ) == type(failure).__name__
    assert str(failure) in str(caught.value)
    tracebacks = [r for r in caplog.records
                  if r.levelname == 'ERROR' and r.exc_info]
    assert bool(tracebacks) is not expected
