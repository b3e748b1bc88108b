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

"""SIGHUP, SIGUSR2 and SIGTERM sent to real daemons.

The deployment is nova_flow.py's on PostgreSQL and RabbitMQ (two
conductors, the API, a FakeNova) with one agent whose MDEV handles take
:data:`PREPARE_DELAY` to prepare, so that a bind stays in flight while a
signal arrives; then a cyborg-all-in-one of its own. The tests run in
order: the last ones stop the daemons.
"""

import configparser
import os
import signal
import time
import uuid

import pytest
import requests

from tests.functional import nova_flow
from tests.functional import servers

AGENT = 'signals-mdev'
# Long enough for a test to see the bind job running and signal its
# conductor before it ends, on a loaded 2-core machine too; below the
# [conductor] agent_timeout of this deployment.
PREPARE_DELAY = 6.0
AGENT_TIMEOUT = 10
# Seconds a daemon may take to stop gracefully here (its default grace
# period is 60 s).
STOP_TIMEOUT = 60
RELOADED_DEBUG = ('reloaded on SIGHUP: configuration files (mutable options '
                  'changed: DEFAULT.debug)')


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir):
    agents = [nova_flow.AgentSpec(AGENT, devices=1, handles=8, bus_base=0x50,
                                  handle_type='MDEV',
                                  fake_driver={'prepare_delay':
                                               PREPARE_DELAY})]
    with nova_flow.deployment('signals', postgres, rabbitmq, placement,
                              work_dir, agents, conductor_workers=4,
                              conductor_options={
                                  'agent_timeout': AGENT_TIMEOUT}
                              ) as deployment:
        yield deployment


def _config_file(flow, process) -> str:
    return process.config_file or os.path.join(flow.directory, 'api.conf')


def _configure(flow, process, **options) -> None:
    """Set ``[DEFAULT]`` ``options`` in ``process``'s config file (and in
    a conductor's config, which a restart writes again)."""
    for index, conductor in enumerate(flow.conductors):
        if conductor is process:
            flow.conductor_configs[index]['DEFAULT'].update(options)
    path = _config_file(flow, process)
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(path)
    for key, value in options.items():
        parser.set('DEFAULT', key, str(value))
    with open(path, 'w') as f:
        parser.write(f)


def _log(process, since: int = 0) -> str:
    return process.log_text()[since:]


def _wait_log(process, text: str, since: int, timeout: float = 30) -> str:
    servers.wait_for(lambda: text in _log(process, since), timeout,
                     '%s to log %r' % (process.name, text), process.process,
                     process.log)
    return _log(process, since)


def _bind_one(flow) -> tuple[str, int]:
    """Bind one ARQ on the MDEV agent; once its job runs, its uuid and
    the index of the conductor that owns the job."""
    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    arq = flow.create_arqs(profile)[0]['uuid']
    response = flow.bind({arq: {
        'hostname': AGENT, 'device_rp_uuid': flow.devices[AGENT][0].rp_uuid,
        'instance_uuid': str(uuid.uuid4())}})
    assert response.status_code == 202, response.text
    rows = nova_flow.wait_until(lambda: flow.db_rows(
        "SELECT bind_owner FROM extended_accelerator_requests WHERE uuid = "
        ":arq AND state = 'BindStarted' AND bind_owner IS NOT NULL",
        arq=arq), 10, 'the bind job of %s running' % arq, interval=0.05)
    owner = rows[0][0]
    hosts = [c['DEFAULT']['host'] for c in flow.conductor_configs]
    return arq, hosts.index(owner)


def _assert_bound(flow, arq: str) -> None:
    arqs = flow.wait_resolved([arq], timeout=nova_flow.BIND_TIMEOUT + 30)
    assert arqs[arq]['state'] == 'Bound', flow.logs(30)


def test_sighup_applies_debug_with_a_bind_in_flight(flow):
    daemons = flow.processes
    marks = {p.name: len(_log(p)) for p in daemons}
    arq, owner = _bind_one(flow)
    for process in daemons:
        _configure(flow, process, debug=True)
        os.kill(process.process.pid, signal.SIGHUP)
    for process in daemons:
        _wait_log(process, RELOADED_DEBUG, marks[process.name])
    _assert_bound(flow, arq)
    flow.check_alive()
    # debug took effect: the API logs each request, the owner of the
    # bind the events it sent Nova, at DEBUG level.
    mark = len(_log(flow.api))
    requests.get(flow.url + '/', timeout=10)
    _wait_log(flow.api, ' DEBUG cyborg.api.wsgi_server', mark)
    conductor = flow.conductors[owner]
    _wait_log(conductor, 'DEBUG cyborg.conductor.notifier', marks[
        conductor.name])
    assert 'Traceback' not in _log(conductor, marks[conductor.name])
    marks = {p.name: len(_log(p)) for p in daemons}
    for process in daemons:
        _configure(flow, process, debug=False)
        os.kill(process.process.pid, signal.SIGHUP)
        _wait_log(process, RELOADED_DEBUG, marks[process.name])


@pytest.mark.parametrize('which,thread', [
    ('conductor', 'conductor-heartbeat'), ('api', 'wsgi-server'),
    ('agent', 'agent-discovery')])
