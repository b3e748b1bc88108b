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

"""Whole-service outages under Nova's cycle: the deployment and the
scenarios, shared by test_outages.py and tools/bench/outages.py.

:func:`deployment` is nova_flow.py's (two conductors, the API, one
agent) on a RabbitMQ node of its own, with its database and Placement
reached through a :class:`cut_proxy.CutProxy` each, so that a scenario
can take them away without stopping servers others use. Each scenario
(:data:`SCENARIOS`) runs :class:`nova_load.NovaLoad`, takes something
down, waits, brings it back and waits for cycles to complete again
(:func:`run`); the :class:`Outage` it returns holds what a test asserts
and the benchmark prints.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import dataclasses
import time
from typing import Any

import sqlalchemy as sa

from tests.functional import cut_proxy
from tests.functional import nova_flow
from tests.functional import nova_load

HOST = 'outages-host'
#: What deployment() sets that outages depend on: writes wait this long
#: for a conductor.
CONDUCTOR_TIMEOUT = 4
WRITES = ('create', 'bind', 'delete')
#: [nova] claim_timeout at its default (nova_flow's deployments lower it):
#: the lease of the events a conductor sent just before a database outage
#: and could not record; an outage longer than it must not have them sent
#: twice either.
CLAIM_TIMEOUT = 30
#: [conductor] abandoned_arq_timeout: well beyond the longest wait of a
#: client between its creation's answer and its bind's (a 503 after
#: CONDUCTOR_TIMEOUT), so that only the ARQs of creations answered 503
#: are deleted as abandoned.
ABANDONED_TIMEOUT = 20


class Proxied:
    """``server`` (a database server or Placement) as seen through
    ``proxy``: its URLs name the proxy's port."""

    def __init__(self, server, proxy: cut_proxy.CutProxy):
        self._server = server
        self._proxy = proxy

    def _through_proxy(self, url: str) -> str:
        return url.replace(':%d' % self._server.port,
                           ':%d' % self._proxy.port, 1)

    @property
    def url(self) -> str:
        return self._through_proxy(self._server.url)

    def create_database(self, name: str) -> str:
        return self._through_proxy(self._server.create_database(name))

    def __getattr__(self, name):
        return getattr(self._server, name)


@contextlib.contextmanager
def deployment(name: str, db_server, broker, placement, work_dir: str,
               service_down_time: int, devices: int = 2, host: str = HOST,
               claim_timeout: int = CLAIM_TIMEOUT
               ) -> Iterator[nova_flow.NovaFlowDeployment]:
    """nova_flow's deployment named ``name`` on ``broker``, with
    ``db_server`` and ``placement`` behind proxies, one agent on
    ``host`` and ``[nova] claim_timeout``; the deployment also has
    ``host``, ``kind`` (of database), ``db_server``, ``db_proxy``,
    ``placement_proxy``, ``real_placement`` and ``broker``."""
    agents = [nova_flow.AgentSpec(host, devices=devices, handles=8)]
    sections = {'DEFAULT': {'service_down_time': service_down_time}}
    with cut_proxy.CutProxy(db_server.port) as db_proxy, \
            cut_proxy.CutProxy(placement.port) as placement_proxy:
        with nova_flow.deployment(
                name, Proxied(db_server, db_proxy), broker,
                Proxied(placement, placement_proxy), work_dir, agents,
                conductor_workers=4, sections=sections,
                nova_options={'claim_timeout': claim_timeout},
                conductor_options={'abandoned_arq_timeout':
                                   ABANDONED_TIMEOUT},
                api_options={'conductor_timeout': CONDUCTOR_TIMEOUT}
        ) as flow:
            flow.host = host
            flow.kind = nova_flow.database_kind(db_server)
            flow.db_server = db_server
            flow.db_proxy = db_proxy
            flow.placement_proxy = placement_proxy
            flow.real_placement = placement
            flow.broker = broker
            yield flow


@dataclasses.dataclass
class Outage:
    result: nova_load.LoadResult
    #: time.monotonic() when the outage began and ended.
    down: float
    up: float
    #: Seconds from the end of the outage to the first cycle completed.
    recovery: float
    before: dict[str, Any]
    after: dict[str, Any]
    #: ARQs Nova heard of other than once (nova_load.events_once).
    events_wrong: dict[str, int]
    #: ARQs nobody asked for: created by a creation answered 503 (its
    #: answer was lost with the broker), which run() waited for the
    #: conductors to delete as abandoned.
    orphans: int = 0
    #: Database connections killed (connections_killed only).
    killed: int = 0

    def summary(self) -> dict[str, Any]:
        result = self.result
        summary = result.summary()
        summary.update({
            'outage_s': round(self.up - self.down, 1),
            'write_503s': result.count(503, steps=WRITES),
            'read_503s': result.count(503, steps=nova_load.READS),
            'reads_served_during': result.count(
                200, steps=nova_load.READS, since=self.down, until=self.up),
            'recovery_s': round(self.recovery, 1),
            'orphan_arqs': self.orphans,
            'left_arqs': self.after['arqs'],
            'handles_in_use': self.after['handles_in_use'],
            'unsent_events': self.after['unsent_events'],
            'events_lost_or_twice': len(self.events_wrong)})
        return summary


