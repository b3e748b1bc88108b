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

"""The all-in-one's ready message (run as printed: see
tests/functional/test_readme.py)."""

import dataclasses
import os
import sys
from unittest import mock

from cyborg.allinone import banner
from cyborg.allinone import demo_host
from cyborg.allinone import launch
from cyborg.allinone import local_images

ENDPOINTS = banner.Endpoints(api='http://127.0.0.1:7777',
                             placement='http://127.0.0.1:8779',
                             state_dir='/srv/cyborg',
                             glance='http://127.0.0.1:9999')


class _Kernel:
    class tree:
        root = '/srv/cyborg/demo-host'


def test_the_endpoints_and_state_dir_follow_the_options():
    text = banner.ready(ENDPOINTS)
    assert text.startswith(banner.RUNNING + '\n')
    assert '  API:        http://127.0.0.1:7777\n' in text
    assert 'export OS_AUTH_TYPE=none OS_ENDPOINT=http://127.0.0.1:7777' in (
        text)
    assert "'http://127.0.0.1:8779/allocation_candidates" in text
    assert '  State:      /srv/cyborg\n' in text


def test_the_metrics_endpoints_are_shown_when_served(conf):
    assert 'Metrics:' not in banner.ready(ENDPOINTS)
    endpoints = dataclasses.replace(
        ENDPOINTS, **launch._metrics_urls())
    assert ('  Metrics:    http://127.0.0.1:9656/metrics (conductor), '
            'http://127.0.0.1:9657/metrics (agent)\n') in banner.ready(
        endpoints)
    conf.set_override('enabled', False, group='metrics')
    try:
        assert launch._metrics_urls() == {}
    finally:
        conf.clear_override('enabled', group='metrics')


def test_the_client_is_this_installations():
    bin_dir = os.path.dirname(sys.executable)
    with mock.patch('os.access', return_value=True):
        text = banner.ready(ENDPOINTS)
    assert '  export PATH=%s:"$PATH"\n' % bin_dir in text
    with mock.patch('os.access', return_value=False):
        text = banner.ready(ENDPOINTS)
    assert 'export PATH' not in text
    assert 'pip install python-openstackclient' in text


def test_profiles_use_the_group_form_and_name_the_microversion():
    text = banner.ready(ENDPOINTS)
    assert "'[{" not in text  # the deprecated JSON positional form
    assert '--group resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required' in (
        text)
    assert ('openstack --os-accelerator-api-version 2.2 accelerator device '
            'profile show try-fpga') in text


def test_the_nova_and_glance_commands_are_explained():
    text = banner.ready(ENDPOINTS)
    words = text.replace('\n', ' ')
    assert '`openstack accelerator arq bind` looks the instance up' in words


def test_the_demo_table_is_aligned(tmp_path):
    images = local_images.ImageServer()
    demo_host.write_bitstreams(str(tmp_path))
    ids = images.load_directory(str(tmp_path))
    text = banner.ready(ENDPOINTS, _Kernel, images)
    lines = text.splitlines()
    [header] = [i for i, line in enumerate(lines)
                if line.startswith('  Address ')]
    rows = lines[header:header + 6]
    starts = {line.index('resources:') for line in rows[1:]}
    assert starts == {rows[0].index('--group')}
    for address, _device, group in banner.demo_groups():
        assert any(r.startswith('  ' + address) and r.endswith(group)
                   for r in rows)
    for image_id in ids:
        assert image_id in text
    assert 'local Glance (http://127.0.0.1:9999)' in text
