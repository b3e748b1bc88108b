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

"""The Nova flow on a three-node Galera cluster with several writers.

nova_flow.py's deployment, its database on a :class:`galera.GaleraCluster`
(one cluster for the module): API 0 reads through node 0, a second API
through node 1, conductor 0 writes through node 1 and conductor 1 through
node 2. Row locks hold on one node only and a race between nodes fails
at commit (certification), so this is where a handle given twice or a
500 would show:

* 200 binds at once of 200 ARQs to one device of 8 handles, through both
  APIs (and so both conductors): exactly 8 bound, 192 refused with 409,
  no handle held twice;
* the Nova cycle (create, bind, wait until bound, delete) at concurrency
  8 through both APIs: no failed cycle;
* each row lock that serialises writers (a project's quota row, a host's
  service row, an FPGA region) taken by two transactions through two
  nodes: the second to commit fails certification (and is retried);
* the same cycle while conductor 1's node is killed and comes back: a
  cycle fails only with a 503 (with ``Retry-After``) while the node is
  out of the cluster, and afterwards nothing is stuck or leaked.
"""

from __future__ import annotations

from concurrent import futures
import configparser
import dataclasses
import datetime
import os
import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import programming as programming_db
from cyborg.db import quotas as quotas_db
from cyborg.db import services as services_db
from tests.functional import galera
from tests.functional import nova_flow
from tests.functional import servers

HOST = 'galera-host'
HANDLES = 8
BINDS = 200
CONCURRENCY = 8
# What a 503 of the killed node's conductor may come after it is back
# and synced (a request in flight then).
GRACE = 5.0


class _Cluster:
    """The cluster as nova_flow's ``db_server``: databases are made
    through node 0; it remembers the last one's name, so that each
    conductor can be pointed at its own node."""

    def __init__(self, cluster: galera.GaleraCluster):
        self.cluster = cluster
        self.database: str | None = None

    def create_database(self, name: str) -> str:
        self.database = name
        return self.cluster.create_database(name)

    def drop_database(self, name: str) -> None:
        self.cluster.drop_database(name)


@pytest.fixture(scope='module')
def cluster():
    with galera.GaleraCluster() as running:
        yield running


