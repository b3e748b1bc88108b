"""Fixtures of the functional tests: real servers and deployments.

Session-scoped, each started once on demand and always stopped:

* ``postgres``: a private PostgreSQL cluster (:class:`PostgreSQLServer`);
* ``rabbitmq``: a private RabbitMQ node (:class:`RabbitMQServer`);
* ``multiprocess``: ``cyborg-dbsync upgrade`` on a fresh PostgreSQL
  database, then ``cyborg-conductor`` and ``cyborg-api`` (noauth) talking
  over the private RabbitMQ;
* ``allinone``: ``cyborg-all-in-one`` on SQLite in a temporary state dir.

A deployment is a :class:`Deployment`; its ``url`` is the API base URL,
e.g. ``http://127.0.0.1:PORT`` (no trailing slash).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import pytest

from tests.functional import servers
from tests.functional.placement import placement  # noqa: F401

DEPLOYMENTS = ('multiprocess', 'allinone')
START_TIMEOUT = 90


@dataclasses.dataclass
class Deployment:
    name: str
    url: str
    processes: list[servers.CyborgProcess]

    def logs(self) -> str:
        """Every process's log, for failure messages."""
        return '\n'.join('==== %s ====\n%s' % (p.name, servers.tail(p.log, 60))
                         for p in self.processes)

    def check_alive(self) -> None:
        for process in self.processes:
            assert process.running(), (
                '%s of the %s deployment died:\n%s'
                % (process.name, self.name, servers.tail(process.log)))


@pytest.fixture(scope='session')
def work_dir():
    path = tempfile.mkdtemp(prefix='cyborg-functional-')
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope='session')
def postgres():
    with servers.PostgreSQLServer() as server:
        yield server


@pytest.fixture(scope='session')
def rabbitmq():
    with servers.RabbitMQServer() as server:
        yield server


def _stop_all(processes):
    errors = []
    for process in reversed(processes):
        try:
            process.stop()
        except Exception as e:
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture(scope='session')
def multiprocess(postgres, rabbitmq, work_dir):
    """cyborg-conductor + cyborg-api on PostgreSQL and RabbitMQ."""
    directory = os.path.join(work_dir, 'multiprocess')
    os.makedirs(directory)
    port = servers.free_port()
    config = {
        'DEFAULT': {
            'transport_url': rabbitmq.url,
            'host': 'functional-multiprocess',
            'state_path': directory,
            'heartbeat_interval': 2,
        },
        'database': {'connection': postgres.create_database('cyborg_api')},
        'api': {'auth_strategy': 'noauth', 'host_ip': servers.LOOPBACK,
                'port': port},
    }
    config_file = servers.write_config(
        os.path.join(directory, 'cyborg.conf'), config)
    result = servers.run_script('cyborg-dbsync', 'upgrade',
                                config_file=config_file)
    assert result.returncode == 0, result.stdout + result.stderr
    processes = []
    try:
        conductor = servers.CyborgProcess(
            'cyborg-conductor', None, directory,
            args=['--config-file', config_file]).start()
        processes.append(conductor)
        conductor.wait_log('Started cyborg-conductor', START_TIMEOUT)
        api = servers.CyborgProcess(
            'cyborg-api', None, directory,
            args=['--config-file', config_file]).start()
        processes.append(api)
        url = 'http://%s:%d' % (servers.LOOPBACK, port)
        api.wait_http(url + '/', START_TIMEOUT)
        yield Deployment('multiprocess', url, processes)
    finally:
        _stop_all(processes)


@pytest.fixture(scope='session')
def allinone(work_dir):
    """cyborg-all-in-one on SQLite in a temporary state directory."""
    directory = os.path.join(work_dir, 'allinone')
    port = servers.free_port()
    process = servers.CyborgProcess(
        'cyborg-all-in-one', {'DEFAULT': {'host': 'functional-allinone'}},
        directory, args=['--host', servers.LOOPBACK, '--port', str(port),
                         '--placement-port', '0',
                         '--state-dir', os.path.join(directory, 'state')])
    try:
        process.start()
        process.wait_log('Cyborg all-in-one is running.', START_TIMEOUT)
        url = 'http://%s:%d' % (servers.LOOPBACK, port)
        process.wait_http(url + '/', START_TIMEOUT)
        yield Deployment('allinone', url, [process])
    finally:
        process.stop()


@pytest.fixture(params=DEPLOYMENTS)
def deployment(request) -> Deployment:
    """Each deployment in turn."""
    return request.getfixturevalue(request.param)
