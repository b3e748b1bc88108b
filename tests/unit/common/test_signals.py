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

"""The signal handling of the daemons and the graceful stops it drives."""

import logging
import os
import signal
import socket
import threading
import time

from oslo_config import cfg
import pytest

from cyborg import policies
from cyborg.api import wsgi_server
from cyborg.common import signals
from cyborg.conductor import binding
from tests.unit.policies import test_policies

HANDLED = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


@pytest.fixture
def restore_handlers():
    """The test process's handlers, put back after the test."""
    saved = {signum: signal.getsignal(signum) for signum in HANDLED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def file_conf(tmp_path):
    """A private ConfigOpts on a file: ``interval`` mutable, ``name``
    not; ``write(**options)`` rewrites the file."""
    conf = cfg.ConfigOpts()
    conf.register_opts([
        cfg.IntOpt('interval', default=1, mutable=True),
        cfg.StrOpt('name', default='a'),
        cfg.IntOpt('graceful_shutdown_timeout', default=7, mutable=True),
    ])
    path = tmp_path / 'test.conf'

    def write(**options):
        path.write_text('[DEFAULT]\n' + ''.join(
            '%s = %s\n' % item for item in options.items()))
    write(interval=1)
    conf(['--config-file', str(path)])
    conf.write = write
    yield conf
    conf.reset()


def test_reload_applies_mutable_options_and_runs_reloaders(file_conf,
                                                           caplog):
    calls = []
    handler = signals.Signals('cyborg-test', file_conf,
                              {'policy file': lambda: calls.append(1)})
    file_conf.write(interval=5, name='b')
    caplog.set_level(logging.INFO)
    reloaded = handler.reload()
    assert file_conf.interval == 5
    assert file_conf.name == 'a'  # not mutable: kept
    assert calls == [1]
    assert reloaded == ['configuration files (mutable options changed: '
                        'DEFAULT.interval)', 'policy file']
    assert ('cyborg-test reloaded on SIGHUP: configuration files (mutable '
            'options changed: DEFAULT.interval); policy file'
            in caplog.messages)


def test_reload_with_nothing_changed_says_so(file_conf, caplog):
    caplog.set_level(logging.INFO)
    signals.Signals('cyborg-test', file_conf).reload()
    assert ('cyborg-test reloaded on SIGHUP: configuration files (mutable '
            'options changed: none)' in caplog.messages)


def test_a_failed_reload_keeps_the_configuration_and_the_process(
        file_conf, caplog):
    def broken():
        raise ValueError('bad policy')
    calls = []
    handler = signals.Signals('cyborg-test', file_conf,
                              {'broken': broken,
                               'other': lambda: calls.append(1)})
    file_conf.write(interval='not a number')
    assert handler.reload() == ['other']
    assert file_conf.interval == 1
    assert calls == [1]
    assert 'cyborg-test could not reload its broken' in caplog.text
    # The invalid value was undone: the option still reads.
    assert ('could not read its configuration files again, its '
            'configuration is unchanged: Value for option interval'
            in caplog.text)


def test_wait_reloads_on_sighup_and_returns_on_sigterm(file_conf,
                                                       restore_handlers):
    reloads = []
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    handler = signals.install('cyborg-test', file_conf,
                              {'x': lambda: reloads.append(1)})
    assert signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, None)
    # Until wait(), SIGTERM stops a daemon that is still starting.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    def send():
        # Handlers run in the main thread, which waits meanwhile.
        for signum in (signal.SIGHUP, signal.SIGHUP, signal.SIGTERM):
            time.sleep(0.2)
            os.kill(os.getpid(), signum)
    sender = threading.Thread(target=send)
    sender.start()
    assert handler.wait() == signal.SIGTERM
    sender.join()
    assert reloads == [1, 1]
    # A second SIGTERM would end the process at once.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert handler.grace() == 7


def test_sigusr2_writes_a_report_of_the_threads(file_conf, restore_handlers,
                                                capfd):
    signals.install('cyborg-test', file_conf)
    # Alive until the report is read, however slow the machine.
    done = threading.Event()
    worker = threading.Thread(target=done.wait, args=(30,),
                              name='bind-job_0', daemon=True)
    worker.start()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        report = capfd.readouterr().err
    finally:
        done.set()
    assert 'Guru Meditation' in report
    assert '====                            Threads' in report
    assert '= bind-job_0 (daemon)' in report
    assert 'product = OpenStack Cyborg' in report


