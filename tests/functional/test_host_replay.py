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

"""The all-in-one on a captured host: ``--host-root`` names the capture
archive of the demo host, no vendor command is on PATH, and the devices
the capture's drivers reported are reported, through the replay's fake
commands."""

from __future__ import annotations

import json
import os
import tarfile
import types

from cyborg.allinone import demo_host
from cyborg.allinone import fake_tools
from cyborg.hostcapture import capture
from cyborg.hostcapture import replay
from tests.fixtures import captures
from tests.functional import conftest
from tests.functional import servers


def _config(host: captures.FixtureHost) -> dict:
    config = {'DEFAULT': {'host': 'replayed-host'},
              'agent': {'enabled_drivers': ','.join(host.drivers)}}
    for group, options in demo_host.OPTIONS.items():
        config[group] = {name: ','.join(value) if isinstance(value, list)
                         else value for name, value in options.items()}
    return config


def test_the_all_in_one_reports_a_captured_host(tmp_path):
    host = captures.BY_NAME['demo']
    no_tools = tmp_path / 'no-tools'
    no_tools.mkdir()
    # The archive is the host root; the only PATH has no command at all.
    source = types.SimpleNamespace(root=host.archive,
                                   tools_dir=str(no_tools))
    port = servers.free_port()
    with conftest.all_in_one_on_host(_config(host), str(tmp_path), source,
                                     port):
        devices = conftest.api_devices('http://%s:%d' % (servers.LOOPBACK,
                                                         port))
    with tarfile.open(host.archive) as tar:
        manifest = json.loads(tar.extractfile(capture.MANIFEST).read())
    assert len(devices) == manifest['report']['devices'] == 5
    assert sorted(d['type'] for d in devices) == [
        'FPGA', 'GPU', 'GPU', 'NIC', 'QAT']
    assert {d['hostname'] for d in devices} == {'replayed-host'}
    tools = os.path.join(tmp_path, 'state', replay.STATE_DIR, 'tools')
    ran = {call[0] for call in fake_tools.calls(tools)}
    assert {'nvidia-smi', 'adf_ctl', 'dmesg', 'fpgainfo'} <= ran, ran


def test_the_agent_refuses_a_capture_that_does_not_match_its_manifest(
        tmp_path):
    unpacked = tmp_path / 'capture'
    with tarfile.open(captures.BY_NAME['qat_4xxx'].archive) as tar:
        tar.extractall(unpacked, filter='data')
    with open(unpacked / capture.COMMANDS, 'a') as f:
        f.write(' ')
    config = servers.write_config(str(tmp_path / 'agent.conf'), {
        'DEFAULT': {'transport_url': 'fake:/',
                    'state_path': str(tmp_path / 'state')},
        'agent': {'host_root': str(unpacked),
                  'enabled_drivers': 'intel_qat_driver'}})
    agent = servers.run_script('cyborg-agent', config_file=config,
                               timeout=30)
    assert (agent.returncode, agent.stderr) == (
        2, "cyborg-agent: %s: %s does not match the manifest's hash\n"
        % (unpacked, capture.COMMANDS))
