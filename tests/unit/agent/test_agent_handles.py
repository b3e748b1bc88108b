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
RPC methods: each preparation done leaves one INFO line."""

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.agent import manager
from cyborg.common import exception

LOGGER = 'cyborg.agent.manager'
INFO = {'bus': '0b', 'device': '00', 'domain': '0000', 'function': '1'}


class _Driver(base.AcceleratorDriver):
    name = 'recording'

    def __init__(self, fail=False):
        self.fail = fail
        self.calls = []

    def discover(self):
        return []

    def prepare_attach_handle(self, handle, handle_uuid):
        if self.fail:
            raise exception.Invalid(reason='no free VF')
        self.calls.append(('prepare', handle.attach_type, handle_uuid))

    def release_attach_handle(self, handle, handle_uuid):
        self.calls.append(('release', handle.attach_type, handle_uuid))


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelname == 'INFO']


def test_each_preparation_and_release_is_logged(caplog):
    caplog.set_level('INFO', logger=LOGGER)
    driver = _Driver()
    agent = manager.AgentManager('host1', None, [driver])
    agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1')
    agent.release_attach_handle(None, 'recording', 'PCI', INFO, 'h1')
    assert driver.calls == [('prepare', 'PCI', 'h1'),
                            ('release', 'PCI', 'h1')]
    assert _lines(caplog) == [
        'Prepared attach handle h1 (PCI bus=0b device=00 domain=0000 '
        'function=1, driver recording)',
        'Released attach handle h1 (PCI bus=0b device=00 domain=0000 '
        'function=1, driver recording)']


def test_a_failed_preparation_logs_no_success(caplog):
    caplog.set_level('INFO', logger=LOGGER)
    agent = manager.AgentManager('host1', None, [_Driver(fail=True)])
    with pytest.raises(messaging.ExpectedException):
        agent.prepare_attach_handle(None, 'recording', 'PCI', INFO, 'h1')
    assert _lines(caplog) == []
