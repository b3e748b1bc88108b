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

"""Fixtures of the functional tests: real servers and deployments.

Session-scoped, each started once on demand and always stopped:

* ``postgres``: a private PostgreSQL cluster (:class:`PostgreSQLServer`);
* ``mariadb``: a private MariaDB server (:class:`MariaDBServer`), started
  only when a test asks for it;
* ``rabbitmq``: a private RabbitMQ node (:class:`RabbitMQServer`);
* ``keystone``: a real Keystone on that PostgreSQL
  (:class:`~tests.functional.keystone.KeystoneServer`);
* ``multiprocess``: a fresh PostgreSQL database with this tree's schema
  (:func:`servers.upgrade_cyborg_database`), then ``cyborg-conductor``
  (syncing to the real ``placement``), ``cyborg-api`` (noauth) and one
  ``cyborg-agent`` (host ``functional-agent-1``, fake driver with a
  devices file that mimics the driver's default: one FPGA device, 4
  TEST_PCI handles, trait CUSTOM_FAKE_DEVICE) talking over the private
  RabbitMQ;
* ``allinone``: ``cyborg-all-in-one`` on SQLite in a temporary state dir.

Module-scoped: ``placement_pg``, a Placement on the session's
PostgreSQL for the module's real Nova services (nova_services.py).

Module-scoped, parametrized: ``db_server``, the session's PostgreSQL and
then its MariaDB (:data:`DATABASES`), for the module-scoped deployments
whose tests must hold on both production databases.

Both deployments are yielded only once their agent's device is visible
through the API, so API tests can rely on at least one device.

A deployment is a :class:`Deployment`; its ``url`` is the API base URL,
e.g. ``http://127.0.0.1:PORT`` (no trailing slash).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile

import pytest
import requests
import sqlalchemy as sa

from cyborg.allinone import embedded_placement
from tests.functional import servers
from tests.functional.keystone import KeystoneServer
from tests.functional.placement import PlacementServer
from tests.functional.placement import placement  # noqa: F401

DEPLOYMENTS = ('multiprocess', 'allinone')
# The production databases, as the db_server fixture's ids, and the
# session fixture that starts each.
DATABASES = {'postgresql': 'postgres', 'mariadb': 'mariadb'}
START_TIMEOUT = 90
MULTIPROCESS_AGENT_HOST = 'functional-agent-1'
# The fake driver's default device, spelled out.
DEFAULT_FAKE_DEVICES = [{
    'address': '0000:10:00.0', 'type': 'FPGA', 'resource_class': 'FPGA',
    'traits': ['CUSTOM_FAKE_DEVICE'], 'accelerators': 4,
    'handle_type': 'TEST_PCI', 'health': 'healthy'}]


def placement_config(url: str) -> dict:
    """``[placement]`` options to reach a no-keystone Placement."""
    return {'auth_type': 'admin_token', 'endpoint': url, 'token': 'admin',
            'endpoint_override': url}


ALL_IN_ONE_RUNNING = 'Cyborg all-in-one is running.'


@contextlib.contextmanager
def all_in_one_on_host(config: dict, directory: str, tree, port: int):
    """A ``cyborg-all-in-one`` on ``port`` whose agent reads the host
    fixture ``tree`` (its root, and its vendor commands as the only ones
    on PATH), with ``config`` and state in ``directory``; the process,
    running, and stopped after."""
    process = servers.CyborgProcess(
        'cyborg-all-in-one', config, directory,
        args=['--host', servers.LOOPBACK, '--port', str(port),
              '--placement-port', '0', '--host-root', tree.root,
              '--state-dir', os.path.join(directory, 'state')],
        env={'PATH': tree.tools_dir})
    try:
        process.start()
        process.wait_log(ALL_IN_ONE_RUNNING, START_TIMEOUT)
        yield process
    finally:
        process.stop()


def all_in_one_handles_in_use(work_dir: str) -> int:
    """Attach handles in use in the database of the all-in-one started
    in ``work_dir`` (by :func:`all_in_one_on_host`)."""
    engine = sa.create_engine('sqlite:///' + os.path.join(
        work_dir, 'state', 'cyborg.sqlite'), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(
                'SELECT count(*) FROM attach_handles WHERE in_use = 1'
            )).scalar()
    finally:
        engine.dispose()


def api_devices(url: str, **params) -> list[dict]:
    """GET /v2/devices as admin at microversion 2.4."""
    response = requests.get(
        url + '/v2/devices', params=params, timeout=10,
        headers={'x-roles': 'admin',
                 'openstack-api-version': 'accelerator 2.4'})
    response.raise_for_status()
    return response.json()['devices']


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
def schema_dump_dir(tmp_path_factory) -> str:
    """A directory of this test run that every xdist worker shares (the
    parent of the workers' base temporary directories), for what is
    built once per run: the schema dumps of
    :meth:`servers.PostgreSQLServer.load_schema`."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        base = base.parent
    path = os.path.join(str(base), 'schema-dumps')
    os.makedirs(path, exist_ok=True)
    return path


@pytest.fixture(scope='session')
def postgres(schema_dump_dir):
    with servers.PostgreSQLServer(dump_dir=schema_dump_dir) as server:
        yield server


@pytest.fixture(scope='session')
def mariadb():
    with servers.MariaDBServer() as server:
        yield server


@pytest.fixture(scope='module', params=list(DATABASES))
def db_server(request):
    """The session's PostgreSQL, then its MariaDB (both have
    ``create_database``/``drop_database``/``url_for``): a module-scoped
    fixture built on it runs its module's tests once per database, one
    database after the other."""
    return request.getfixturevalue(DATABASES[request.param])


# Virtual hosts the session's RabbitMQ makes at its boot, for
# create_vhost to hand out with no rabbitmqctl run (a worker's modules ask
# for about 25 in a whole run).
SESSION_VHOSTS = 32


@pytest.fixture(scope='session')
def rabbitmq():
    with servers.RabbitMQServer(vhosts=SESSION_VHOSTS) as server:
        yield server


@pytest.fixture(scope='session')
def keystone(postgres):
    """A real Keystone (:class:`KeystoneServer`) with its database on
    the session's PostgreSQL (its schema restored from the run's dump)."""
    with KeystoneServer(postgres.create_database('keystone'),
                        db_server=postgres) as server:
        yield server


@pytest.fixture(scope='module')
def placement_pg(request, postgres, work_dir):
    """A Placement of the module on PostgreSQL, for real Nova services
    (nova_services.py): the session's runs on SQLite, which answers
    concurrent writes (two computes starting) with 'database is
    locked'."""
    name = request.module.__name__.rsplit('.', 1)[-1]
    with PlacementServer(
            os.path.join(work_dir, '%s-placement' % name),
            database_url=postgres.create_database('placement_%s' % name),
            db_server=postgres) as server:
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
def multiprocess(postgres, rabbitmq, placement, work_dir):  # noqa: F811
    """cyborg-conductor + cyborg-api + one cyborg-agent on PostgreSQL,
    RabbitMQ and the real Placement."""
    directory = os.path.join(work_dir, 'multiprocess')
    os.makedirs(directory)
    port = servers.free_port()
    config = {
        'DEFAULT': {
            'transport_url': rabbitmq.url,
            'host': 'functional-multiprocess',
            'state_path': directory,
            'heartbeat_interval': 2,
            'periodic_interval': 2,
        },
        'database': {'connection': postgres.create_database('cyborg_api')},
        'api': {'auth_strategy': 'noauth', 'host_ip': servers.LOOPBACK,
                'port': port},
        'placement': placement_config(placement.url),
    }
    config_file = servers.write_config(
        os.path.join(directory, 'cyborg.conf'), config)
    servers.upgrade_cyborg_database(config_file, postgres)
    embedded_placement.ensure_compute_node(placement.client(),
                                           MULTIPROCESS_AGENT_HOST)
    devices_file = os.path.join(directory, 'agent-devices.json')
    with open(devices_file, 'w') as f:
        json.dump(DEFAULT_FAKE_DEVICES, f)
    agent_config = {
        'DEFAULT': {'transport_url': rabbitmq.url,
                    'host': MULTIPROCESS_AGENT_HOST,
                    'state_path': directory, 'heartbeat_interval': 2},
        'agent': {'resource_provider_name': MULTIPROCESS_AGENT_HOST,
                  'discovery_interval': 2,
                  'enabled_drivers': 'fake_driver'},
        'fake_driver': {'devices_file': devices_file},
    }
    processes = []
    try:
        url = servers.start_control_plane(directory, config_file, port,
                                          processes, START_TIMEOUT)
        agent = servers.CyborgProcess(
            'cyborg-agent', agent_config, directory).start()
        processes.append(agent)
        servers.wait_for(lambda: api_devices(url), START_TIMEOUT,
                         'the device of %s in the API'
                         % MULTIPROCESS_AGENT_HOST, agent.process, agent.log)
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
        process.wait_log(ALL_IN_ONE_RUNNING, START_TIMEOUT)
        url = 'http://%s:%d' % (servers.LOOPBACK, port)
        process.wait_http(url + '/', START_TIMEOUT)
        servers.wait_for(lambda: api_devices(url), START_TIMEOUT,
                         'the device of the all-in-one in the API',
                         process.process, process.log)
        yield Deployment('allinone', url, [process])
    finally:
        process.stop()


@pytest.fixture(params=DEPLOYMENTS)
def deployment(request) -> Deployment:
    """Each deployment in turn."""
    return request.getfixturevalue(request.param)
