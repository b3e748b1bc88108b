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

"""The inventory flow end to end, with real processes only.

A private Placement (its own process and database, so that it can be
stopped and started again), one ``cyborg-conductor``, one ``cyborg-api``
and two ``cyborg-agent`` processes (hosts ``inventory-host-a`` and
``inventory-host-b``, each with its own compute node provider and a fake
driver reading a devices file this module rewrites), all on the session's
PostgreSQL and RabbitMQ. The services use a RabbitMQ vhost of their own,
so they never talk to the ``multiprocess`` deployment's services.

Every check polls with a timeout of a few discovery cycles; after each
test the devices files are put back to :data:`BASELINE` and the test waits
until the database and Placement match it again, so the tests do not
depend on each other.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import sys
import time
from urllib import parse

import pytest
import requests
import sqlalchemy as sa

from cyborg.allinone import embedded_placement
from cyborg.domain import taints
from cyborg.domain import tolerations
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import placement as placement_lib
from tests.functional import servers
from tests.functional.placement import PlacementServer

DISCOVERY_INTERVAL = 1
# Low enough to retry soon after a Placement outage; not lower, as every
# periodic retry that overlaps another sync of the same host can corrupt
# the host's pending count (see test_concurrent_syncs_keep_pending_count).
PERIODIC_INTERVAL = 5
# A few discovery cycles, with room for a loaded 2-core machine.
CONVERGE_TIMEOUT = 30
START_TIMEOUT = conftest.START_TIMEOUT

HOSTS = {'inventory-host-a': 'inventory-node-a',
         'inventory-host-b': 'inventory-node-b'}
HOST_A, HOST_B = sorted(HOSTS)

BASELINE = {
    HOST_A: [
        {'address': '0000:20:00.0', 'type': 'FPGA',
         'resource_class': 'CUSTOM_INV_ACCEL',
         'traits': ['CUSTOM_INV_FAST'], 'accelerators': 2},
        {'address': '0000:21:00.0', 'type': 'GPU',
         'resource_class': 'CUSTOM_INV_OTHER',
         'traits': ['CUSTOM_INV_SLOW'], 'accelerators': 3},
    ],
    HOST_B: [
        {'address': '0000:30:00.0', 'type': 'FPGA',
         'resource_class': 'CUSTOM_INV_ACCEL',
         'traits': ['CUSTOM_INV_FAST', 'CUSTOM_INV_BIG'],
         'accelerators': 4},
    ],
}

# A Placement request as placement.requestlog logs it.
REQUEST_LINE = re.compile(
    r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+)" status: (\d+)')
# An inventory report as oslo.messaging logs the call at DEBUG.
RPC_CALL = 'Calling RPC method report_inventory'


# Placement's launcher, with writes delayed by the number of seconds in
# $PLACEMENT_WRITE_DELAY_FILE (when it exists): a slow Placement.
SLOWABLE_LAUNCHER = placement_lib.LAUNCHER.replace(
    'app = wsgi.init_application()\n', '''app = wsgi.init_application()
import os, time
_app = app
def app(environ, start_response):
    if environ['REQUEST_METHOD'] in ('PUT', 'POST', 'DELETE'):
        try:
            with open(os.environ['PLACEMENT_WRITE_DELAY_FILE']) as f:
                time.sleep(float(f.read()))
        except (OSError, ValueError):
            pass
    return _app(environ, start_response)
''')
assert SLOWABLE_LAUNCHER != placement_lib.LAUNCHER


class SlowablePlacement(PlacementServer):
    """A PlacementServer whose writes can be slowed down at run time."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_file = os.path.join(self.base_dir, 'write-delay')

    def set_write_delay(self, seconds: float | None) -> None:
        if seconds is None:
            if os.path.exists(self.delay_file):
                os.unlink(self.delay_file)
        else:
            with open(self.delay_file, 'w') as f:
                f.write(str(seconds))

    def _start(self) -> None:
        self._write_config()
        servers.run_logged([servers.venv_script('placement-manage'),
                            '--config-file', self.config_file, 'db', 'sync'],
                           self.log, 'placement-manage db sync',
                           cwd=self.base_dir)
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   OS_PLACEMENT_CONFIG_DIR=self.config_dir,
                   PLACEMENT_WRITE_DELAY_FILE=self.delay_file)
        self.process = servers.spawn(
            [sys.executable, '-c', SLOWABLE_LAUNCHER, servers.LOOPBACK,
             str(self.port)], self.log, env=env, cwd=self.base_dir)
        servers.wait_for(self.client().check_version, self.start_timeout,
                         'Placement on port %d' % self.port, self.process,
                         self.log)