def _second_api(flow, node_url: str) -> tuple[servers.CyborgProcess, str]:
    """Another cyborg-api, like the deployment's, reading through
    ``node_url``; the process and its URL."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(os.path.join(flow.directory, 'api.conf'))
    sections = {'DEFAULT': dict(parser.defaults())}
    sections.update({name: {key: value for key, value in parser.items(name)
                            if key not in parser.defaults()}
                     for name in parser.sections()})
    port = servers.free_port()
    sections['DEFAULT']['host'] = flow.name + '-api-1'
    sections['api']['port'] = port
    sections['database']['connection'] = node_url
    config_file = servers.write_config(
        os.path.join(flow.directory, 'api-1.conf'), sections)
    api = servers.CyborgProcess('cyborg-api', None, flow.directory,
                                args=['--config-file', config_file],
                                name='cyborg-api-1').start()
    url = 'http://%s:%d' % (servers.LOOPBACK, port)
    api.wait_http(url + '/', nova_flow.START_TIMEOUT)
    return api, url


@pytest.fixture(scope='module')
def flow(cluster, rabbitmq, placement, work_dir):
    db_server = _Cluster(cluster)
    conductors = iter([1, 2])

    def own_node(_transport):
        # Called once per conductor, in order: 0 on node 1, 1 on node 2.
        return {'database': {'connection': cluster.nodes[
            next(conductors)].url_for(db_server.database)}}

    with nova_flow.deployment(
            'galera', db_server, rabbitmq, placement, work_dir,
            [nova_flow.AgentSpec(HOST, devices=1, handles=HANDLES)],
            conductor_sections=own_node) as deployment:
        api, url = _second_api(
            deployment, cluster.nodes[1].url_for(db_server.database))
        deployment.api_urls = [deployment.url, url]
        try:
            yield deployment
        finally:
            api.stop()


def _profile(flow, groups: int = 1) -> str:
    return flow.create_profile([{'resources:FPGA': '1',
                                 'trait:' + flow.trait: 'required'}] * groups)


def _bind_body(arq: str, rp_uuid: str, instance: str) -> dict:
    return {arq: [{'op': 'add', 'path': '/hostname', 'value': HOST},
                  {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                  {'op': 'add', 'path': '/instance_uuid', 'value': instance}]}


def _no_handle_twice(flow) -> dict:
    stats = flow.handle_stats()
    assert stats['shared'] == [], stats
    assert stats['bound_without_handle'] == 0, stats
    assert stats['held_not_in_use'] == 0, stats
    return stats


def test_concurrent_binds_through_two_nodes_give_each_handle_once(
        flow, cluster):
    rp_uuid = flow.devices[HOST][0].rp_uuid
    profile = _profile(flow, groups=20)
    arqs = [arq['uuid'] for _ in range(BINDS // 20)
            for arq in flow.create_arqs(profile)]
    assert len(arqs) == BINDS
    start = threading.Barrier(BINDS)

    def bind(index: int) -> requests.Response:
        body = _bind_body(arqs[index], rp_uuid, str(uuid.uuid4()))
        start.wait()
        return requests.patch(
            flow.api_urls[index % 2] + '/v2/accelerator_requests',
            json=body, headers=nova_flow.SERVICE, timeout=60)

    with futures.ThreadPoolExecutor(BINDS) as pool:
        answers = list(pool.map(bind, range(BINDS)))
    codes = [response.status_code for response in answers]
    assert sorted(set(codes)) == [202, 409], [
        (r.status_code, r.text) for r in answers
        if r.status_code not in (202, 409)][:5]
    assert codes.count(202) == HANDLES and codes.count(409) == BINDS - HANDLES
    bound = [arq for arq, code in zip(arqs, codes, strict=True)
             if code == 202]
    resolved = flow.wait_resolved(bound, timeout=60)
    assert {arq['state'] for arq in resolved.values()} == {'Bound'}
    # Eight ARQs, eight different handles; the refused ones hold none.
    assert len({tuple(sorted(arq['attach_handle_info'].items()))
                for arq in resolved.values()}) == HANDLES
    stats = _no_handle_twice(flow)
    assert stats['in_use'] == HANDLES and stats['held'] == HANDLES
    assert stats['states'] == {'Bound': HANDLES, 'Initial': BINDS - HANDLES}
    flow.delete_all_arqs()
    assert flow.handle_stats()['in_use'] == 0


@dataclasses.dataclass
class _Failure:
    at: float
    step: str
    status: int
    retry_after: str | None
    text: str
    url: str
    #: When the request was sent and answered (UTC wall clock, to compare
    #: with the database's ``created_at``).
    sent_at: datetime.datetime
    answered_at: datetime.datetime


class _Cycles:
    """Nova's cycle (create, bind, wait until Bound, delete), run by
    :data:`CONCURRENCY` clients alternating between the APIs until
    stopped. A failed step (anything but the expected answer) is
    recorded, and the client cleans its ARQ up before its next cycle."""

    def __init__(self, flow, profile: str):
        self.flow = flow
        self.profile = profile
        self.rp_uuid = flow.devices[HOST][0].rp_uuid
        self.done = 0
        self.failures: list[_Failure] = []
        #: How each ARQ's clean-up was answered.
        self.cleaned: dict[str, int] = {}
        self.seen: dict[str, list] = {}
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def _fail(self, step: str, response: requests.Response,
              sent_at: datetime.datetime) -> None:
        with self._lock:
            self.failures.append(_Failure(
                time.monotonic(), step, response.status_code,
                response.headers.get('Retry-After'), response.text[:300],
                response.request.method + ' ' + response.url,
                sent_at, _utcnow()))

    def _call(self, step, method, url, expected, **kwargs):
        sent_at = _utcnow()
        response = requests.request(method, url, timeout=60, **kwargs)
        if response.status_code != expected:
            self._fail(step, response, sent_at)
            return None
        return response

    def cycle(self, api: str) -> bool:
        """One cycle through ``api``; whether it succeeded."""
        created = self._call('create', 'POST',
                             api + '/v2/accelerator_requests', 201,
                             json={'device_profile_name': self.profile})
        if created is None:
            return False
        (arq,) = created.json()['arqs']
        instance = str(uuid.uuid4())
        try:
            if self._call('bind', 'PATCH', api + '/v2/accelerator_requests',
                          202, headers=nova_flow.SERVICE,
                          json=_bind_body(arq['uuid'], self.rp_uuid,
                                          instance)) is None:
                return False
            deadline = time.monotonic() + 30
            states: list[str] = []
            while time.monotonic() < deadline:
                got = self._call('get', 'GET', api
                                 + '/v2/accelerator_requests/' + arq['uuid'],
                                 200)
                if got is None:
                    self.seen[arq['uuid']] = states
                    return False
                states.append(got.json()['state'])
                if got.json()['state'] in nova_flow.RESOLVED:
                    break
                time.sleep(0.05)
            if got.json()['state'] != 'Bound':
                self._fail('bound', got, _utcnow())
                return False
            return self._call('delete', 'DELETE',
                              api + '/v2/accelerator_requests', 204,
                              headers=nova_flow.SERVICE,
                              params={'instance': instance}) is not None
        finally:
            self._clean_up(arq['uuid'])

    def _clean_up(self, arq: str) -> None:
        """Delete ``arq`` if it is left (its cycle failed), through
        whichever API answers."""
        for attempt in range(120):
            api = self.flow.api_urls[attempt % 2]
            try:
                response = requests.delete(
                    api + '/v2/accelerator_requests', timeout=30,
                    headers=nova_flow.SERVICE, params={'arqs': arq})
            except requests.RequestException:
                response = None
            if response is not None and response.status_code in (204, 404):
                self.cleaned[arq] = response.status_code
                return
            time.sleep(0.5)
        raise AssertionError('ARQ %s could not be deleted' % arq)

    def client(self, index: int, cycles: int | None) -> None:
        api = self.flow.api_urls[index % 2]
        count = 0
        while not self.stop.is_set() and (cycles is None or count < cycles):
            if self.cycle(api):
                with self._lock:
                    self.done += 1
            count += 1

    def run(self, cycles: int | None = None):
        """Start the clients (each runs ``cycles`` cycles, or until
        :attr:`stop`); the executor's futures."""
        pool = futures.ThreadPoolExecutor(CONCURRENCY)
        running = [pool.submit(self.client, index, cycles)
                   for index in range(CONCURRENCY)]
        pool.shutdown(wait=False)
        return running


