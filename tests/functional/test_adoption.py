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

"""Adopting devices and Placement providers imported from an upstream
Cyborg, against the real Placement, on PostgreSQL and MariaDB.

The imported rows are written as the import writes them
(:mod:`tests.unit.conductor.imported`), the providers as upstream left
them in Placement (upstream's names and uuids, directly under the compute
node, ``total`` and ``max_unit`` only, upstream's traits) with an
instance's allocation made as Nova makes it (``PUT /allocations``); then
the conductor's code applies our agent's first report and syncs.
"""

from __future__ import annotations

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
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import migration
from cyborg.domain import device_tree
from tests.functional import nova_flow
from tests.unit.conductor import imported

pytestmark = pytest.mark.timeout(300)

ADDRESS = '0000:10:00.0'
OURS = '0000_10_00_0'
ALLOCATION_VERSION = '1.36'


class _DatabaseConf:
    def __init__(self, url):
        self.database = {'connection': url}


@pytest.fixture(scope='module')
def engine(db_server):
    """A migrated database of the server's kind; the DB API uses it."""
    kind = nova_flow.database_kind(db_server)
    name = 'adopt_%s_%s' % (kind, uuid.uuid4().hex[:8])
    url = db_server.create_database(name)
    engine = sa.create_engine(url)
    try:
        migration.upgrade(engine=engine)
        db_api.configure(_DatabaseConf(url))
        yield engine
    finally:
        db_api.get_engine().dispose()
        engine.dispose()
        db_server.drop_database(name)


@pytest.fixture
def host(engine, placement):
    """A host of our agent (one fake device at ADDRESS with the functions
    1 to 3), its compute node provider made as nova-compute makes it;
    (host, compute node uuid, client, report)."""
    name = 'adopt-%s' % uuid.uuid4().hex[:8]
    client = placement.client()
    compute = embedded_placement.ensure_compute_node(client, name)
    conf = cfg.ConfigOpts()
    fake_driver_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('num_devices', 1, group='fake_driver')
    conf.set_override('accelerators_per_device', 3, group='fake_driver')
    try:
        wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    finally:
        # The group object, and so its overrides, is shared by every
        # ConfigOpts that registers it.
        conf.clear_override('num_devices', group='fake_driver')
        conf.clear_override('accelerators_per_device', group='fake_driver')
    try:
        yield name, compute, client, wire
    finally:
        for provider in client.provider_tree(compute):
            if provider['uuid'] != compute:
                _deallocate_all(client, provider['uuid'])
                client.delete_provider(provider['uuid'])
        client.delete_provider(compute)


def _upstream_provider(client, compute, name, total, traits=()):
    """A provider as upstream's conductor made it."""
    uuid_ = imported.upstream_rp_uuid(name)
    generation = client.create_provider(uuid_, name, compute)['generation']
    generation = client.set_inventories(uuid_, generation, {
        'FPGA': {'total': total, 'max_unit': total}})
    for trait in traits:
        client.ensure_trait(trait)
    client.set_traits(uuid_, generation, list(traits))
    return uuid_


def _allocate(client, provider, consumer):
    """Nova's allocation of one FPGA of ``provider`` to ``consumer``."""
    client.request('PUT', '/allocations/%s' % consumer, json={
        'allocations': {provider: {'resources': {'FPGA': 1}}},
        'project_id': 'p1', 'user_id': 'u1', 'consumer_generation': None},
        microversion=ALLOCATION_VERSION)


def _deallocate(client, consumer):
    client.request('DELETE', '/allocations/%s' % consumer,
                   microversion=ALLOCATION_VERSION)


def _deallocate_all(client, provider):
    for consumer in client.provider_allocations(provider):
        _deallocate(client, consumer)


def _apply_and_sync(context, host, client, wire) -> bool:
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])
    return placement_sync.PlacementSync(client).sync_host(context, host)


def _tree(client, compute) -> dict[str, dict]:
    return {provider['uuid']: provider
            for provider in client.provider_tree(compute)
            if provider['uuid'] != compute}


def test_matching_host_is_adopted_with_its_allocation(engine, host):
    """Nothing created or deleted; inventory and traits become ours at
    once (an upstream trait a profile requires stays); the bound handle
    stays bound; name changes once the allocation is gone."""
    name, compute, client, wire = host
    context = cyborg_context.get_admin_context()
    profiles_db.device_profile_create(context, {
        'name': 'kept-%s' % name, 'groups': [{
            'resources:FPGA': '1', 'trait:CUSTOM_FPGA_KEPT': 'required'}]})
    upstream_name = name + '_FakeDevice'
    traits = ['CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_KEPT',
              'CUSTOM_FPGA_UPSTREAM']
    rows = imported.insert(engine, name, ADDRESS, [imported.Deployable(
        upstream_name, [1, 2, 3], in_use=[2], traits=traits)],
        profile='upstream-' + name)
    provider = _upstream_provider(client, compute, upstream_name, 3, traits)
    instance = str(uuid.uuid4())
    _allocate(client, provider, instance)
    before = set(_tree(client, compute))

    # Complete for now: only the name waits for the allocation.
    assert _apply_and_sync(context, name, client, wire) is True
    assert set(_tree(client, compute)) == before
    found = client.get_provider(provider)
    assert (found['name'], found['parent_provider_uuid']) == (
        upstream_name, compute)
    assert sorted(client.get_traits(provider)[1]) == [
        'CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_KEPT', 'OWNER_CYBORG']
    assert client.get_inventories(provider)[1]['FPGA'] == {
        'total': 3, 'reserved': 0, 'min_unit': 1, 'max_unit': 3,
        'step_size': 1, 'allocation_ratio': 1.0}
    assert list(client.provider_allocations(provider)) == [instance]
    arq = arq_db.arq_get(context, rows.arqs[upstream_name, 2], None)
    assert (arq['state'], arq['attach_handle_uuid'],
            arq['device_rp_uuid']) == (
        'Bound', rows.handles[upstream_name, 2], provider)

    # Nova deletes the instance: the ARQ, then the allocation.
    imported.release(engine, rows.arqs[upstream_name, 2])
    _deallocate(client, instance)
    sync = placement_sync.PlacementSync(client)
    assert sync.sync_host(context, name) is True
    assert set(_tree(client, compute)) == before
    assert client.get_provider(provider)['name'] == '%s_%s' % (name, OURS)
    # A new instance gets the provider, under its new name.
    _allocate(client, provider, str(uuid.uuid4()))


