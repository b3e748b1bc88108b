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

"""Compatibility tests: real clients against a running Cyborg over HTTP.

Every test depends on the ``cyborg_endpoint`` fixture: the base URL of the
service (e.g. ``http://127.0.0.1:PORT``). By default it comes from
``cyborg_all_in_one``, which starts ``cyborg-all-in-one`` as a subprocess on
a free loopback port with a temporary state directory. To run the same tests
against another (noauth) deployment, pass ``--cyborg-endpoint URL`` or set
``CYBORG_COMPAT_ENDPOINT``; a test module can also override the fixture or
parametrize ``cyborg_endpoint`` directly.

These tests never import the ``cyborg`` package: the service is a black box.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.functional import servers

# Nova must never monkey patch the test process (see nova_probe.py, which
# sets this again for its own interpreter).
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

READY_LINE = 'Cyborg all-in-one is running.'
START_TIMEOUT = 90
STOP_TIMEOUT = 20

_LOG_KEY = pytest.StashKey[str]()
_FAILED_KEY = pytest.StashKey[bool]()


def pytest_addoption(parser):
    group = parser.getgroup('cyborg-compat')
    group.addoption(
        '--cyborg-endpoint', default=os.environ.get('CYBORG_COMPAT_ENDPOINT'),
        help='Base URL of an already running noauth Cyborg API to test '
             'instead of starting cyborg-all-in-one '
             '(env: CYBORG_COMPAT_ENDPOINT).')


def pytest_configure(config):
    # openstacksdk's own deprecation noise, not something these tests cause
    config.addinivalue_line(
        'filterwarnings',
        'ignore::openstack.warnings.RemovedInSDK50Warning')


def _venv_bin(name: str) -> str:
    """A console script installed next to the running interpreter."""
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(candidate):
        return candidate
    return name


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _read(path: str) -> str:
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return ''


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, wait, then SIGKILL if needed."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=STOP_TIMEOUT)


@pytest.fixture(scope='session')
def cyborg_all_in_one(request, tmp_path_factory):
    """Start ``cyborg-all-in-one`` on a free loopback port; yield its URL."""
    state_dir = tmp_path_factory.mktemp('cyborg-state')
    log_path = str(state_dir / 'all-in-one.log')
    request.config.stash[_LOG_KEY] = log_path
    port = _free_loopback_port()
    endpoint = 'http://127.0.0.1:%d' % port
    cmd = [_venv_bin('cyborg-all-in-one'), '--host', '127.0.0.1',
           '--port', str(port), '--placement-port', '0',
           '--state-dir', str(state_dir)]
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = servers.spawn(cmd, log_path, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    'cyborg-all-in-one exited with %s before it was ready; '
                    'log:\n%s' % (proc.returncode, _read(log_path)))
            if READY_LINE in _read(log_path) and _answers(endpoint + '/'):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    'cyborg-all-in-one not ready after %ss; log:\n%s'
                    % (START_TIMEOUT, _read(log_path)))
            time.sleep(0.2)
        yield endpoint
    finally:
        _stop(proc)
        if proc.returncode not in (0, -signal.SIGTERM):
            request.config.stash[_FAILED_KEY] = True


@pytest.fixture(scope='session')
def cyborg_endpoint(request):
    """Base URL of the Cyborg API under test (no trailing slash)."""
    url = request.config.getoption('--cyborg-endpoint')
    if not url:
        url = request.getfixturevalue('cyborg_all_in_one')
    return url.rstrip('/')


@pytest.fixture
def unique_name():
    """Device profile names that cannot collide on a shared deployment."""
    def make(prefix='compat'):
        return '%s-%s' % (prefix, uuid.uuid4().hex[:12])
    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.config.stash[_FAILED_KEY] = True


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    log_path = config.stash.get(_LOG_KEY, None)
    failed = config.stash.get(_FAILED_KEY, False) or exitstatus not in (0, 5)
    if log_path and failed:
        terminalreporter.section('cyborg-all-in-one log (%s)' % log_path)
        terminalreporter.write(_read(log_path) or '<empty>\n')