def deployable_name(address: str) -> str:
    return address.replace(':', '_').replace('.', '_')


def expected_tree(host: str, specs: list[dict],
                  unschedulable: frozenset[str] = frozenset()) -> dict:
    """{provider name: (inventories, traits)} the host's specs should give.

    ``unschedulable``: addresses whose whole inventory is reserved. An
    unhealthy device is not reserved: its driver's verdict is the
    ``cyborg.unhealthy`` NoSchedule taint of the remediation catalog,
    whose traits keep requests that do not tolerate it off.
    """
    tree = {}
    for spec in specs:
        total = spec.get('accelerators', 4)
        reserved = total if spec['address'] in unschedulable else 0
        traits = set(spec.get('traits', ['CUSTOM_FAKE_DEVICE'])) | {
            'OWNER_CYBORG'}
        if spec.get('health', 'healthy') != 'healthy':
            traits |= tolerations.placement_traits([taints.Taint(
                taints.UNHEALTHY_KEY, taints.Effect.NO_SCHEDULE,
                value='unhealthy')])
        tree['%s_%s' % (host, deployable_name(spec['address']))] = (
            {spec.get('resource_class', 'FPGA'): {
                'total': total, 'reserved': reserved, 'min_unit': 1,
                'max_unit': total, 'step_size': 1,
                'allocation_ratio': 1.0}},
            sorted(traits))
    return tree


@dataclasses.dataclass
class Agent:
    host: str
    rp_name: str
    compute_rp_uuid: str
    devices_file: str
    process: servers.CyborgProcess

    def write_devices(self, specs) -> None:
        """Replace the devices file atomically (the agent reads it often)."""
        text = specs if isinstance(specs, str) else json.dumps(specs)
        tmp = self.devices_file + '.tmp'
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, self.devices_file)

    def report_calls(self) -> int:
        return self.process.log_text().count(RPC_CALL)


