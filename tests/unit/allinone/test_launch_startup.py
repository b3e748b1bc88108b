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

"""What cyborg-all-in-one refuses before it starts anything: a busy port,
a bad option, an address beyond loopback without the option that allows
it."""

import argparse
import socket
import threading

import pytest

from cyborg.allinone import launch
from cyborg.cmd import all_in_one


def _args(host, insecure=False):
    return argparse.Namespace(host=host, insecure_listen_anywhere=insecure)


@pytest.fixture
def busy_port():
    """A loopback port something else listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _can_listen(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(('127.0.0.1', port))
        except OSError:
            return False
        return True


def _main(conf, capsys, *args):
    threads = set(threading.enumerate())
    status = all_in_one.main(['cyborg-all-in-one', *args])
    err = capsys.readouterr().err
    # Nothing it started is left running.
    assert set(threading.enumerate()) <= threads
    return status, err


@pytest.mark.parametrize('host', ['127.0.0.1', '::1', 'localhost'])
def test_loopback_needs_no_option(host):
    assert launch.listen_problems(_args(host), 'noauth') == []


@pytest.mark.parametrize('host', ['0.0.0.0', '::', '192.0.2.1', 'myhost'])
def test_beyond_loopback_is_refused_with_the_reason(host):
    [problem] = launch.listen_problems(_args(host), 'noauth')
    assert problem.startswith('refusing to listen on %s: without Keystone '
                              'every API request acts as an administrator'
                              % host)
    assert 'token "admin"' in problem
    assert '--insecure-listen-anywhere' in problem


def test_with_keystone_the_placement_token_is_still_the_reason():
    [problem] = launch.listen_problems(_args('0.0.0.0'), 'keystone')
    assert 'without Keystone' not in problem
    assert 'embedded Placement accepts the fixed token "admin"' in problem


def test_the_explicit_option_allows_any_address():
    assert launch.listen_problems(_args('0.0.0.0', True),
                                  'noauth') == []


def test_main_refuses_a_non_loopback_host_before_starting(conf, tmp_path,
                                                          capsys):
    state = tmp_path / 'state'
    status, err = _main(conf, capsys, '--host', '0.0.0.0',
                        '--state-dir', str(state))
    assert status == 2
    assert err.startswith('cyborg-all-in-one: refusing to listen on 0.0.0.0')
    assert len(err.splitlines()) == 1
    assert not state.exists()


def test_a_busy_api_port_is_one_line_naming_address_and_option(
        conf, tmp_path, capsys, busy_port):
    placement_port = _free_port()
    status, err = _main(conf, capsys, '--port', str(busy_port),
                        '--placement-port', str(placement_port),
                        '--state-dir', str(tmp_path))
    assert status == 2
    assert err == ('cyborg-all-in-one: cannot listen on 127.0.0.1:%d: '
                   'Address already in use (the API); choose another port '
                   'with --port\n' % busy_port)
    assert _can_listen(placement_port)


def test_a_busy_placement_port_frees_the_api_port(conf, tmp_path, capsys,
                                                  busy_port):
    api_port = _free_port()
    status, err = _main(conf, capsys, '--port', str(api_port),
                        '--placement-port', str(busy_port),
                        '--state-dir', str(tmp_path))
    assert status == 2
    assert err == ('cyborg-all-in-one: cannot listen on 127.0.0.1:%d: '
                   'Address already in use (the embedded Placement); '
                   'choose another port with --placement-port\n' % busy_port)
    assert _can_listen(api_port)
    # The database was not touched.
    assert not (tmp_path / 'placement.sqlite').exists()


def test_bad_options_are_one_line_each_before_anything(conf, tmp_path,
                                                       capsys):
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[api]\nmax_arqs_per_project = notanint\n'
                           '[DEFAULT]\nperiodic_interval = -1\n')
    state = tmp_path / 'state'
    status, err = _main(conf, capsys, '--config-file', str(config_file),
                        '--state-dir', str(state))
    assert status == 2
    assert err.splitlines() == [
        'cyborg-all-in-one: [DEFAULT] periodic_interval is not valid: '
        'Should be greater than or equal to 1 (in %s)' % config_file,
        "cyborg-all-in-one: [api] max_arqs_per_project is not valid: "
        "invalid literal for int() with base 10: 'notanint' (in %s)"
        % config_file]
    assert not state.exists()


def test_a_missing_config_file_is_one_line(conf, tmp_path, capsys):
    status, err = _main(conf, capsys, '--config-file',
                        str(tmp_path / 'nope.conf'),
                        '--state-dir', str(tmp_path / 'state'))
    assert status == 2
    assert err == ('cyborg-all-in-one: cannot read the config file %s: no '
                   'such file, or not readable (--config-file)\n'
                   % (tmp_path / 'nope.conf'))


def test_help_is_plain_text_and_lists_config_file(capsys):
    with pytest.raises(SystemExit):
        launch._parse(['--help'])
    text = capsys.readouterr().out
    for option in ('--config-file', '--placement-port', '--state-dir',
                   '--insecure-listen-anywhere', '--demo-hardware'):
        assert option in text
    assert '``' not in text and ':mod:' not in text


def test_config_files_reach_oslo_config():
    args, rest = launch._parse(['--config-file', 'a.conf', '--port',
                                '7000', '--config-file', 'b.conf',
                                '--debug'])
    assert args.port == 7000
    assert rest == ['--debug', '--config-file', 'a.conf', '--config-file',
                    'b.conf']


def test_the_compute_node_is_named_after_the_host(conf, tmp_path):
    conf.set_override('host', 'aio-host')
    launch._set_embedded_defaults(str(tmp_path))
    assert conf.agent.resource_provider_name == 'aio-host'
    conf.set_override('resource_provider_name', 'node.example.org',
                      group='agent')
    assert conf.agent.resource_provider_name == 'node.example.org'


def test_the_embedded_defaults_do_not_outlive_a_test(conf):
    # After the test above (conftest._restore_embedded_defaults).
    assert conf.agent.resource_provider_name is None
    assert conf.api.auth_strategy == 'keystone'


def test_a_bad_auth_strategy_is_a_line_not_a_traceback(conf, tmp_path,
                                                       capsys):
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[api]\nauth_strategy = nosuch\n')
    status, err = _main(conf, capsys, '--config-file', str(config_file),
                        '--host', '0.0.0.0', '--state-dir',
                        str(tmp_path / 'state'))
    assert status == 2
    [line] = err.splitlines()
    assert line.startswith('cyborg-all-in-one: [api] auth_strategy is not '
                           'valid: ')


def test_a_state_dir_that_is_a_file_is_refused(conf, tmp_path, capsys):
    state = tmp_path / 'state'
    state.write_text('')
    status, err = _main(conf, capsys, '--state-dir', str(state))
    assert (status, err) == (2, 'cyborg-all-in-one: --state-dir %s is not '
                                'a directory\n' % state)
