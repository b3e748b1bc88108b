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

"""The agent's ``program`` RPC method (API 1.1) and the drivers'
``program``."""

import os

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.agent import manager
from cyborg.common import exception
from cyborg.domain import device_tree

ADDRESS = '0000:10:00.0'
CONTROLPATH = {'cpid_type': 'PCI',
               'cpid_info': device_tree.pci_address_info(ADDRESS)}


class _Discovering(base.AcceleratorDriver):
    name = 'plain'

    def discover(self) -> list[device_tree.Device]:
        return []


def _agent(conf, tmp_path) -> manager.AgentManager:
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    return manager.AgentManager('host1', None,
                                [fake.FakeDriver(conf), _Discovering()])


def _refused(agent, *args) -> Exception:
    """What ``program`` raised for the caller (the RPC server unwraps an
    expected exception)."""
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.program(None, *args)
    return caught.value.exc_info[1]


def test_program_reaches_the_driver(conf, tmp_path):
    _agent(conf, tmp_path).program(None, 'fake_driver', CONTROLPATH,
                                   '/images/b.gbs')
    assert (tmp_path / ('programmed-' + ADDRESS)).read_text() == (
        '/images/b.gbs')


def test_a_failed_program_raises(conf, tmp_path):
    conf.set_override('program_failures', [ADDRESS], group='fake_driver')
    with pytest.raises(fake.PrepareFailed, match='program device'):
        _agent(conf, tmp_path).program(None, 'fake_driver', CONTROLPATH,
                                       '/images/b.gbs')
    assert os.listdir(tmp_path) == []


def test_a_driver_that_cannot_program_refuses_clearly(conf, tmp_path):
    error = _refused(_agent(conf, tmp_path), 'plain', CONTROLPATH, '/i')
    assert isinstance(error, exception.ProgramFailed)
    assert str(error) == 'plain cannot program devices'


def test_program_needs_a_control_path(conf, tmp_path):
    error = _refused(_agent(conf, tmp_path), 'fake_driver', None, '/i')
    assert isinstance(error, exception.ProgramFailed)
    assert 'no control path' in str(error)


def test_an_unknown_driver_is_refused(conf, tmp_path):
    error = _refused(_agent(conf, tmp_path), 'other', CONTROLPATH, '/i')
    assert isinstance(error, exception.Invalid)
    assert 'not enabled' in str(error)