def test_sigusr2_writes_a_report_of_the_threads(flow, which, thread):
    process = {'conductor': flow.conductors[0], 'api': flow.api,
               'agent': flow.agents[0]}[which]
    mark = len(_log(process))
    os.kill(process.process.pid, signal.SIGUSR2)
    report = _wait_log(process, 'Thread names', mark)
    report = _wait_log(process, ' = MainThread', mark)
    assert 'Guru Meditation' in report
    assert 'Thread #' in report
    assert '= %s (daemon)' % thread in report
    time.sleep(0.5)
    assert process.running()


def _set_grace(flow, seconds: int) -> None:
    """``graceful_shutdown_timeout`` of both conductors, by SIGHUP: a
    mutable option."""
    for conductor in flow.conductors:
        mark = len(_log(conductor))
        _configure(flow, conductor, graceful_shutdown_timeout=seconds)
        os.kill(conductor.process.pid, signal.SIGHUP)
        _wait_log(conductor, 'DEFAULT.graceful_shutdown_timeout)', mark)


def test_sigterm_hands_back_a_bind_job_past_the_grace_period(flow):
    _set_grace(flow, 0)
    arq, owner = _bind_one(flow)
    conductor = flow.conductors[owner]
    mark = len(_log(conductor))
    started = time.monotonic()
    try:
        assert conductor.stop() == 0
        # Stopped without waiting for the job (grace period 0).
        assert time.monotonic() - started < PREPARE_DELAY
        log = _log(conductor, mark)
    finally:
        # The next tests need both conductors, whatever failed here.
        process = flow.start_conductor(owner)
    assert 'caught SIGTERM' in log
    assert 'Handing back 1 unfinished bind jobs (ARQs %s)' % arq in log
    assert ('cyborg-conductor stopped; work in flight was left unfinished'
            in log)
    _wait_log(process, 'Resuming 1 unfinished bind jobs', mark)
    _assert_bound(flow, arq)


def test_sigterm_lets_a_bind_job_finish_within_the_grace_period(flow):
    _set_grace(flow, 30)
    arq, owner = _bind_one(flow)
    conductor = flow.conductors[owner]
    mark = len(_log(conductor))
    assert conductor.stop() == 0
    log = _log(conductor, mark)
    assert 'Handing back' not in log
    assert 'Stopped cyborg-conductor on host' in log
    assert 'cyborg-conductor stopped\n' in log
    bound = flow.db_rows('SELECT state FROM extended_accelerator_requests '
                         'WHERE uuid = :arq', arq=arq)
    assert bound[0][0] == 'Bound'
    flow.start_conductor(owner)


def test_sigterm_stops_each_daemon_cleanly(flow):
    for process, name in [(flow.agents[0], 'cyborg-agent'),
                          (flow.api, 'cyborg-api'),
                          (flow.conductors[0], 'cyborg-conductor'),
                          (flow.conductors[1], 'cyborg-conductor')]:
        mark = len(_log(process))
        # An agent's discovery report to a conductor stopped earlier may
        # wait for its answer, and the agent up to 10 s for the report.
        assert process.stop(timeout=STOP_TIMEOUT) == 0, _log(process, mark)
        log = _log(process, mark)
        assert '%s caught SIGTERM' % name in log
        assert '%s stopped\n' % name in log, log
        assert 'Traceback' not in log


# The all-in-one -------------------------------------------------------------

@pytest.fixture(scope='module')
def allinone(work_dir):
    """A cyborg-all-in-one of this module's own (the tests stop it)."""
    directory = os.path.join(work_dir, 'signals-allinone')
    port = servers.free_port()
    process = servers.CyborgProcess(
        'cyborg-all-in-one', {'DEFAULT': {'host': 'signals-allinone'}},
        directory, args=['--host', servers.LOOPBACK, '--port', str(port),
                         '--placement-port', '0',
                         '--state-dir', os.path.join(directory, 'state')])
    with process:
        process.wait_log('Cyborg all-in-one is running.', 90)
        process.url = 'http://%s:%d' % (servers.LOOPBACK, port)
        yield process


def test_allinone_sighup_applies_debug(allinone):
    mark = len(_log(allinone))
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(allinone.config_file)
    parser.set('DEFAULT', 'debug', 'true')
    with open(allinone.config_file, 'w') as f:
        parser.write(f)
    os.kill(allinone.process.pid, signal.SIGHUP)
    log = _wait_log(allinone, 'cyborg-all-in-one ' + RELOADED_DEBUG, mark)
    assert 'policy file' in log
    requests.get(allinone.url + '/v2/devices', timeout=10)
    _wait_log(allinone, ' DEBUG cyborg.api.wsgi_server', mark)
    assert allinone.running()


def test_allinone_sigusr2_writes_a_report_of_the_threads(allinone):
    mark = len(_log(allinone))
    os.kill(allinone.process.pid, signal.SIGUSR2)
    report = _wait_log(allinone, ' = MainThread', mark)
    for thread in ('conductor-heartbeat', 'agent-discovery', 'wsgi-server'):
        assert '= %s (daemon)' % thread in report
    time.sleep(0.5)
    assert allinone.running()


def test_allinone_sigterm_stops_cleanly(allinone):
    mark = len(_log(allinone))
    assert allinone.stop(timeout=STOP_TIMEOUT) == 0
    log = _log(allinone, mark)
    assert 'cyborg-all-in-one caught SIGTERM' in log
    assert 'Stopped cyborg-conductor on host signals-allinone' in log
    assert 'cyborg-all-in-one stopped\n' in log, log