def settled_state(flow, timeout: float = 60) -> dict[str, Any]:
    """The database's state once every event is out."""
    nova_flow.wait_until(
        lambda: nova_load.database_state(flow)['unsent_events'] == 0,
        timeout, 'every event delivered')
    return nova_load.database_state(flow)


def run(flow, profile: str, take_down: Callable[[], Any],
        bring_back: Callable[[], Any], outage: float, clients: int = 4,
        recovery_timeout: float = 60, resolve_timeout: float = 30
        ) -> Outage:
    """Run the load, take something down for ``outage`` seconds, bring
    it back, wait for cycles again; what happened. ``resolve_timeout``:
    how long a client waits for its bind to resolve, as Nova's ``[DEFAULT]
    arq_binding_timeout``."""
    before = settled_state(flow)
    with nova_load.NovaLoad(flow, profile, flow.host, clients=clients,
                            resolve_timeout=resolve_timeout) as load:
        load.wait_cycles(5)
        down = time.monotonic()
        take_down()
        time.sleep(outage)
        bring_back()
        up = time.monotonic()
        with contextlib.suppress(AssertionError):
            # No recovery: the recovery time says so (infinite), with what
            # the clients got meanwhile.
            load.wait_cycles(5, timeout=recovery_timeout)
    result = load.finish()
    after_outage = [a.at + a.elapsed for a in result.answers
                    if a.step == 'delete' and a.status == 204
                    and a.at > up]
    recovery = min(after_outage) - up if after_outage else float('inf')
    orphans = orphans_deleted(flow, result)
    after = settled_state(flow)
    return Outage(result, down, up, recovery, before, after,
                  nova_load.events_once(flow, result), len(orphans))


def _orphans(flow, result: nova_load.LoadResult) -> list[str]:
    """The ARQs that a creation answered 503 made after all (the
    conductor created them; its answer was lost): Initial, with no
    instance, unknown to the load."""
    known = set(result.created)
    return [row.uuid for row in flow.db_rows(
        "SELECT uuid FROM extended_accelerator_requests WHERE state = "
        "'Initial' AND instance_uuid IS NULL") if row.uuid not in known]


def orphans_deleted(flow, result: nova_load.LoadResult) -> list[str]:
    """The orphans (:func:`_orphans`), once the conductors deleted them
    as abandoned (ABANDONED_TIMEOUT after their creation, at a sweep
    every ``periodic_interval``, 2 s). Any other unknown ARQ is left for
    the caller's comparison to find."""
    orphans = _orphans(flow, result)
    if orphans:
        nova_flow.wait_until(
            lambda: not set(orphans) & set(_orphans(flow, result)),
            ABANDONED_TIMEOUT + 30, 'the conductors delete the abandoned '
            'ARQs %s' % orphans, interval=1)
    return orphans


def delete_orphans(flow, result: nova_load.LoadResult) -> list[str]:
    """Delete the orphans (:func:`_orphans`) through the API. Any other
    unknown ARQ is left for the caller's comparison to find."""
    orphans = _orphans(flow, result)
    for uuid in orphans:
        response = flow.request('DELETE', '/v2/accelerator_requests',
                                service=True, params={'arqs': uuid})
        assert response.status_code == 204, response.text
    return orphans


def kill_connections(flow) -> int:
    """Kill every connection of the deployment's database on its server
    (``pg_terminate_backend``, MariaDB's ``KILL``; not the one asking);
    how many."""
    server = flow.db_server
    name = flow.db_url.rsplit('/', 1)[1].split('?', 1)[0]
    engine = sa.create_engine(server.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            if flow.kind == 'postgresql':
                return len(connection.execute(sa.text(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE datname = :name AND pid <> pg_backend_pid()'),
                    {'name': name}).all())
            ids = [row[0] for row in connection.execute(sa.text(
                'SELECT id FROM information_schema.processlist WHERE '
                'db = :name AND id <> connection_id()'), {'name': name})]
            return sum(_kill_mysql_thread(connection, thread)
                       for thread in ids)
    finally:
        engine.dispose()


# MariaDB's answer to KILL of a thread that is gone.
_UNKNOWN_THREAD = 1094


def _kill_mysql_thread(connection, thread: int) -> bool:
    """KILL one thread; False when it ended between the listing and
    the KILL (a pooled connection closed, a process exited)."""
    try:
        connection.execute(sa.text('KILL %d' % thread))
    except sa.exc.OperationalError as error:
        if error.orig.args[0] != _UNKNOWN_THREAD:
            raise
        return False
    return True


def broker_down(flow, profile: str, outage: float, **kwargs) -> Outage:
    return run(flow, profile, flow.broker.stop, flow.broker.start, outage,
               **kwargs)


def database_down(flow, profile: str, outage: float, **kwargs) -> Outage:
    return run(flow, profile, flow.db_proxy.down, flow.db_proxy.up, outage,
               **kwargs)


def connections_killed(flow, profile: str, outage: float = 1.0,
                       **kwargs) -> Outage:
    """Every connection killed once; ``outage``: how long the load runs
    on before the end of the outage is counted."""
    killed = []
    outcome = run(flow, profile,
                  lambda: killed.append(kill_connections(flow)),
                  lambda: None, outage, **kwargs)
    outcome.killed = killed[0]
    return outcome


SCENARIOS: dict[str, Callable[..., Outage]] = {
    'broker down': broker_down,
    'database down': database_down,
    'every connection killed': connections_killed,
}