def _after_load(flow, ambiguous: list[tuple[datetime.datetime,
                                            datetime.datetime]] | None = None,
                cleaned: dict | None = None) -> int:
    """Nothing stuck, nothing leaked once the load is over; the number
    of ARQs whose creation was answered 503 although it committed (see
    the kill test), deleted here: each must have been created within one
    of the ``ambiguous`` intervals (when a creation answered 503 was
    sent and answered)."""
    def left():
        return flow.db_rows(
            'SELECT uuid, state, instance_uuid, attach_handle_id, '
            'created_at FROM extended_accelerator_requests')
    try:
        nova_flow.wait_until(lambda: left() == [] or bool(ambiguous), 30,
                             'every ARQ deleted')
        nova_flow.wait_until(lambda: all(
            row.state == 'Initial' for row in left()), 30,
            'no ARQ between states')
    except AssertionError:
        raise AssertionError('ARQs left: %s; their clean-up answers: %s'
                             % (left(), {row.uuid: (cleaned or {}).get(
                                 row.uuid) for row in left()}))
    orphans = left()
    for row in orphans:
        # Never bound, holding nothing, created while the node died.
        assert ambiguous is not None, orphans
        assert row.instance_uuid is None and row.attach_handle_id is None
        # The conductor stamps created_at before its COMMIT, which the
        # kill can make ambiguous: the row dates from the request, which
        # may be sent before the kill.
        assert any(sent <= row.created_at <= answered
                   for sent, answered in ambiguous), (row, ambiguous)
    if orphans:
        response = flow.request('DELETE', '/v2/accelerator_requests',
                                service=True, params={'arqs': ','.join(
                                    row.uuid for row in orphans)})
        assert response.status_code == 204, response.text
    stats = _no_handle_twice(flow)
    assert stats['in_use'] == 0, stats
    flow.check_alive()
    return len(orphans)


def test_nova_cycle_at_concurrency_8_through_two_nodes(flow, cluster):
    cycles = _Cycles(flow, _profile(flow))
    retried = cluster.certification_failures()
    for future in cycles.run(cycles=6):
        future.result(timeout=180)
    assert cycles.failures == []
    assert cycles.done == 6 * CONCURRENCY
    _after_load(flow)
    # Informational: what certification rolled back (and the services
    # retried) meanwhile.
    print('certification failures and aborts: %d'
          % (cluster.certification_failures() - retried))


