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

import argparse
import json

import pytest

from cyborg import conf as conf_module
from cyborg.allinone import launch
from cyborg.clients import glance
from cyborg.cmd import all_in_one
from cyborg.common import config_checks
from cyborg.common import exception
from cyborg.conf import glance as glance_conf


def _args(**values):
    return argparse.Namespace(**dict(
        {'glance_url': None, 'bitstream_dir': None,
         'demo_hardware': False}, **values))


def _set_bitstream_source(args):
    images = launch._load_bitstreams(args, '/nonexistent')
    if images is not None:
        glance_conf.use_endpoint(conf_module.CONF, images.start().url)
    return images


def test_no_bitstream_source_leaves_glance_unconfigured(conf):
    assert _set_bitstream_source(_args()) is None
    with pytest.raises(exception.GlanceNotConfigured):
        glance.GlanceClient.from_conf(conf)


def test_glance_url_configures_glance_without_keystone(conf):
    assert _set_bitstream_source(
        _args(glance_url='http://127.0.0.1:9292')) is None
    assert conf.glance.auth_type == 'admin_token'
    assert conf.glance.endpoint_override == 'http://127.0.0.1:9292'
    assert conf.glance.token == 'admin'


def test_bitstream_dir_is_served_and_found_through_glance_options(
        conf, tmp_path):
    (tmp_path / 'gzip.gbs').write_bytes(b'bits')
    (tmp_path / 'gzip.json').write_text(json.dumps(
        {'file': 'gzip.gbs', 'properties': {'function_name': 'gzip'}}))
    images = _set_bitstream_source(
        _args(bitstream_dir=str(tmp_path)))
    try:
        client = glance.GlanceClient.from_conf(conf)
        [image] = client.find_bitstreams(function_name='gzip')
        assert image.name == 'gzip'
    finally:
        images.stop()


def test_a_bad_bitstream_dir_fails_before_anything_starts(conf, tmp_path):
    (tmp_path / 'bad.json').write_text('{')
    with pytest.raises(config_checks.ConfigProblems, match='bad.json'):
        _set_bitstream_source(_args(bitstream_dir=str(tmp_path)))


def test_the_two_sources_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        launch._parse(['--glance-url', 'http://x', '--bitstream-dir',
                       '/tmp'])
    assert 'not allowed with' in capsys.readouterr().err


def test_main_refuses_a_bad_bitstream_dir_clearly(conf, tmp_path, capsys):
    (tmp_path / 'bad.json').write_text('[]')
    status = all_in_one.main(['cyborg-all-in-one', '--state-dir',
                              str(tmp_path / 'state'), '--bitstream-dir',
                              str(tmp_path)])
    assert status == 2
    error = capsys.readouterr().err
    assert 'bad.json cannot be read' in error and 'Traceback' not in error
