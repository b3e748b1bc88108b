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

"""The fork server starts a process as a fresh interpreter would."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.functional import forkserver
from tests.functional import servers

BIN = os.path.dirname(sys.executable)

# What a forked child reports of itself, as JSON on stdout.
REPORT = '''
import json, os, sys, warnings
from oslo_service import backend
import oslo_messaging  # imports oslo.service's service module
from prometheus_client import values
print(json.dumps({
    'argv': sys.argv, 'cwd': os.getcwd(), 'pid': os.getpid(),
    'sid': os.getsid(0), 'mark': os.environ.get('MARK'),
    'path': sys.path[:2],
    'stdin_is_null': os.path.samestat(os.fstat(0), os.stat(os.devnull)),
    'preloaded': 'sqlalchemy.orm' in sys.modules,
    'cyborg_modules': [m for m in sys.modules if m.startswith('cyborg.')],
    'backend': backend.get_backend_type().name,
    'value_class': values.ValueClass.__name__,
    'warning_filter': warnings.filters[0][0],
}))
print('to stderr', file=sys.stderr)
sys.exit(3)
'''


def test_what_is_started_through_it(tmp_path):
    request = forkserver.request_for(
        [os.path.join(BIN, 'cyborg-conductor'), '--config-file', 'x'])
    assert request['kind'] == 'script'
    assert request['profile'] == 'service'
    assert request['argv'][1:] == ['--config-file', 'x']
    assert forkserver.request_for(
        [os.path.join(BIN, 'openstack'), 'help'])['profile'] == 'cli'
    assert forkserver.request_for(
        [os.path.join(BIN, 'keystone-manage'), 'db_sync'])['profile'] == (
            'keystone')
    assert forkserver.request_for(
        [sys.executable, '-c', 'pass'])['kind'] == 'code'
    assert forkserver.request_for(
        [sys.executable, '-m', 'cyborg.cmd.manage'])['kind'] == 'module'
    # Nova's services patch eventlet into the standard library first.
    assert forkserver.request_for([os.path.join(BIN, 'nova-compute')]) is None
    assert forkserver.request_for([sys.executable, '-m', 'pip']) is None
    launcher = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), 'compat', 'cyborgclient_osc.py')
    request = forkserver.request_for([sys.executable, launcher, 'help'])
    assert (request['kind'], request['profile'], request['argv']) == (
        'script', 'cli', [launcher, 'help'])
    bench = os.path.join(forkserver.BENCH_DIR, 'nova_cycle.py')
    assert forkserver.request_for([sys.executable, bench, '--help']) == {
        'kind': 'script', 'target': bench, 'argv': [bench, '--help'],
        'profile': 'service'}
    assert forkserver.request_for([sys.executable, __file__]) is None
    assert forkserver.request_for(['/bin/sh', '-c', 'true']) is None
    script = tmp_path / 'cyborg-elsewhere'
    script.write_text('#!%s\n' % sys.executable)
    assert forkserver.request_for([str(script)]) is None


def test_a_child_is_what_a_fresh_start_would_be(tmp_path):
    log = str(tmp_path / 'child.log')
    extra = tmp_path / 'extra'
    extra.mkdir()
    env = dict(os.environ, MARK='marked', PYTHONPATH=str(extra),
               PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
               PYTHONWARNINGS='error')
    process = servers.spawn([sys.executable, '-c', REPORT, 'one', 'two'],
                            log, env=env, cwd=str(tmp_path))
    assert isinstance(process, forkserver.ForkedProcess)
    assert process.wait(60) == 3
    with open(log) as f:
        first, second = f.read().splitlines()[-2:]
    report = json.loads(first)
    assert second == 'to stderr'
    assert report['argv'] == ['-c', 'one', 'two']
    assert report['cwd'] == str(tmp_path)
    assert report['pid'] == process.pid
    assert report['sid'] == process.pid  # a session of its own
    assert report['mark'] == 'marked'
    assert report['path'] == ['', str(extra)]
    assert report['stdin_is_null']
    assert report['preloaded']
    # What reads the environment at import is imported by the child.
    assert report['cyborg_modules'] == []
    assert report['value_class'] == 'MmapedValue'
    assert report['warning_filter'] == 'error'
    # As in cyborg's own processes (cyborg/__init__.py).
    assert report['backend'] == 'THREADING'


def test_exit_status_signals_and_timeouts(tmp_path):
    process = servers.spawn(
        [sys.executable, '-c', 'import time; time.sleep(60)'],
        str(tmp_path / 'sleep.log'))
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(0.2)
    servers.kill_group(process, signal.SIGTERM)
    assert process.returncode == -signal.SIGTERM
    assert process.poll() == -signal.SIGTERM


def test_run_captures_both_streams_and_kills_at_its_timeout():
    result = servers.run([sys.executable, '-c',
                          'import sys; print("out"); '
                          'print("err", file=sys.stderr); sys.exit(5)'])
    assert (result.returncode, result.stdout, result.stderr) == (
        5, 'out\n', 'err\n')
    with pytest.raises(subprocess.TimeoutExpired):
        servers.run([sys.executable, '-c', 'import time; time.sleep(60)'],
                    timeout=1)


def test_a_console_script_runs_as_its_entry_point():
    result = servers.run([os.path.join(BIN, 'cyborg-dbsync'), '--help'])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('usage: cyborg-dbsync ')


def test_it_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(forkserver.ENABLE_ENV, '0')
    process = servers.spawn([sys.executable, '-c', 'pass'],
                            str(tmp_path / 'fresh.log'))
    assert isinstance(process, subprocess.Popen)
    assert process.wait(60) == 0


ENTRY_POINTS = '''
import json, sys
from stevedore import _cache
shared = tuple(sys.path) in _cache._c._internal
table = _cache._c._get_data_for_path(None)
print(json.dumps({
    'shared': shared,
    # Through JSON: read from stevedore's file, its entries are lists.
    'same': json.loads(json.dumps(table['groups'])) == json.loads(
        json.dumps(_cache._build_cacheable_data()['groups'])),
    'cyborg_drivers': sorted(
        entry[0] for entry in table['groups'].get(
            'cyborg.accelerator.driver', [])),
}))
'''


def _entry_points_report(tmp_path, name: str, pythonpath: str) -> dict:
    log = str(tmp_path / (name + '.log'))
    process = servers.spawn(
        [sys.executable, '-c', ENTRY_POINTS], log,
        env=dict(os.environ, PYTHONPATH=pythonpath), cwd=str(tmp_path))
    assert isinstance(process, forkserver.ForkedProcess)
    assert process.wait(60) == 0
    with open(log) as f:
        return json.loads(f.read().splitlines()[-1])


def test_a_child_has_the_servers_entry_points_unless_its_path_adds_any(
        tmp_path):
    """stevedore's table of the installed entry points is read once, by
    the server: a child whose sys.path adds no distribution finds it
    for its own path, the same table it would read; one whose path adds
    a distribution reads its own."""
    plain = tmp_path / 'plain'
    plain.mkdir()
    report = _entry_points_report(tmp_path, 'plain', str(plain))
    assert report['shared'] and report['same']
    assert 'fake_driver' in report['cyborg_drivers']
    with_distribution = tmp_path / 'site'
    (with_distribution / 'extra-1.0.dist-info').mkdir(parents=True)
    report = _entry_points_report(tmp_path, 'site', str(with_distribution))
    assert not report['shared'] and report['same']


def test_a_shell_starts_console_scripts_through_the_shims(tmp_path):
    """The shims stand in for the virtualenv's scripts in a shell: the
    ones the servers start go through them (streams, directory and exit
    status as run directly), the others are the scripts themselves."""
    shims = forkserver.shim_directory(BIN, str(tmp_path / 'bin'))
    dbsync = os.path.join(shims, 'cyborg-dbsync')
    assert not os.path.islink(dbsync)
    with open(dbsync) as f:
        assert 'forkclient.py' in f.read()
    assert os.path.realpath(os.path.join(shims, 'python')) == (
        os.path.realpath(sys.executable))
    assert os.path.islink(os.path.join(shims, 'nova-compute'))
    result = subprocess.run(
        ['bash', '-c', 'cyborg-dbsync --help; cyborg-dbsync --no-such; '
         'echo "status $?"'],
        env=dict(os.environ, PATH=shims + os.pathsep + os.environ['PATH']),
        cwd=str(tmp_path), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert 'usage: cyborg-dbsync' in result.stdout
    assert 'status 2' in result.stdout
    assert 'cyborg-dbsync: error:' in result.stderr


CONSOLE_SCRIPT_TABLE = '''
import os, sys
from stevedore import _cache
# The sys.path a console script of the virtualenv starts with.
sys.path[0] = os.path.dirname(sys.executable)
digest, _values = _cache._hash_settings_for_path(tuple(sys.path))
print(os.path.exists(os.path.join(_cache._c._dir, digest)))
'''


def _console_script_table_exists(env) -> bool:
    result = subprocess.run([sys.executable, '-c', CONSOLE_SCRIPT_TABLE],
                            env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout.strip() == 'True'


def test_console_scripts_started_fresh_find_the_table_written(
        tmp_path, monkeypatch):
    """A server writes stevedore's file for the path of the console
    scripts started fresh (stevedore does not under /tmp)."""
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    assert not _console_script_table_exists(os.environ)
    server = forkserver.ForkServer('service')
    try:
        server.socket_path()
    finally:
        server.stop()
    assert _console_script_table_exists(os.environ)
