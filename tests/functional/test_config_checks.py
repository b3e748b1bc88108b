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

"""The operator tools check their configuration before they start
anything, and read an all-in-one's state directory."""

import os
import socket

from tests.functional import servers


def _config(tmp_path) -> str:
    return servers.write_config(str(tmp_path / 'cyborg.conf'), {
        'database': {'connection': 'sqlite:///%s' % (
            tmp_path / 'cyborg.sqlite')}})


def test_status_and_dbsync_read_an_all_in_ones_state_dir(tmp_path):
    state_dir = str(tmp_path / 'state')
    os.makedirs(state_dir)
    upgrade = servers.run_script('cyborg-dbsync', '--state-dir', state_dir,
                                 'upgrade')
    assert upgrade.returncode == 0, upgrade.stderr
    assert os.path.isfile(os.path.join(state_dir, 'cyborg.sqlite'))
    version = servers.run_script('cyborg-dbsync', '--state-dir', state_dir,
                                 'version')
    assert version.stdout.split()[-1] == upgrade.stdout.split()[-1]
    result = servers.run_script('cyborg-status', '--state-dir', state_dir,
                                'upgrade', 'check')
    # The schema is at head; no Placement is configured.
    assert 'Database schema Result: Success' in ' '.join(
        result.stdout.replace('|', ' ').split())


def test_tools_name_every_bad_option_and_start_nothing(tmp_path):
    config = servers.write_config(str(tmp_path / 'cyborg.conf'), {
        'api': {'max_arqs_per_project': 'notanint'},
        'database': {'connection': 'sqlite:///%s' % (
            tmp_path / 'missing' / 'cyborg.sqlite')}})
    for script in ('cyborg-conductor', 'cyborg-api', 'cyborg-manage'):
        args = ('host', 'delete', 'h1') if script == 'cyborg-manage' else ()
        result = servers.run_script(script, *args, config_file=config,
                                    timeout=30)
        assert result.returncode == 2, (script, result.stderr)
        lines = result.stderr.splitlines()
        assert [line.split(': ')[1] for line in lines] == [
            '[api] max_arqs_per_project is not valid',
            'cannot open the database %s' % (
                tmp_path / 'missing' / 'cyborg.sqlite')], lines


def test_cyborg_api_on_a_busy_port_says_which(tmp_path):
    servers.run_script('cyborg-dbsync', 'upgrade',
                       config_file=_config(tmp_path))
    with socket.socket() as busy:
        busy.bind((servers.LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = servers.write_config(str(tmp_path / 'api.conf'), {
            'api': {'host_ip': servers.LOOPBACK, 'port': port},
            'database': {'connection': 'sqlite:///%s' % (
                tmp_path / 'cyborg.sqlite')}})
        result = servers.run_script('cyborg-api', config_file=config,
                                    timeout=30)
    assert result.returncode == 2
    assert result.stderr == (
        'cyborg-api: cannot listen on 127.0.0.1:%d: Address already in use; '
        'change [api] host_ip or port\n' % port)


def test_agent_and_all_in_one_name_a_bad_host_and_start_nothing(tmp_path):
    config = servers.write_config(str(tmp_path / 'agent.conf'), {
        'DEFAULT': {'host': 'bad host', 'transport_url': 'fake:/'}})
    line = ('Invalid configuration: [DEFAULT] host is \'bad host\'; it must '
            'be a non-empty name of at most 255 characters without spaces '
            'or "/"\n')
    agent = servers.run_script('cyborg-agent', config_file=config,
                               timeout=30)
    assert (agent.returncode, agent.stderr) == (2, 'cyborg-agent: ' + line)
    state = tmp_path / 'state'
    allinone = servers.run_script('cyborg-all-in-one', '--state-dir',
                                  str(state), config_file=config, timeout=30)
    assert (allinone.returncode, allinone.stderr) == (
        2, 'cyborg-all-in-one: ' + line)
    assert not state.exists()


def test_all_in_one_with_an_unknown_driver_stops_what_it_started(tmp_path):
    config = servers.write_config(str(tmp_path / 'aio.conf'), {
        'agent': {'enabled_drivers': 'nosuch_driver'}})
    port, placement_port = servers.free_port(), servers.free_port()
    result = servers.run_script(
        'cyborg-all-in-one', '--port', str(port), '--placement-port',
        str(placement_port), '--state-dir', str(tmp_path / 'state'),
        config_file=config, timeout=90)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        'cyborg-all-in-one: Invalid configuration: [agent] enabled_drivers '
        'names unknown drivers: nosuch_driver')
    assert 'Traceback' not in result.stdout + result.stderr
