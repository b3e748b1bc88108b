# Copyright 2026 The Cyborg Authors.
#
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

"""The contract of every driver with every capture of
tests/fixtures/captures: on the replay of a capture each driver loads,
discovers without failing, reports the same digest twice, and its
health and utilization parse into their known forms; the capture's own
drivers report the digest its manifest holds (what the host reported).
"""

from __future__ import annotations

import glob
import json
import os
import tarfile

from oslo_config import cfg
import pytest
from stevedore import extension

from cyborg.agent import discovery
from cyborg.conf import agent as agent_conf
from cyborg.conf import default as default_conf
from cyborg.domain import device_tree
from cyborg.domain import utilization as utilization_mod
from cyborg.hostcapture import capture
from cyborg.hostcapture import check
from cyborg.hostcapture import replay
from tests.fixtures import captures

ARCHIVES = sorted(glob.glob(os.path.join(captures.DIRECTORY, '*.tar.gz')))
DRIVERS = sorted(
    name for name in extension.ExtensionManager(
        discovery.DRIVER_NAMESPACE).names() if name != 'fake_driver')
HEALTH = {h.value for h in device_tree.Health}


def _name(archive: str) -> str:
    return os.path.basename(archive)[:-len('.tar.gz')]


def _manifest(archive: str) -> dict:
    with tarfile.open(archive) as tar:
        return json.loads(tar.extractfile(capture.MANIFEST).read())


@pytest.fixture(scope='module')
def replays(tmp_path_factory):
    """Each capture opened once: {name: Replay}."""
    work = tmp_path_factory.mktemp('replays')
    return {_name(a): replay.open_capture(a, str(work / _name(a)))
            for a in ARCHIVES}


def _conf(tmp_path, opened: replay.Replay, drivers: list[str],
          ini: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    default_conf.register_opts(conf)
    agent_conf.register_opts(conf)
    path = tmp_path / 'cyborg.conf'
    path.write_text('[DEFAULT]\nstate_path = %s\n[agent]\nhost_root = %s\n'
                    'enabled_drivers = %s\n%s' % (
                        tmp_path / 'state', opened.root, ','.join(drivers),
                        ini))
    conf(['--config-file', str(path)], project='cyborg',
         default_config_files=[])
    return conf


def _ini(name: str, driver: str) -> str:
    """The capture's own options for its own drivers (other drivers run
    on their defaults)."""
    host = captures.BY_NAME.get(name)
    if host is not None:
        return host.ini if driver in host.drivers else ''
    real = captures.REAL_BY_NAME.get(name)
    return real.ini if real is not None and driver in _manifest(
        real.archive)['drivers'] else ''


def test_the_suite_holds_a_capture_of_every_fixture_host():
    assert sorted(_name(a) for a in ARCHIVES) == sorted(
        [*captures.BY_NAME, *captures.REAL_BY_NAME])
    assert len(DRIVERS) >= 10


@pytest.mark.parametrize('archive', ARCHIVES, ids=_name)
def test_the_captured_drivers_report_what_the_host_reported(
        archive, replays, tmp_path):
    manifest = _manifest(archive)
    opened = replays[_name(archive)]
    conf = _conf(tmp_path, opened, manifest['drivers'],
                 _ini(_name(archive), manifest['drivers'][0]))
    drivers = discovery.load_drivers(conf, runner=opened.runner(),
                                     host=opened.host())
    wire, failed, _utilization = discovery.Discovery(
        'host', 'host', drivers, None).collect_all()
    assert capture.report_digest(wire, failed) == (
        manifest['report']['digest'])
    assert failed == manifest['failed_drivers']


@pytest.mark.parametrize('driver', DRIVERS)
@pytest.mark.parametrize('archive', ARCHIVES, ids=_name)
def test_every_driver_keeps_its_contract_on_every_capture(
        archive, driver, replays, tmp_path):
    opened = replays[_name(archive)]
    conf = _conf(tmp_path, opened, [driver], _ini(_name(archive), driver))
    (loaded,) = discovery.load_drivers(conf, runner=opened.runner(),
                                       host=opened.host())
    finder = discovery.Discovery('host', 'host', [loaded], None)
    digests = []
    for _round in range(2):
        wire, failed, utilization = finder.collect_all()
        assert failed == []
        digests.append(capture.report_digest(wire, failed))
        addresses = {device['address'] for device in wire}
        for device in wire:
            assert device['health'] in HEALTH
            assert device['driver'] == driver
        assert set(utilization) <= addresses
    assert digests[0] == digests[1]
    # What the driver itself answers, before the agent cleans it: health
    # of its own devices only, utilization of known metrics with values
    # they accept.
    devices = loaded.discover()
    addresses = {device.address for device in devices}
    health = loaded.health(devices)
    assert set(health) <= addresses
    assert all(isinstance(h, device_tree.Health) for h in health.values())
    measured = loaded.utilization(devices)
    assert set(measured) <= addresses
    for metrics in measured.values():
        for name, value in metrics.items():
            assert utilization_mod.METRICS[name].accepts(value), (name,
                                                                  value)


@pytest.mark.parametrize('real', captures.REAL_HOSTS, ids=lambda h: h.name)
def test_host_check_of_a_real_host_says_what_it_leaves_out(
        real, replays, tmp_path):
    opened = replays[real.name]
    manifest = _manifest(real.archive)
    assert manifest['masked'] is True
    conf = _conf(tmp_path, opened, manifest['drivers'], real.ini)
    result = check.check(conf, runner=opened.runner(), host=opened.host())
    (driver,) = result.drivers
    assert len(driver.devices) == real.devices
    assert tuple(driver.notes) == real.notes