def test_retained_deployable_and_upstream_only_providers(engine, host):
    """Upstream's one-deployable-per-function model: the oldest provider
    is adopted (and reserves the unit still held), the free one goes, the
    bound one is kept unschedulable until released, and its provider is
    deleted only once its allocation is gone."""
    name, compute, client, wire = host
    context = cyborg_context.get_admin_context()
    names = ['%s_%s.%d' % (name, ADDRESS[:-2], function)
             for function in (1, 2, 3)]
    rows = imported.insert(engine, name, ADDRESS, [
        imported.Deployable(names[0], [1]),
        imported.Deployable(names[1], [2], in_use=[2]),
        imported.Deployable(names[2], [3])], profile='upstream-' + name)
    adopted, held, free = (_upstream_provider(client, compute, each, 1)
                           for each in names)
    instance = str(uuid.uuid4())
    _allocate(client, held, instance)

    # Complete for now: the held provider waits for its allocation.
    assert _apply_and_sync(context, name, client, wire) is True
    tree = _tree(client, compute)
    assert set(tree) == {adopted, held}           # nothing created
    inventories = client.get_inventories(adopted)[1]['FPGA']
    assert (inventories['total'], inventories['reserved']) == (3, 1)
    inventories = client.get_inventories(held)[1]['FPGA']
    assert (inventories['total'], inventories['reserved']) == (1, 1)
    # Placement offers exactly the two free units.
    candidates = client.request(
        'GET', '/allocation_candidates?resources=FPGA:1&in_tree=%s'
        % compute, microversion=ALLOCATION_VERSION).json()
    assert [list(request['allocations']) for request
            in candidates['allocation_requests']] == [[adopted]]
    assert candidates['provider_summaries'][adopted]['resources'][
        'FPGA'] == {'capacity': 2, 'used': 0}

    # Released in Cyborg first: the same report removes the deployable,
    # but the provider stays while Nova's allocation does.
    imported.release(engine, rows.arqs[names[1], 2])
    assert _apply_and_sync(context, name, client, wire) is False
    assert held in _tree(client, compute)
    assert client.get_inventories(adopted)[1]['FPGA']['reserved'] == 0
    _deallocate(client, instance)
    assert placement_sync.PlacementSync(client).sync_host(context, name)
    assert set(_tree(client, compute)) == {adopted}
    with engine.connect() as connection:
        deployables = connection.execute(sa.select(
            imported.DEPLOYABLES.c.uuid, imported.DEPLOYABLES.c.name).join(
            imported.DEVICES).where(
            imported.DEVICES.c.hostname == name)).all()
        handles = connection.execute(sa.select(sa.func.count()).select_from(
            imported.HANDLES.join(imported.DEPLOYABLES)).where(
            imported.DEPLOYABLES.c.uuid == rows.deployables[names[0]])
        ).scalar()
    assert deployables == [(rows.deployables[names[0]], OURS)]
    assert handles == 3


def test_allocated_upstream_resource_class_is_kept_until_free(engine, host):
    """Upstream's class is not ours (as for its PCI driver): Placement
    refuses to drop a class in use, so it stays, all reserved, beside
    ours until the instance is gone."""
    name, compute, client, wire = host
    context = cyborg_context.get_admin_context()
    upstream_name = name + '_0000:10:00.0'
    rows = imported.insert(engine, name, ADDRESS, [imported.Deployable(
        upstream_name, [1, 2, 3], in_use=[1],
        resource_class='CUSTOM_UPSTREAM_PCI')], profile='upstream-' + name)
    provider = imported.upstream_rp_uuid(upstream_name)
    client.ensure_resource_class('CUSTOM_UPSTREAM_PCI')
    generation = client.create_provider(provider, upstream_name,
                                        compute)['generation']
    client.set_inventories(provider, generation, {
        'CUSTOM_UPSTREAM_PCI': {'total': 3, 'max_unit': 3}})
    instance = str(uuid.uuid4())
    client.request('PUT', '/allocations/%s' % instance, json={
        'allocations': {provider: {'resources': {'CUSTOM_UPSTREAM_PCI': 1}}},
        'project_id': 'p1', 'user_id': 'u1', 'consumer_generation': None},
        microversion=ALLOCATION_VERSION)

    # Complete for now: upstream's class waits for its allocation.
    assert _apply_and_sync(context, name, client, wire) is True
    inventories = client.get_inventories(provider)[1]
    assert sorted(inventories) == ['CUSTOM_UPSTREAM_PCI', 'FPGA']
    assert inventories['CUSTOM_UPSTREAM_PCI']['reserved'] == 3
    assert inventories['FPGA']['reserved'] == 0
    assert list(client.provider_allocations(provider)) == [instance]

    imported.release(engine, rows.arqs[upstream_name, 1])
    _deallocate(client, instance)
    assert placement_sync.PlacementSync(client).sync_host(context, name)
    assert list(client.get_inventories(provider)[1]) == ['FPGA']
    assert set(_tree(client, compute)) == {provider}
