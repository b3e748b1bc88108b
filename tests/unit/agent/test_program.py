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

"""The agent's ``program_image`` RPC method (API 1.2) and the drivers'
``program``."""

import hashlib
import os

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.agent import bitstream_cache
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


# program_image (API 1.2): the agent fetches the image itself -------------

DATA = b'bitstream data'
IMAGE = {'id': 'img-1', 'os_hash_algo': 'sha256',
         'os_hash_value': hashlib.sha256(DATA).hexdigest(), 'size': 14}


class _Glance:
    def __init__(self, data=DATA):
        self.data = data
        self.downloads = []

    def download(self, image_id, dest):
        self.downloads.append(image_id)
        with open(dest, 'wb') as f:
            f.write(self.data)


class _Returning(_Discovering):
    name = 'returning'

    def __init__(self, result):
        self.result = result
        self.paths = []

    def program(self, controlpath, image_path):
        self.paths.append(image_path)
        return self.result


def _imaging_agent(conf, tmp_path, glance=None, drivers=(), report=None):
    conf.set_override('mdev_dir', str(tmp_path / 'mdev'),
                      group='fake_driver')
    os.makedirs(tmp_path / 'mdev', exist_ok=True)
    source = manager.ImageSource(
        bitstream_cache.BitstreamCache(str(tmp_path / 'cache'), 1 << 20),
        glance or _Glance())
    reports = []
    return manager.AgentManager(
        'host1', None, [fake.FakeDriver(conf), _Discovering(), *drivers],
        images=lambda: source,
        report=report or reports.append), source, reports


def test_program_image_fetches_verifies_programs_and_reports(conf,
                                                             tmp_path):
    agent, source, reports = _imaging_agent(conf, tmp_path)
    assert agent.program_image(None, 'fake_driver', CONTROLPATH,
                               IMAGE) is None
    cached = str(tmp_path / 'cache' / 'img-1')
    assert (tmp_path / 'mdev' / ('programmed-' + ADDRESS)).read_text() == (
        cached)
    assert source.glance.downloads == ['img-1']
    assert len(reports) == 1
    # Programmed again: from the cache.
    agent.program_image(None, 'fake_driver', CONTROLPATH, IMAGE)
    assert source.glance.downloads == ['img-1']


def test_program_image_answers_the_function_the_driver_reports(conf,
                                                               tmp_path):
    driver = _Returning('ab' * 16)
    agent, _source, _reports = _imaging_agent(conf, tmp_path,
                                              drivers=[driver])
    assert agent.program_image(None, 'returning', CONTROLPATH,
                               IMAGE) == 'ab' * 16


def test_a_wrong_checksum_programs_nothing(conf, tmp_path):
    agent, _source, reports = _imaging_agent(conf, tmp_path,
                                             glance=_Glance(b'other'))
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.program_image(None, 'fake_driver', CONTROLPATH, IMAGE)
    assert isinstance(caught.value.exc_info[1],
                      exception.BitstreamChecksumMismatch)
    assert not (tmp_path / 'mdev' / ('programmed-' + ADDRESS)).exists()
    assert os.listdir(tmp_path / 'cache') == []
    assert reports == []


def test_a_driver_error_is_the_expected_failure(conf, tmp_path):
    conf.set_override('program_failures', [ADDRESS], group='fake_driver')
    agent, _source, reports = _imaging_agent(conf, tmp_path)
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.program_image(None, 'fake_driver', CONTROLPATH, IMAGE)
    error = caught.value.exc_info[1]
    assert isinstance(error, errors.ProgramFailed)
    assert str(error) == ('Programming %s failed: simulated failure to '
                          'program it with %s' % (
                              ADDRESS, tmp_path / 'cache' / 'img-1'))
    assert reports == []


def test_any_other_driver_exception_is_unexpected(conf, tmp_path):
    class _Broken(_Discovering):
        name = 'broken'

        def program(self, controlpath, image_path):
            raise KeyError('cpid_info')

    agent, _source, reports = _imaging_agent(conf, tmp_path,
                                             drivers=[_Broken()])
    with pytest.raises(KeyError):
        agent.program_image(None, 'broken', CONTROLPATH, IMAGE)
    assert reports == []


def test_program_image_refuses_what_cannot_be_programmed(conf, tmp_path):
    agent, _source, _reports = _imaging_agent(conf, tmp_path)
    for driver, controlpath, text in (
            ('plain', CONTROLPATH, 'plain cannot program devices'),
            ('fake_driver', None, 'no control path')):
        with pytest.raises(messaging.ExpectedException) as caught:
            agent.program_image(None, driver, controlpath,
                                dict(IMAGE, deployable='d1'))
        error = caught.value.exc_info[1]
        assert isinstance(error, exception.DeployableNotProgrammable)
        assert text in str(error) and 'd1' in str(error)


def test_without_glance_the_agent_has_no_bitstream_source(conf, tmp_path):
    agent = manager.AgentManager('host1', None, [fake.FakeDriver(conf)])
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.program_image(None, 'fake_driver', CONTROLPATH, IMAGE)
    assert isinstance(caught.value.exc_info[1], exception.NoBitstreamSource)
    with pytest.raises(exception.NoBitstreamSource):
        manager.ImageSource.from_conf(conf, None)


def test_a_failed_report_after_programming_is_only_logged(conf, tmp_path):
    def report(context):
        raise messaging.MessagingTimeout('conductor away')
    agent, _source, _reports = _imaging_agent(conf, tmp_path,
                                              report=report)
    agent.program_image(None, 'fake_driver', CONTROLPATH, IMAGE)
    assert (tmp_path / 'mdev' / ('programmed-' + ADDRESS)).exists()