def test_exit_returns_0_or_ends_the_process_when_work_was_handed_back(
        file_conf, monkeypatch):
    handler = signals.Signals('cyborg-test', file_conf)
    assert handler.exit(True) == 0
    exits = []
    monkeypatch.setattr(os, '_exit', exits.append)
    handler.exit(False)
    assert exits == [0]


# The graceful stops ---------------------------------------------------------

def _blocking_binder(release: threading.Event) -> binding.Binder:
    """A Binder with one worker whose jobs wait for ``release``."""
    binder = binding.Binder('cond1', 1, 60, None, lambda rows: None)
    binder.run = lambda context, uuid, started: release.wait(10)
    return binder


def test_binder_stop_hands_back_jobs_left_after_the_timeout(caplog):
    release = threading.Event()
    binder = _blocking_binder(release)
    binder.submit(None, ['arq-running', 'arq-queued'])
    time.sleep(0.1)
    started = time.monotonic()
    assert binder.stop(timeout=0.3) == ['arq-queued', 'arq-running']
    assert time.monotonic() - started < 5
    release.set()
    assert 'Handing back 2 unfinished bind jobs' in caplog.text


def test_binder_stop_waits_for_jobs_that_finish_in_time():
    release = threading.Event()
    binder = _blocking_binder(release)
    binder.submit(None, ['arq-1'])
    threading.Timer(0.2, release.set).start()
    assert binder.stop(timeout=10) == []


def _slow_app(environ, start_response):
    time.sleep(float(environ['QUERY_STRING'] or 0))
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'done']


def _request_in_flight(server, seconds: float) -> list:
    """Send a request whose answer takes ``seconds``; the list gets the
    response."""
    answers = []
    connection = socket.create_connection(('127.0.0.1', server.port))

    def read():
        connection.sendall(b'GET /?%s HTTP/1.0\r\n\r\n'
                           % str(seconds).encode())
        answers.append(connection.makefile('rb').read())
        connection.close()
    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.2)
    return answers


def test_wsgi_stop_lets_requests_in_flight_finish():
    server = wsgi_server.WSGIServer(_slow_app, '127.0.0.1', 0)
    server.start()
    answers = _request_in_flight(server, 0.5)
    assert server.stop(timeout=10)
    time.sleep(0.1)
    assert answers and answers[0].startswith(b'HTTP/1.0 200')
    with pytest.raises(OSError):
        socket.create_connection(('127.0.0.1', server.port), timeout=1)


def test_wsgi_stop_gives_up_after_the_timeout():
    server = wsgi_server.WSGIServer(_slow_app, '127.0.0.1', 0)
    server.start()
    _request_in_flight(server, 3)
    started = time.monotonic()
    assert not server.stop(timeout=0.2)
    assert time.monotonic() - started < 2


def test_authorizer_reload_reads_the_policy_file_at_once(conf, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('{}')
    conf.set_override('policy_file', str(policy_file), group='oslo_policy')
    # Without a reload it would not look at the file for an hour.
    authorizer = policies.Authorizer(policies.get_enforcer(conf),
                                     reload_interval=3600)
    context = test_policies._context(['reader'])
    authorizer.authorize(test_policies.READ_DP, context)
    policy_file.write_text('"%s": "role:admin"\n' % test_policies.READ_DP)
    authorizer.reload()
    with pytest.raises(policies.exception.PolicyNotAuthorized):
        authorizer.authorize(test_policies.READ_DP, context)


def test_an_invalid_file_keeps_the_previous_configuration(file_conf,
                                                          caplog):
    file_conf.write(interval=3)
    signals.mutate(file_conf)
    file_conf.write(interval=4)
    with open(file_conf.config_file[0], 'a') as f:
        f.write('[broken\n')
    signals.Signals('cyborg-test', file_conf).reload()
    assert file_conf.interval == 3
    assert 'could not read its configuration files again' in caplog.text
