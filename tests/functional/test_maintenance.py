# Copyright 2026 The Cyborg Authors.
#
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
"""The maintenance commands as an operator runs them, on PostgreSQL and
MariaDB: ``cyborg-dbsync purge`` and ``online_data_migrations``, and
``cyborg-manage host delete`` against the real Placement, with providers
created by the conductor's own sync code.

Every command runs as its own process (``python -m cyborg.cmd.<name>``)
with a cyborg.conf, as it does in production.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import subprocess
import sys
import uuid

from oslo_config import cfg
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.accelerator.drivers.fake import opts as fake_driver_conf
from cyborg.allinone import embedded_placement
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import arqs
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers

EVENTS = models.NovaEvent.__table__
SERVICES = models.Service.__table__
DEVICES = models.Device.__table__
PROVIDERS = models.PlacementProvider.__table__
ARQS = models.ExtendedAcceleratorRequest.__table__
HANDLES = models.AttachHandle.__table__
DEPLOYABLES = models.Deployable.__table__


@dataclasses.dataclass
class Database:
    kind: str
    url: str
    config: str
    engine: sa.engine.Engine


@pytest.fixture(scope='module')
def database(db_server, placement, tmp_path_factory):
    """A database migrated by ``cyborg-dbsync upgrade``, and a cyborg.conf
    for it and the session's Placement."""
    kind = nova_flow.database_kind(db_server)
    name = 'maint_%s_%s' % (kind, uuid.uuid4().hex[:8])
    url = db_server.create_database(name)
    directory = tmp_path_factory.mktemp('maintenance-' + kind)
    config = servers.write_config(os.path.join(directory, 'cyborg.conf'), {
        'DEFAULT': {'service_down_time': 60},
        'database': {'connection': url},
        'placement': conftest.placement_config(placement.url),
    })
    engine = sa.create_engine(url)
    try:
        result = _run('dbsync', config, 'upgrade')
        assert result.returncode == 0, result.stderr
        yield Database(kind, url, config, engine)
    finally:
        engine.dispose()
        db_server.drop_database(name)


def _run(command: str, config: str, *args: str
         ) -> subprocess.CompletedProcess:
    return servers.run(
        [sys.executable, '-m', 'cyborg.cmd.' + command, '--config-file',
         config, *args], timeout=120)


def _count(engine, table, *conditions) -> int:
    with engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(
            table).where(*conditions)).scalar()


# cyborg-dbsync purge -------------------------------------------------------

def test_purge(database):
    now = datetime.datetime.utcnow()
    old = now - datetime.timedelta(days=10)
    rows = [dict(arq_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()),
                 status='completed', attempts=1, next_attempt_at=old,
                 created_at=old, sent_at=sent_at)
            for sent_at in (old, old, old, None, now)]
    with database.engine.begin() as connection:
        connection.execute(sa.delete(EVENTS))
        connection.execute(sa.insert(EVENTS), rows)
        connection.execute(sa.insert(SERVICES), [
            dict(host='purge-%s' % binary, binary=binary, last_seen_up=old,
                 sync_requested=0, sync_done=0)
            for binary in ('cyborg-conductor', 'cyborg-agent')])
    purged_services = SERVICES.c.host.like('purge-%')

    result = _run('dbsync', database.config, 'purge', '--older-than', '7',
                  '--dry-run')
    assert result.returncode == 0, result.stderr
    assert 'nova_events: 3 would be deleted (dry run)' in result.stdout
    assert 'services: 1 would be deleted (dry run)' in result.stdout
    assert _count(database.engine, EVENTS) == 5
    assert _count(database.engine, SERVICES, purged_services) == 2

    result = _run('dbsync', database.config, 'purge', '--older-than', '7',
                  '--batch-size', '2')
    assert result.returncode == 0, result.stderr
    assert 'nova_events: 3 deleted' in result.stdout
    assert 'services: 1 deleted' in result.stdout
    # Left: the event never sent (however old) and the recent one; the
    # agent (its host is retired by cyborg-manage host delete).
    assert _count(database.engine, EVENTS) == 2
    assert _count(database.engine, EVENTS, EVENTS.c.sent_at.is_(None)) == 1
    assert _count(database.engine, SERVICES, purged_services,
                  SERVICES.c.binary == 'cyborg-agent') == 1
    assert _count(database.engine, SERVICES, purged_services) == 1


