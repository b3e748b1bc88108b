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

"""The WSGI server commands of the test and benchmark helpers."""

import os
import sys

import pytest

from tests.functional import servers

VENV_BIN = os.path.dirname(sys.executable)


def test_gunicorn_threads_mean_gthread_workers():
    argv = servers.wsgi_argv('gunicorn', 'pkg.mod:app', 8080, 2, threads=4)
    assert argv[0] == os.path.join(VENV_BIN, 'gunicorn')
    assert argv[-1] == 'pkg.mod:app'
    assert argv[argv.index('--workers') + 1] == '2'
    assert argv[argv.index('--bind') + 1] == '127.0.0.1:8080'
    assert argv[argv.index('--worker-class') + 1] == 'gthread'
    assert argv[argv.index('--threads') + 1] == '4'


def test_gunicorn_without_threads_uses_sync_workers():
    argv = servers.wsgi_argv('gunicorn', 'app:app', 8080, 2, chdir='/srv')
    assert '--worker-class' not in argv and '--threads' not in argv
    assert argv[argv.index('--chdir') + 1] == '/srv'


def test_uwsgi_runs_as_devstack_with_keep_alive(monkeypatch):
    monkeypatch.setattr(servers, 'venv_script',
                        lambda name: os.path.join(VENV_BIN, name))
    argv = servers.wsgi_argv('uwsgi', 'pkg.mod:app', 8080, 2, threads=4,
                             chdir='/srv')
    assert argv[0] == os.path.join(VENV_BIN, 'uwsgi')
    # An application per worker, loaded after the fork: RPC transports
    # and database pools are never shared by two processes.
    assert {'--master', '--lazy-apps', '--enable-threads'} <= set(argv)
    assert argv[argv.index('--http') + 1] == '127.0.0.1:8080'
    assert '--http-keepalive' in argv
    assert argv[argv.index('--module') + 1] == 'pkg.mod:app'
    assert argv[argv.index('--processes') + 1] == '2'
    assert argv[argv.index('--threads') + 1] == '4'
    assert argv[argv.index('--virtualenv') + 1] == sys.prefix
    assert argv[argv.index('--chdir') + 1] == '/srv'


def test_unknown_server_is_refused():
    with pytest.raises(ValueError, match='waitress'):
        servers.wsgi_argv('waitress', 'app:app', 8080, 1)


@pytest.mark.parametrize('installed,expected', [(True, 'uwsgi'),
                                                (False, 'gunicorn')])
def test_default_server_is_uwsgi_when_installed(monkeypatch, installed,
                                                expected):
    monkeypatch.setattr(servers.os, 'access',
                        lambda path, mode: installed and path.endswith(
                            os.sep + 'uwsgi'))
    assert servers.default_wsgi_server() == expected
