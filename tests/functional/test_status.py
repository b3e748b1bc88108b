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

"""``cyborg-status upgrade check`` against a real database and Placement."""

import datetime
import os

import sqlalchemy as sa

from cyborg.db import models
from tests.functional import servers


def _config(tmp_path, placement_url=None) -> str:
    sections = {'DEFAULT': {'service_down_time': 60},
                'database': {'connection': 'sqlite:///%s' % os.path.join(
                    tmp_path, 'cyborg.sqlite')}}
    if placement_url:
        sections['placement'] = {'auth_type': 'admin_token',
                                 'endpoint': placement_url, 'token': 'admin',
                                 'endpoint_override': placement_url}
    return servers.write_config(os.path.join(tmp_path, 'cyborg.conf'),
                                sections)


def _check(config):
    """The result, with stdout's table unwrapped into plain words."""
    result = servers.run_script('cyborg-status', 'upgrade', 'check',
                                config_file=config)
    result.stdout = ' '.join(result.stdout.replace('|', ' ').split())
    return result


def _heartbeat(tmp_path, when):
    engine = sa.create_engine('sqlite:///%s' % os.path.join(
        tmp_path, 'cyborg.sqlite'))
    with engine.begin() as connection:
        connection.execute(sa.insert(models.Service.__table__).values(
            host='h1', binary='cyborg-agent', last_seen_up=when,
            sync_requested=0, sync_done=0))
    engine.dispose()


def test_empty_database_fails(tmp_path, placement):
    (tmp_path / 'cyborg.sqlite').write_bytes(b'')
    result = _check(_config(tmp_path, placement.url))
    assert result.returncode == 2
    assert 'run "cyborg-dbsync upgrade"' in result.stdout


def test_a_missing_database_is_one_line_naming_it(tmp_path):
    result = _check(_config(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ''
    assert result.stderr == (
        'cyborg-status: cannot open the database %s: no such file (create '
        'it with "cyborg-dbsync upgrade", or set [database] connection in '
        '--config-file, or --state-dir to the state directory of a '
        'cyborg-all-in-one)\n' % (tmp_path / 'cyborg.sqlite'))


def test_healthy_deployment_passes(tmp_path, placement):
    config = _config(tmp_path, placement.url)
    servers.run_script('cyborg-dbsync', 'upgrade', config_file=config)
    _heartbeat(tmp_path, datetime.datetime.utcnow())
    result = _check(config)
    assert result.returncode == 0, result.stdout
    assert 'Placement supports up to microversion' in result.stdout


def test_stale_agent_warns(tmp_path, placement):
    config = _config(tmp_path, placement.url)
    servers.run_script('cyborg-dbsync', 'upgrade', config_file=config)
    _heartbeat(tmp_path, datetime.datetime(2020, 1, 1))
    result = _check(config)
    assert result.returncode == 1, result.stdout
    assert 'cyborg-agent on h1' in result.stdout


def test_unconfigured_placement_fails(tmp_path):
    config = _config(tmp_path)
    servers.run_script('cyborg-dbsync', 'upgrade', config_file=config)
    result = _check(config)
    assert result.returncode == 2
    assert '[placement] is not configured' in result.stdout