@pytest.mark.parametrize('args,message', [
    (['--older-than', '-3'],
     "cyborg-dbsync purge: --older-than must be a non-negative integer and "
     "at most 36500, "
     "not '-3'"),
    (['--older-than', 'week'],
     "cyborg-dbsync purge: --older-than must be a non-negative integer and "
     "at most 36500, "
     "not 'week'"),
    (['--older-than', '1', '--batch-size', '0'],
     "cyborg-dbsync purge: --batch-size must be an integer of at least 1, "
     "not '0'"),
])
def test_purge_bad_arguments(database, args, message):
    result = _run('dbsync', database.config, 'purge', *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [message]


# cyborg-dbsync online_data_migrations --------------------------------------

@pytest.mark.parametrize('args', [[], ['--max-count', '10']])
def test_online_data_migrations_all_done(database, args):
    result = _run('dbsync', database.config, 'online_data_migrations',
                  *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == (
        'All online data migrations are done.')


def test_online_data_migrations_bad_max_count(database):
    result = _run('dbsync', database.config, 'online_data_migrations',
                  '--max-count', '0')
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "cyborg-dbsync online_data_migrations: --max-count must be an "
        "integer of at least 1, not '0'"]


# cyborg-manage host delete -------------------------------------------------

@pytest.fixture
def synced_host(database, placement):
    """A host whose two fake devices the conductor's code recorded and
    synced to Placement under a compute node provider; (host, compute
    node uuid, provider uuids)."""
    host = 'maint-host-%s-%s' % (database.kind, uuid.uuid4().hex[:6])
    conf = cfg.ConfigOpts()
    fake_driver_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('num_devices', 2, group='fake_driver')
    db_api.configure(_DatabaseConf(database.url))
    client = placement.client()
    compute = embedded_placement.ensure_compute_node(client, host + '.node')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    context = cyborg_context.get_admin_context()
    inventory.apply_report(context, host, host + '.node', wire,
                           device_tree.tree_digest(wire), [])
    assert placement_sync.PlacementSync(client).sync_host(context, host)
    providers = sorted(p['uuid'] for p in client.provider_tree(compute)
                       if p['uuid'] != compute)
    assert len(providers) == 2
    try:
        yield host, compute, providers
    finally:
        db_api.get_engine().dispose()
        # What a failed test left in the shared Placement: children first.
        for provider in client.provider_tree(compute):
            if provider['uuid'] != compute:
                client.delete_provider(provider['uuid'])
        client.delete_provider(compute)


class _DatabaseConf:
    def __init__(self, url):
        self.database = {'connection': url}


def _host_rows(engine, host) -> dict[str, int]:
    return {'services': _count(engine, SERVICES, SERVICES.c.host == host),
            'devices': _count(engine, DEVICES, DEVICES.c.hostname == host),
            'providers': _count(engine, PROVIDERS, PROVIDERS.c.host == host)}


def _bound_arq(engine, host) -> str:
    context = cyborg_context.get_admin_context()
    profile = 'maint-%s' % uuid.uuid4().hex[:8]
    profiles_db.device_profile_create(context, {
        'name': profile, 'groups': [{'resources:FPGA': '1'}]})
    arq = arqs.arq_create(context, profile, 'project')[0]
    with engine.begin() as connection:
        handle = connection.execute(
            sa.select(HANDLES.c.id, HANDLES.c.deployable_id)
            .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
            .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
            .where(DEVICES.c.hostname == host)).first()
        connection.execute(sa.update(HANDLES).where(
            HANDLES.c.id == handle.id).values(in_use=True))
        connection.execute(sa.update(ARQS).where(
            ARQS.c.uuid == arq['uuid']).values(
                state='Bound', hostname=host, attach_handle_id=handle.id,
                deployable_id=handle.deployable_id,
                instance_uuid=str(uuid.uuid4())))
    return arq['uuid']


def test_host_delete(database, placement, synced_host):
    host, compute, providers = synced_host
    client = placement.client()
    engine = database.engine
    rows = _host_rows(engine, host)
    assert rows == {'services': 1, 'devices': 2, 'providers': 2}

    def still_there():
        assert _host_rows(engine, host) == rows
        assert all(client.get_provider(uuid) for uuid in providers)

    # The agent reported a moment ago: it looks alive.
    result = _run('manage', database.config, 'host', 'delete', host)
    assert result.returncode == 1
    assert 'looks alive: cyborg-agent' in result.stderr
    still_there()

    with engine.begin() as connection:
        connection.execute(sa.update(SERVICES).where(
            SERVICES.c.host == host).values(
                last_seen_up=datetime.datetime(2020, 1, 1)))
    arq = _bound_arq(engine, host)
    result = _run('manage', database.config, 'host', 'delete', host,
                  '--force')
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        'cyborg-manage: Host %s is in use by 1 accelerator request(s): %s '
        '(Bound); unbind or delete them (delete or move their instances) '
        'first.' % (host, arq)]
    still_there()

    with engine.begin() as connection:
        connection.execute(sa.delete(ARQS).where(ARQS.c.uuid == arq))
    result = _run('manage', database.config, 'host', 'delete', host)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        'Deleted host %s: 2 resource provider(s) from Placement; database '
        'rows: attributes 4, attach_handles 8, deployables 2, '
        'controlpath_ids 2, devices 2, placement_providers 2, services 1.'
        % host]
    assert _host_rows(engine, host) == {'services': 0, 'devices': 0,
                                        'providers': 0}
    assert [client.get_provider(uuid) for uuid in providers] == [None, None]
    # Nova's compute node provider stays.
    assert client.get_provider(compute) is not None

    result = _run('manage', database.config, 'host', 'delete', host)
    assert result.returncode == 1
    assert 'Host %s is unknown' % host in result.stderr


def test_host_delete_needs_a_host(database):
    result = _run('manage', database.config, 'host', 'delete')
    assert result.returncode == 2
    assert 'HOST' in result.stderr