def _node_engine(cluster, flow, index: int) -> sa.engine.Engine:
    """An engine on node ``index``'s copy of the deployment's database,
    aware of Galera as the services' engines are."""
    engine = sa.create_engine(cluster.nodes[index].url_for(
        sa.engine.make_url(flow.db_url).database),
        poolclass=sa.pool.NullPool)
    db_api.watch_galera(engine)
    return engine


def _lock_quota(connection) -> None:
    assert quotas_db.lock_project(connection, 'galera-project')


#: A host no service of the deployment writes: the agent's own row gets
#: heartbeats, which could certify first and abort either transaction.
LOCK_HOST = 'galera-lock-host'


def _lock_service(connection) -> None:
    services_db.lock(connection, connection.execute(sa.text(
        "SELECT id FROM services WHERE host = :host"),
        {'host': LOCK_HOST}).scalar())


def _lock_region(connection) -> None:
    programming_db._lock(connection, connection.execute(sa.text(
        'SELECT min(id) FROM deployables')).scalar())


@pytest.mark.parametrize('lock', [_lock_quota, _lock_service, _lock_region])
def test_a_row_lock_holds_across_nodes(flow, cluster, lock):
    """Two transactions through two nodes take the same lock (neither
    waits: the lock is the node's); the second to commit fails
    certification, as it would have waited on one server."""
    with flow.engine.begin() as connection:
        connection.execute(sa.text(
            "INSERT IGNORE INTO quota_locks (project_id) "
            "VALUES ('galera-project')"))
        connection.execute(sa.text(
            "INSERT IGNORE INTO services (host, `binary`) "
            "VALUES (:host, 'cyborg-agent')"), {'host': LOCK_HOST})
    engines = [_node_engine(cluster, flow, index) for index in (0, 1)]
    try:
        with engines[0].connect() as first, engines[1].connect() as second:
            assert db_api.is_galera(first) and db_api.is_galera(second)
            first_transaction = first.begin()
            second_transaction = second.begin()
            lock(first)
            lock(second)
            first_transaction.commit()
            with pytest.raises(sa.exc.OperationalError) as error:
                second_transaction.commit()
            # What the services retry (cyborg.db.api.is_transient).
            assert error.value.orig.args[0] == 1213
            assert db_api.is_transient(error.value)
    finally:
        for engine in engines:
            engine.dispose()


def test_a_node_killed_under_load_costs_only_503s_while_it_is_out(
        flow, cluster):
    node = cluster.nodes[2]  # conductor 1 writes through it
    cycles = _Cycles(flow, _profile(flow))
    running = cycles.run()
    try:
        nova_flow.wait_until(lambda: cycles.done >= CONCURRENCY, 60,
                             'cycles under load')
        killed = time.monotonic()
        node.kill()
        galera.wait_gone(node, cluster)
        node.restart()
        back = time.monotonic()
        done = cycles.done
        nova_flow.wait_until(lambda: cycles.done >= done + CONCURRENCY,
                             60, 'cycles after the node is back')
    finally:
        cycles.stop.set()
        for future in running:
            future.result(timeout=120)
    for failure in cycles.failures:
        if failure.status == 503:
            continue
        print('%+.2f s after the kill (back at %+.2f): %s %s %s (%s)'
              % (failure.at - killed, back - killed, failure.step,
                 failure.status, failure.url, failure.text[:150]))
        if failure.status == 404:
            arq = failure.url.split('/')[-1]
            print('  clean-up of %s: %s; states before: %s'
                  % (arq, cycles.cleaned.get(arq), cycles.seen.get(arq)))
            for process in flow.processes:
                for line in process.log_text().splitlines():
                    if arq in line:
                        print('  %s: %s' % (process.name, line[:300]))
            print(servers.tail(node.log, 60))
    for failure in cycles.failures:
        assert failure.status == 503, failure
        assert failure.retry_after, failure
        assert killed <= failure.at <= back + GRACE, (
            failure, killed, back)
    # A creation committed through the node as it died, but answered 503
    # (its connection was lost at COMMIT): an ARQ nobody knows of, as a
    # crash of a single server leaves it. The admin guide tells how to
    # find them.
    orphans = _after_load(flow, [
        (failure.sent_at, failure.answered_at)
        for failure in cycles.failures if failure.step == 'create'],
        cycles.cleaned)
    print('%d cycles, %d failed with 503 within %.1f s of the kill; %d '
          'ARQs committed although answered 503' % (
              cycles.done + len(cycles.failures), len(cycles.failures),
              back + GRACE - killed, orphans))


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(
        tzinfo=None)

