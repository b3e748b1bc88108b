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
"""Retiring a host (``cyborg-manage host delete``): the queries on each
database, and the command's decisions with a fake Placement."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.clients import placement as placement_client
from cyborg.cmd import manage
from cyborg.conductor import placement_sync
from cyborg.db import arqs
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hosts
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from tests.unit.conductor.test_placement_sync import FakePlacement

HOST, OTHER = 'gone-host', 'other-host'
ROOTS = {HOST: 'c0ffee00-0000-4000-8000-00000000000a',
         OTHER: 'c0ffee00-0000-4000-8000-00000000000b'}
LONG_AGO = datetime.datetime(2020, 1, 1)
HARDWARE = ('devices', 'controlpath_ids', 'deployables', 'attach_handles',
            'attributes')


@pytest.fixture
def placement():
    fake_placement = FakePlacement()
    fake_placement.roots = {host + '.node': uuid
                            for host, uuid in ROOTS.items()}
    return fake_placement


@pytest.fixture
def hosts_synced(database, conf, admin_context, placement):
    """Two hosts of two fake devices each, synced to ``placement``, whose
    agents last reported long ago."""
    conf.set_override('num_devices', 2, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    sync = placement_sync.PlacementSync(placement)
    for host in (HOST, OTHER):
        inventory.apply_report(admin_context, host, host + '.node', wire,
                               device_tree.tree_digest(wire), [])
        assert sync.sync_host(admin_context, host)
    _set_heartbeat(database, LONG_AGO)
    yield
    conf.clear_override('num_devices', group='fake_driver')


def _set_heartbeat(engine, when, host=HOST):
    services = models.Service.__table__
    with engine.begin() as connection:
        connection.execute(sa.update(services).where(
            services.c.host == host).values(last_seen_up=when))


def _rows(engine, host=HOST) -> dict[str, int]:
    """Rows of ``host`` per table."""
    t = models
    with engine.connect() as connection:
        devices = [row.id for row in connection.execute(sa.select(
            t.Device.id).where(t.Device.hostname == host))]
        deployables = [row.id for row in connection.execute(sa.select(
            t.Deployable.id).where(t.Deployable.device_id.in_(devices)))]

        def count(model, condition):
            return connection.execute(sa.select(sa.func.count()).select_from(
                model).where(condition)).scalar()
        return {
            'services': count(t.Service, t.Service.host == host),
            'devices': len(devices),
            'deployables': len(deployables),
            'attach_handles': count(t.AttachHandle,
                                    t.AttachHandle.deployable_id.in_(
                                        deployables)),
            'attributes': count(t.Attribute, t.Attribute.deployable_id.in_(
                deployables)),
            'controlpath_ids': count(t.ControlpathID,
                                     t.ControlpathID.device_id.in_(devices)),
            'placement_providers': count(t.PlacementProvider,
                                         t.PlacementProvider.host == host),
        }


def _arq_on(engine, admin_context, state, with_handle=True, host=HOST):
    """An ARQ in ``state`` on ``host`` (holding one of its handles if
    ``with_handle``); its uuid."""
    profile = 'dp-%s-%s' % (state, with_handle)
    profiles_db.device_profile_create(admin_context, {
        'name': profile, 'groups': [{'resources:FPGA': '1'}]})
    arq = arqs.arq_create(admin_context, profile, 'p1')[0]
    t = models
    with engine.begin() as connection:
        handle = connection.execute(
            sa.select(t.AttachHandle.id, t.AttachHandle.deployable_id)
            .join(t.Deployable, t.Deployable.id ==
                  t.AttachHandle.deployable_id)
            .join(t.Device, t.Device.id == t.Deployable.device_id)
            .where(t.Device.hostname == host).order_by(t.AttachHandle.id)
        ).first()
        values = dict(state=state, hostname=host,
                      deployable_id=handle.deployable_id)
        if with_handle:
            values['attach_handle_id'] = handle.id
        connection.execute(sa.update(t.ExtendedAcceleratorRequest).where(
            t.ExtendedAcceleratorRequest.uuid == arq['uuid']).values(
                **values))
    return arq['uuid']


def _cyborg_providers(placement, host):
    return {uuid for uuid, provider in placement.providers.items()
            if provider['parent'] == ROOTS[host]}


# The queries ---------------------------------------------------------------

def test_record_lists_the_host_and_its_providers_not_the_compute_node(
        database, admin_context, hosts_synced, placement):
    record = hosts.host_record(admin_context, HOST)
    assert record.known
    assert [s['binary'] for s in record.services] == ['cyborg-agent']
    assert record.counts == {'devices': 2, 'controlpath_ids': 2,
                             'deployables': 2, 'attach_handles': 8,
                             'attributes': 4}
    assert {p.uuid for p in record.providers} == _cyborg_providers(
        placement, HOST)
    assert record.compute_rp_uuids == {ROOTS[HOST]}
    assert ROOTS[HOST] not in {p.uuid for p in record.providers}
    assert record.blocking_arqs == []


def test_unknown_host_is_not_known(database, admin_context, hosts_synced):
    assert not hosts.host_record(admin_context, 'never-seen').known


def test_delete_removes_every_row_of_the_host_only(
        database, admin_context, hosts_synced):
    other_before = _rows(database, OTHER)
    deleted = hosts.delete_host(admin_context, HOST)
    assert deleted == {'attributes': 4, 'attach_handles': 8,
                       'deployables': 2, 'controlpath_ids': 2, 'devices': 2,
                       'placement_providers': 2, 'services': 1}
    assert set(_rows(database).values()) == {0}
    assert _rows(database, OTHER) == other_before


@pytest.mark.parametrize('state,with_handle', [
    ('Bound', True), ('BindStarted', False), ('BindFailing', True),
    ('BindFailed', True)])
def test_delete_refused_while_a_request_holds_or_binds_the_host(
        database, admin_context, hosts_synced, state, with_handle):
    uuid = _arq_on(database, admin_context, state, with_handle)
    before = _rows(database)
    assert hosts.host_record(admin_context, HOST).blocking_arqs == [
        (uuid, state)]
    with pytest.raises(hosts.HostInUse) as error:
        hosts.delete_host(admin_context, HOST)
    assert uuid in str(error.value) and state in str(error.value)
    assert _rows(database) == before


def test_request_without_handle_only_loses_its_deployable(
        database, admin_context, hosts_synced):
    uuid = _arq_on(database, admin_context, 'Unbound', with_handle=False)
    hosts.delete_host(admin_context, HOST)
    arq = arqs.arq_get(admin_context, uuid, None)
    assert arq['deployable_id'] is None
    assert arq['state'] == 'Unbound'


def test_children_first():
    order = hosts._children_first({'leaf': 'mid', 'mid': 'top',
                                   'top': 'compute', 'alone': None})
    uuids = [p.uuid for p in order]
    assert uuids.index('leaf') < uuids.index('mid') < uuids.index('top')
    assert set(uuids) == {'leaf', 'mid', 'top', 'alone'}


# The command's decisions ---------------------------------------------------

def _delete(admin_context, placement, **kwargs):
    return manage.delete_host(admin_context, HOST,
                              client_factory=lambda conf: placement,
                              **kwargs)


def test_command_deletes_providers_then_rows(
        database, admin_context, hosts_synced, placement):
    mine = _cyborg_providers(placement, HOST)
    others = _cyborg_providers(placement, OTHER)
    removed, deleted = _delete(admin_context, placement)
    assert removed == 2
    assert deleted['devices'] == 2
    assert not _cyborg_providers(placement, HOST)
    assert _cyborg_providers(placement, OTHER) == others
    assert [call[1] for call in placement.calls
            if call[0] == 'delete'] == sorted(mine)
    assert set(_rows(database).values()) == {0}


def test_provider_already_gone_from_placement_is_fine(
        database, admin_context, hosts_synced, placement):
    gone = sorted(_cyborg_providers(placement, HOST))[0]
    del placement.providers[gone]
    removed, _deleted = _delete(admin_context, placement)
    assert removed == 1
    assert set(_rows(database).values()) == {0}


def test_unknown_host_is_refused(database, admin_context, placement):
    with pytest.raises(manage.Refused, match='Host gone-host is unknown'):
        _delete(admin_context, placement)
    assert placement.calls == []


def test_live_host_is_refused_unless_forced(
        database, admin_context, hosts_synced, placement):
    _set_heartbeat(database, datetime.datetime.utcnow())
    before = _rows(database)
    with pytest.raises(manage.Refused, match='looks alive: cyborg-agent'):
        _delete(admin_context, placement)
    assert _rows(database) == before
    assert len(_cyborg_providers(placement, HOST)) == 2
    _delete(admin_context, placement, force=True)
    assert set(_rows(database).values()) == {0}


def test_bound_request_refuses_even_with_force(
        database, admin_context, hosts_synced, placement):
    _arq_on(database, admin_context, 'Bound')
    placement.calls.clear()
    with pytest.raises(manage.Refused, match='in use by 1 accelerator'):
        _delete(admin_context, placement, force=True)
    assert placement.calls == []


def test_provider_in_use_in_placement_leaves_the_database_alone(
        database, admin_context, hosts_synced, placement):
    placement.in_use.add(sorted(_cyborg_providers(placement, HOST))[-1])
    before = _rows(database)
    with pytest.raises(manage.Refused, match='still in use in Placement'):
        _delete(admin_context, placement)
    assert _rows(database) == before
    # Run again once the allocations are gone: done.
    placement.in_use.clear()
    _delete(admin_context, placement)
    assert set(_rows(database).values()) == {0}


def test_provider_with_foreign_children_leaves_the_database_alone(
        database, admin_context, hosts_synced, placement, monkeypatch):
    def refuse(uuid):
        raise placement_client.ProviderHasChildren('children')
    monkeypatch.setattr(placement, 'delete_provider', refuse)
    before = _rows(database)
    with pytest.raises(manage.Refused, match='has child providers'):
        _delete(admin_context, placement)
    assert _rows(database) == before


def test_placement_unreachable_leaves_the_database_alone(
        database, admin_context, hosts_synced, placement):
    placement.unavailable = True
    before = _rows(database)
    with pytest.raises(manage.Refused, match='Cannot delete resource prov'):
        _delete(admin_context, placement)
    assert _rows(database) == before


def test_unconfigured_placement_is_refused(conf):
    with pytest.raises(manage.Refused, match=r'\[placement\] is not conf'):
        manage._placement_client(conf)