@dataclasses.dataclass
class Cluster:
    url: str
    placement: SlowablePlacement
    engine: sa.engine.Engine
    agents: dict[str, Agent]
    processes: list[servers.CyborgProcess]

    # API

    def api(self, method: str, path: str, version: str = '2.4',
            roles: str = 'admin', **kwargs) -> requests.Response:
        return requests.request(
            method, self.url + path, timeout=30,
            headers={'x-roles': roles,
                     'openstack-api-version': 'accelerator %s' % version,
                     'content-type': 'application/json'}, **kwargs)

    def deployables_by_name(self, host: str) -> dict[str, dict]:
        response = self.api('GET', '/v2/deployables')
        response.raise_for_status()
        providers = self.db_providers(host)
        return {d['name']: d for d in response.json()['deployables']
                if d['rp_uuid'] in providers}

    # Database

    def db(self, query: str, **params) -> list:
        with self.engine.connect() as connection:
            return list(connection.execute(sa.text(query), params))

    def db_devices(self, host: str) -> dict[str, dict]:
        """{address: row} of the host's devices."""
        return {row.address: row._asdict() for row in self.db(
            'SELECT * FROM devices WHERE hostname = :host', host=host)}

    def db_providers(self, host: str) -> set[str]:
        """rp_uuids of the host's deployables."""
        return {row.rp_uuid for row in self.db(
            'SELECT d.rp_uuid FROM deployables d JOIN devices v '
            'ON v.id = d.device_id WHERE v.hostname = :host', host=host)}

    def pending_syncs(self) -> dict[str, int]:
        """Changes Placement has not seen yet, per host."""
        binary = ('`binary`' if self.engine.dialect.name == 'mysql'
                  else '"binary"')
        return {row.host: row.pending for row in self.db(
            'SELECT host, sync_requested - sync_done AS pending '
            'FROM services WHERE %s = \'cyborg-agent\'' % binary)}

    # Placement

    def placement_tree(self, host: str) -> dict:
        """{child name: (inventories, traits)} under the host's node, and
        checks every child hangs right under the compute node."""
        client = self.placement.client()
        root = self.agents[host].compute_rp_uuid
        tree = {}
        for provider in client.provider_tree(root):
            if provider['uuid'] == root:
                continue
            assert provider['parent_provider_uuid'] == root, provider
            _gen, inventories = client.get_inventories(provider['uuid'])
            _gen, traits = client.get_traits(provider['uuid'])
            for record in inventories.values():
                record.pop('resource_provider_generation', None)
            tree[provider['name']] = (inventories, sorted(traits))
        return tree

    def placement_requests(self) -> list[tuple[str, str, str]]:
        return REQUEST_LINE.findall(self.placement.log_text())

    def logs(self) -> str:
        def tail(path):  # without oslo.messaging's DEBUG lines
            with open(path, errors='replace') as f:
                return ''.join([line for line in f if ' DEBUG ' not in line]
                               [-30:])
        return '\n'.join(
            ['==== %s ====\n%s' % (p.name, tail(p.log))
             for p in self.processes]
            + ['==== placement ====\n' + servers.tail(self.placement.log,
                                                      20)])

    def check_alive(self) -> None:
        for process in self.processes:
            assert process.running(), '%s died:\n%s' % (
                process.name, servers.tail(process.log))

    def wait(self, predicate, what: str, timeout: float = CONVERGE_TIMEOUT):
        """Poll ``predicate`` (any exception counts as not yet)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            self.check_alive()
            try:
                result = predicate()
            except Exception as e:
                last = e
            else:
                if result:
                    return result
                last = result
            if time.monotonic() > deadline:
                pytest.fail('%s: not after %ss (last: %r)\n%s'
                            % (what, timeout, last, self.logs()),
                            pytrace=False)
            time.sleep(0.2)

    def wait_placement(self, host: str, specs: list[dict],
                       unschedulable: frozenset[str] = frozenset()) -> None:
        expected = expected_tree(host, specs, unschedulable)
        last = {}

        def matches():
            last['tree'] = self.placement_tree(host)
            return last['tree'] == expected
        deadline = time.monotonic() + CONVERGE_TIMEOUT
        while not _quiet(matches):
            self.check_alive()
            if time.monotonic() > deadline:
                pytest.fail('Placement tree of %s:\n  expected %r\n  got %r'
                            '\n%s' % (host, expected, last.get('tree'),
                                      self.logs()), pytrace=False)
            time.sleep(0.2)

    def wait_db(self, host: str, specs: list[dict]) -> None:
        wanted = {spec['address']: spec.get('health', 'healthy')
                  for spec in specs}
        self.wait(lambda: {a: d['health'] for a, d in
                           self.db_devices(host).items()} == wanted,
                  'devices of %s in the database: %r' % (host, wanted))

    def wait_cycles(self, cycles: int = 2) -> None:
        """Wait until every agent sent ``cycles`` more reports; one more
        than asked, as the first one counted may have been under way."""
        start = {host: agent.report_calls()
                 for host, agent in self.agents.items()}
        self.wait(lambda: all(agent.report_calls() - start[host] > cycles
                              for host, agent in self.agents.items()),
                  '%d discovery cycles of every agent' % cycles)


def _quiet(predicate) -> bool:
    try:
        return bool(predicate())
    except Exception:
        return False


@pytest.fixture(scope='module')
def cluster(postgres, db_server, rabbitmq, work_dir):
    kind = 'mariadb' if isinstance(db_server, servers.MariaDBServer) else (
        'postgresql')
    directory = os.path.join(work_dir, 'inventory-' + kind)
    os.makedirs(directory)
    # On PostgreSQL: Placement on SQLite answers 500 "database is locked"
    # when the test reads while the conductor writes.
    placement = SlowablePlacement(
        os.path.join(directory, 'placement'),
        database_url=postgres.create_database('placement_inventory_'
                                              + kind))
    processes: list[servers.CyborgProcess] = []
    engine = None
    try:
        placement.start()
        client = placement.client()
        compute = {host: embedded_placement.ensure_compute_node(client, rp)
                   for host, rp in HOSTS.items()}
        database = db_server.create_database('cyborg_inventory')
        engine = sa.create_engine(database, poolclass=sa.pool.NullPool)
        port = servers.free_port()
        # A vhost of its own: with the multiprocess deployment's
        # conductor on the same vhost, both would consume the same
        # "cyborg-conductor" queue.
        common = {
            'transport_url': rabbitmq.create_vhost('cyborg_inventory_'
                                                   + kind),
            'state_path': directory,
        }
        config_file = servers.write_config(
            os.path.join(directory, 'cyborg.conf'), {
                'DEFAULT': dict(common, host='inventory-conductor',
                                heartbeat_interval=2,
                                periodic_interval=PERIODIC_INTERVAL),
                'database': {'connection': database},
                'api': {'auth_strategy': 'noauth',
                        'host_ip': servers.LOOPBACK, 'port': port},
                # As cyborg's keystone service user: with the service
                # role, which lets the conductor use POST /reshaper.
                'placement': dict(conftest.placement_config(placement.url),
                                  token=placement_lib.SERVICE_TOKEN),
            })
        servers.upgrade_cyborg_database(config_file, db_server)
        url = servers.start_control_plane(directory, config_file, port,
                                          processes, START_TIMEOUT)
        agents = {}
        for host, rp_name in HOSTS.items():
            devices_file = os.path.join(directory, host + '-devices.json')
            with open(devices_file, 'w') as f:
                json.dump(BASELINE[host], f)
            process = servers.CyborgProcess('cyborg-agent', {
                'DEFAULT': dict(
                    common, host=host, heartbeat_interval=60,
                    default_log_levels=(
                        'oslo_messaging._drivers.amqpdriver=DEBUG,'
                        'amqp=WARN,kombu=WARN,stevedore=WARN')),
                'agent': {'resource_provider_name': rp_name,
                          'discovery_interval': DISCOVERY_INTERVAL,
                          'enabled_drivers': 'fake_driver'},
                'fake_driver': {'devices_file': devices_file},
            }, directory, name='cyborg-agent-' + host).start()
            processes.append(process)
            agents[host] = Agent(host, rp_name, compute[host],
                                 devices_file, process)
        yield Cluster(url, placement, engine, agents, processes)
    finally:
        errors = []
        for process in reversed(processes):
            try:
                process.stop()
            except Exception as e:
                errors.append(e)
        if engine is not None:
            engine.dispose()
        placement.cleanup()
        if errors:
            raise errors[0]


def _restore(cluster) -> None:
    for host, agent in cluster.agents.items():
        agent.write_devices(BASELINE[host])
    for host in cluster.agents:
        cluster.wait_db(host, BASELINE[host])
        for device in cluster.db_devices(host).values():
            if device['status'] != 'enabled':
                cluster.api('POST', '/v2/devices/%s/enable'
                            % device['uuid']).raise_for_status()
        cluster.wait_placement(host, BASELINE[host])


@pytest.fixture
def baseline(cluster):
    """The cluster with both hosts synced to BASELINE, before and after."""
    _restore(cluster)
    yield cluster
    _restore(cluster)


@pytest.fixture
def synced(cluster):
    """The cluster with both hosts synced to BASELINE before the test,
    left as it is afterwards (for the module's last tests)."""
    _restore(cluster)
    return cluster


def test_first_reports(baseline):
    cluster = baseline
    for host, specs in BASELINE.items():
        # The database, through the API.
        devices = conftest.api_devices(cluster.url, hostname=host)
        assert sorted(d['type'] for d in devices) == sorted(
            s['type'] for s in specs)
        for device in devices:
            assert device['hostname'] == host
            assert device['status'] == 'enabled'
            assert device['health'] == 'healthy'
            assert device['missing'] is False
        deployables = cluster.deployables_by_name(host)
        assert sorted(deployables) == sorted(
            deployable_name(s['address']) for s in specs)
        for spec in specs:
            deployable = deployables[deployable_name(spec['address'])]
            assert deployable['num_accelerators'] == spec['accelerators']
            attributes = json.loads(deployable['attributes_list'])
            assert {'rc': spec['resource_class']} in attributes
            for trait in spec['traits']:
                assert trait in [v for a in attributes for v in a.values()]
        # Placement: one child per deployable, named <host>_<deployable>,
        # with the deployable's provider uuid.
        assert cluster.placement_tree(host) == expected_tree(host, specs)
        client = cluster.placement.client()
        children = {p['name']: p['uuid'] for p in client.provider_tree(
            cluster.agents[host].compute_rp_uuid)}
        for name, deployable in deployables.items():
            assert children['%s_%s' % (host, name)] == deployable['rp_uuid']
    client = cluster.placement.client()
    for resource_class in ('CUSTOM_INV_ACCEL', 'CUSTOM_INV_OTHER'):
        response = client.adapter.get('/resource_classes/' + resource_class,
                                      microversion='1.26',
                                      raise_exc=False)
        assert response.status_code == 200, response.text
    for trait in ('CUSTOM_INV_FAST', 'CUSTOM_INV_SLOW', 'CUSTOM_INV_BIG'):
        response = client.adapter.get('/traits/' + trait, raise_exc=False,
                                      microversion='1.6')
        assert response.status_code == 204, response.text


def test_inventories_set_with_the_reshaper(baseline):
    """The conductor, as a service user, sets the inventories of a host's
    new providers with one POST /reshaper (host A has two)."""
    seen = [(method, path, status) for method, path, status
            in baseline.placement_requests() if path == '/reshaper']
    assert ('POST', '/reshaper', '204') in seen
    assert not [r for r in seen if r[2] in ('403', '406')], seen


def _candidates_query(groups: list[dict[str, str]]) -> str:
    """An allocation candidates query (granular, 1.25+) for the groups of
    a device profile, as Nova builds it."""
    params = []
    for index, group in enumerate(groups, 1):
        resources, required = [], []
        for key, value in group.items():
            kind, _sep, name = key.partition(':')
            if kind == 'resources':
                resources.append('%s:%s' % (name, value))
            elif kind == 'trait' and value == 'required':
                required.append(name)
            elif kind == 'trait' and value == 'forbidden':
                required.append('!' + name)
        params.append(('resources%d' % index, ','.join(sorted(resources))))
        if required:
            params.append(('required%d' % index, ','.join(sorted(required))))
    if len(groups) > 1:
        params.append(('group_policy', 'none'))
    return parse.urlencode(params)


def test_allocation_candidates(baseline):
    cluster = baseline
    response = cluster.api('POST', '/v2/device_profiles', json=[{
        'name': 'inventory-fast-accel',
        'groups': [{'resources:CUSTOM_INV_ACCEL': '1',
                    'trait:CUSTOM_INV_FAST': 'required'}]}])
    assert response.status_code == 201, response.text
    response = cluster.api('GET', '/v2/device_profiles/inventory-fast-accel')
    assert response.status_code == 200, response.text
    query = _candidates_query(response.json()['device_profile']['groups'])
    client = cluster.placement.client()
    response = client.adapter.get('/allocation_candidates?' + query,
                                  microversion='1.26', raise_exc=False)
    assert response.status_code == 200, response.text
    chosen = set()
    for request in response.json()['allocation_requests']:
        assert len(request['allocations']) == 1, request
        (uuid, allocation), = request['allocations'].items()
        assert allocation['resources'] == {'CUSTOM_INV_ACCEL': 1}
        chosen.add(uuid)
    expected = {cluster.deployables_by_name(host)[
        deployable_name(BASELINE[host][0]['address'])]['rp_uuid']
        for host in (HOST_A, HOST_B)}
    assert chosen == expected
    # A trait only host B's device has narrows it down to that one.
    response = client.adapter.get(
        '/allocation_candidates?resources1=CUSTOM_INV_ACCEL:1&'
        'required1=CUSTOM_INV_BIG', microversion='1.26', raise_exc=False)
    assert response.status_code == 200, response.text
    assert [list(r['allocations']) for r in
            response.json()['allocation_requests']] == [[
                cluster.deployables_by_name(HOST_B)['0000_30_00_0'][
                    'rp_uuid']]]


def test_steady_state_makes_no_placement_requests(baseline):
    cluster = baseline
    cluster.wait(lambda: set(cluster.pending_syncs().values()) == {0},
                 'no host pending a sync')
    # Let reports already under way (and the sync they triggered) finish.
    cluster.wait_cycles(1)
    before = len(cluster.placement_requests())
    cluster.wait_cycles(2)
    # At least one periodic retry of pending hosts ran meanwhile, too.
    time.sleep(max(0, PERIODIC_INTERVAL - 2 * DISCOVERY_INTERVAL))
    requests_seen = cluster.placement_requests()[before:]
    assert requests_seen == [], (
        'identical reports caused Placement requests: %r' % requests_seen)
    assert set(cluster.pending_syncs().values()) == {0}


def test_an_unknown_digest_is_answered_with_the_tree(baseline):
    """Agents send an unchanged tree as its digest alone (conductor RPC
    1.3). When the host's row holds another digest (here changed by hand,
    as after a database restore), the conductor asks for the tree, the
    agent sends it at once, and the host is as before."""
    cluster = baseline
    conductor_log = next(p for p in cluster.processes
                         if p.name == 'cyborg-conductor').log
    asked = 'Inventory of %s: its agent sent a digest' % HOST_A

    def asked_count():
        with open(conductor_log, errors='replace') as f:
            return f.read().count(asked)
    binary = ('`binary`' if cluster.engine.dialect.name == 'mysql'
              else '"binary"')
    where = "host = :host AND %s = 'cyborg-agent'" % binary
    cluster.wait_cycles(1)
    [(applied,)] = cluster.db('SELECT report_hash FROM services WHERE '
                              + where, host=HOST_A)
    before = asked_count()
    with cluster.engine.begin() as connection:
        connection.execute(sa.text(
            "UPDATE services SET report_hash = :bad WHERE " + where),
            {'bad': '0' * 64, 'host': HOST_A})
    cluster.wait(lambda: cluster.db('SELECT report_hash FROM services '
                                    'WHERE ' + where, host=HOST_A)
                 == [(applied,)], 'the tree of %s applied again' % HOST_A)
    assert asked_count() > before
    cluster.wait_db(HOST_A, BASELINE[HOST_A])
    cluster.wait_placement(HOST_A, BASELINE[HOST_A])


def test_device_changes(baseline):
    cluster = baseline
    agent = cluster.agents[HOST_A]
    specs = copy.deepcopy(BASELINE[HOST_A])
    removed = specs.pop(1)  # 0000:21:00.0
    specs[0]['health'] = 'unhealthy'
    specs.append({'address': '0000:22:00.0', 'type': 'QAT',
                  'resource_class': 'CUSTOM_INV_NEW',
                  'traits': ['CUSTOM_INV_FAST', 'CUSTOM_INV_FRESH'],
                  'accelerators': 5})
    removed_rp = cluster.deployables_by_name(HOST_A)[
        deployable_name(removed['address'])]['rp_uuid']
    agent.write_devices(specs)
    cluster.wait_db(HOST_A, specs)
    by_type = {d['type']: d for d in
               conftest.api_devices(cluster.url, hostname=HOST_A)}
    assert sorted(by_type) == ['FPGA', 'QAT']
    assert by_type['FPGA']['health'] == 'unhealthy'
    assert by_type['QAT']['health'] == 'healthy'
    # Placement: new child, removed one deleted, unhealthy tainted.
    cluster.wait_placement(HOST_A, specs)
    client = cluster.placement.client()
    assert client.get_provider(removed_rp) is None
    response = client.adapter.get('/resource_classes/CUSTOM_INV_NEW',
                                  microversion='1.26',
                                  raise_exc=False)
    assert response.status_code == 200
    # The other host is untouched.
    assert cluster.placement_tree(HOST_B) == expected_tree(
        HOST_B, BASELINE[HOST_B])


def test_nested_device(baseline):
    """A device whose deployable holds two children: their rows point to
    it (parent_id, root_id) and their providers hang under its provider,
    itself under the compute node; removing the device removes the three
    providers, children first."""
    cluster = baseline
    agent = cluster.agents[HOST_A]
    specs = copy.deepcopy(BASELINE[HOST_A])
    specs.append({'address': '0000:23:00.0', 'type': 'NIC',
                  'resource_class': 'CUSTOM_INV_NEW',
                  'traits': ['CUSTOM_INV_FAST'], 'accelerators': 2,
                  'children': 2})
    parent = deployable_name('0000:23:00.0')
    agent.write_devices(specs)
    cluster.wait_db(HOST_A, specs)
    cluster.wait(lambda: sorted(
        (row.name, row.parent_id == row.root_id) for row in cluster.db(
            'SELECT c.name, c.parent_id, c.root_id FROM deployables c '
            'JOIN deployables p ON p.id = c.parent_id '
            'WHERE p.name = :name', name=parent)) == [
        (parent + '_c0', True), (parent + '_c1', True)],
        'children of %s in the database' % parent)
    client = cluster.placement.client()
    root = agent.compute_rp_uuid

    def nested():
        tree = {p['name']: p for p in client.provider_tree(root)}
        top = tree['%s_%s' % (HOST_A, parent)]
        children = sorted(name for name, p in tree.items()
                          if p['parent_provider_uuid'] == top['uuid'])
        _gen, inventories = client.get_inventories(
            tree['%s_%s_c0' % (HOST_A, parent)]['uuid'])
        return (top['parent_provider_uuid'] == root and children == [
            '%s_%s_c0' % (HOST_A, parent), '%s_%s_c1' % (HOST_A, parent)]
            and inventories['CUSTOM_INV_NEW']['total'] == 2)
    cluster.wait(nested, 'nested providers of %s' % parent)
    agent.write_devices(BASELINE[HOST_A])
    cluster.wait_placement(HOST_A, BASELINE[HOST_A])


def test_disable_and_enable(baseline):
    cluster = baseline
    host = HOST_B
    spec = BASELINE[host][0]
    device, = conftest.api_devices(cluster.url, hostname=host)
    rp_uuid = cluster.deployables_by_name(host)[
        deployable_name(spec['address'])]['rp_uuid']
    client = cluster.placement.client()

    response = cluster.api('POST', '/v2/devices/%s/disable' % device['uuid'])
    assert response.status_code == 204, response.text
    # The conductor answers first and syncs Placement after.
    cluster.wait(lambda: client.get_inventories(rp_uuid)[1][
        spec['resource_class']]['reserved'] == spec['accelerators'],
        'the disabled device reserving its whole inventory')
    _gen, inventories = client.get_inventories(rp_uuid)
    record = inventories[spec['resource_class']]
    assert record['reserved'] == record['total'] == spec['accelerators']
    response = cluster.api('GET', '/v2/devices/%s' % device['uuid'],
                           version='2.3')
    assert response.json()['status'] == 'maintaining'
    # Later reports keep it disabled.
    cluster.wait_cycles(2)
    assert cluster.placement_tree(host) == expected_tree(
        host, BASELINE[host], frozenset([spec['address']]))

    response = cluster.api('POST', '/v2/devices/%s/enable' % device['uuid'])
    assert response.status_code == 204, response.text
    cluster.wait(lambda: client.get_inventories(rp_uuid)[1][
        spec['resource_class']]['reserved'] == 0,
        'the enabled device reserving nothing')
    _gen, inventories = client.get_inventories(rp_uuid)
    assert inventories[spec['resource_class']]['reserved'] == 0
    response = cluster.api('GET', '/v2/devices/%s' % device['uuid'],
                           version='2.3')
    assert response.json()['status'] == 'enabled'


def test_device_vanished_while_bound_goes_once_released(baseline):
    """A device that vanishes while an ARQ holds one of its handles is
    kept (missing, its provider fully reserved) through the reports that
    follow; once the ARQ is deleted, the next report, unchanged since
    and carrying utilization as every agent's does, removes the device
    and its provider."""
    cluster = baseline
    host = HOST_A
    kept, gone = BASELINE[host]
    rp_uuid = cluster.deployables_by_name(host)[
        deployable_name(gone['address'])]['rp_uuid']
    client = cluster.placement.client()
    arq, _instance = nova_flow.start_bind(
        cluster.url + '/v2', {'resources:%s' % gone['resource_class']: '1'},
        host, rp_uuid)

    cluster.agents[host].write_devices([kept])
    cluster.wait(lambda: cluster.db_devices(host)[gone['address']][
        'missing'], 'the vanished device kept, missing')
    cluster.wait(lambda: client.get_inventories(rp_uuid)[1][
        gone['resource_class']]['reserved'] == gone['accelerators'],
        'the missing device reserving its whole inventory')
    # Reports unchanged since: the device stays while it is held.
    cluster.wait_cycles(2)
    assert cluster.db_devices(host)[gone['address']]['missing']

    response = requests.delete(
        cluster.url + '/v2/accelerator_requests', params={'arqs': arq},
        headers=nova_flow.SERVICE, timeout=30)
    assert response.status_code == 204, response.text
    cluster.wait(lambda: gone['address'] not in cluster.db_devices(host),
                 'the released device removed by an unchanged report')
    cluster.wait_placement(host, [kept])


def test_invalid_devices_file_keeps_devices(baseline):
    cluster = baseline
    agent = cluster.agents[HOST_A]
    log_size = len(agent.process.log_text())
    agent.write_devices('[{"address": "0000:20:00.0",')  # broken JSON
    cluster.wait(lambda: 'Driver fake_driver failed to discover devices'
                 in agent.process.log_text()[log_size:],
                 'the agent to report the broken devices file')
    cluster.wait_cycles(2)
    cluster.wait_db(HOST_A, BASELINE[HOST_A])
    assert len(conftest.api_devices(cluster.url, hostname=HOST_A)) == 2
    assert cluster.placement_tree(HOST_A) == expected_tree(
        HOST_A, BASELINE[HOST_A])


def test_placement_outage(synced):
    cluster = synced
    agent = cluster.agents[HOST_B]
    specs = copy.deepcopy(BASELINE[HOST_B])
    specs[0]['accelerators'] = 6
    specs.append({'address': '0000:31:00.0', 'type': 'NIC',
                  'resource_class': 'CUSTOM_INV_ACCEL',
                  'traits': ['CUSTOM_INV_OUTAGE'], 'accelerators': 1})
    cluster.placement.stop()
    try:
        agent.write_devices(specs)
        cluster.wait_db(HOST_B, specs)
        cluster.wait(lambda: cluster.pending_syncs()[HOST_B] > 0,
                     'the change of %s pending while Placement is down'
                     % HOST_B)
        deployable = cluster.db(
            "SELECT d.num_accelerators FROM deployables d JOIN devices v "
            "ON v.id = d.device_id WHERE v.address = '0000:30:00.0'")
        assert deployable[0].num_accelerators == 6
    finally:
        cluster.placement.start()
    cluster.wait_placement(HOST_B, specs)


def test_concurrent_syncs_keep_pending_count(synced):
    """Runs last: when the bug hits, the host's Placement sync is broken
    for good."""
    cluster = synced
    host = HOST_A
    spec = BASELINE[host][0]
    device = cluster.db_devices(host)[spec['address']]
    # A slow Placement: the sync that disabling triggers takes seconds,
    # and the agent's reports meanwhile (every second) sync the host too.
    cluster.placement.set_write_delay(2.5)
    try:
        response = cluster.api('POST', '/v2/devices/%s/disable'
                               % device['uuid'])
        assert response.status_code == 204, response.text
    finally:
        cluster.placement.set_write_delay(None)
    cluster.wait_placement(host, BASELINE[host],
                           frozenset([spec['address']]))
    cluster.wait_cycles(2)  # every sync under way has finished
    assert cluster.pending_syncs() == {HOST_A: 0, HOST_B: 0}
    # And the host still syncs: a new change reaches Placement.
    specs = copy.deepcopy(BASELINE[host])
    specs[1]['health'] = 'unhealthy'
    cluster.agents[host].write_devices(specs)
    cluster.wait_db(host, specs)
    cluster.wait_placement(host, specs, frozenset([spec['address']]))
