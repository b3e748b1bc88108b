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

"""``cyborg-manage audit allocations`` against a real Placement: it
finds exactly the orphans planted (an allocation of this service's
provider without an ARQ, an ARQ whose instance Placement does not know)
and nothing else, changes nothing, and says so in its exit status."""

import uuid

import sqlalchemy as sa

from cyborg.db import migration
from tests import factories
from tests.functional import servers
from tests.functional.conftest import placement_config

HOST = 'audit-host'
COMPUTE = str(uuid.uuid4())
MINE = [str(uuid.uuid4()) for _ in range(2)]
NOT_SYNCED = str(uuid.uuid4())
FOREIGN = str(uuid.uuid4())
ADDRESSES = ['0000:a1:00.0', '0000:a2:00.0', '0000:a3:00.0']
PROJECT, USER = 'audit-project', 'audit-user'


def _consumer() -> str:
    return str(uuid.uuid4())


def _allocate(client, consumer: str, allocations: dict) -> None:
    client.request('PUT', '/allocations/' + consumer, json={
        'allocations': {rp: {'resources': resources}
                        for rp, resources in allocations.items()},
        'project_id': PROJECT, 'user_id': USER})


def _providers(client) -> None:
    client.create_provider(COMPUTE, 'audit-compute-' + COMPUTE[:8])
    client.set_inventories(COMPUTE, 0, {'VCPU': {'total': 8}})
    for index, rp in enumerate(MINE + [FOREIGN]):
        created = client.create_provider(rp, 'audit-%d-%s' % (index, rp[:8]),
                                         parent_uuid=COMPUTE)
        client.set_inventories(rp, created['generation'],
                               {'FPGA': {'total': 4}})


def _database(engine, arqs: list[dict]) -> None:
    with engine.begin() as connection:
        for rp, address in zip(MINE + [NOT_SYNCED], ADDRESSES, strict=True):
            device = factories.create_test_device(connection, hostname=HOST,
                                                  address=address)
            factories.create_test_deployable(connection, rp_uuid=rp,
                                             device_id=device['id'])
        profile = factories.create_test_device_profile(engine=connection)
        for arq in arqs:
            factories.create_test_arq(connection,
                                      device_profile_id=profile['id'],
                                      hostname=HOST, **arq)


def test_finds_exactly_the_planted_orphans(placement, tmp_path):
    client = placement.client()
    _providers(client)
    held, orphan, foreign_only, compute_only, gone = (
        _consumer() for _ in range(5))
    _allocate(client, held, {COMPUTE: {'VCPU': 1}, MINE[0]: {'FPGA': 1}})
    _allocate(client, orphan, {COMPUTE: {'VCPU': 1}, MINE[1]: {'FPGA': 2}})
    _allocate(client, foreign_only, {FOREIGN: {'FPGA': 1}})
    _allocate(client, compute_only, {COMPUTE: {'VCPU': 1}})
    arqs = [
        # Held by its instance's allocation: fine.
        dict(uuid='aaaaaaaa-0000-4000-8000-000000000001', state='Bound',
             instance_uuid=held, device_rp_uuid=MINE[0]),
        # Its instance holds only a compute node's resources: Placement
        # knows the consumer.
        dict(uuid='aaaaaaaa-0000-4000-8000-000000000002', state='Bound',
             instance_uuid=compute_only, device_rp_uuid=MINE[0]),
        # Its instance is unknown to Placement.
        dict(uuid='aaaaaaaa-0000-4000-8000-000000000003', state='Bound',
             instance_uuid=gone, device_rp_uuid=MINE[1]),
        # Not bound to any instance yet.
        dict(uuid='aaaaaaaa-0000-4000-8000-000000000004', state='Initial'),
    ]
    url = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    engine = sa.create_engine(url)
    migration.upgrade(engine=engine)
    _database(engine, arqs)
    engine.dispose()
    before = {rp: client.provider_allocations(rp) for rp in MINE}
    config = servers.write_config(str(tmp_path / 'cyborg.conf'), {
        'database': {'connection': url},
        'placement': placement_config(placement.url)})

    result = servers.run_script('cyborg-manage', 'audit', 'allocations',
                                config_file=config)

    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines() == [
        'Allocation without an ARQ: consumer %s holds FPGA=2 of provider '
        '%s (host %s, device %s)' % (orphan, MINE[1], HOST, ADDRESSES[1]),
        'ARQ without a consumer: ARQ aaaaaaaa-0000-4000-8000-000000000003 '
        '(Bound) holds instance %s on host %s, which has no allocation in '
        'Placement' % (gone, HOST),
        '1 allocation(s) without an ARQ, 1 ARQ(s) without a consumer (2 '
        'provider(s), 3 ARQ(s) holding an instance checked).']
    # Reads only.
    assert {rp: client.provider_allocations(rp) for rp in MINE} == before
    # The orphans gone, nothing is found.
    client.request('DELETE', '/allocations/' + orphan)
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text(
            "DELETE FROM extended_accelerator_requests WHERE uuid = "
            "'aaaaaaaa-0000-4000-8000-000000000003'"))
    engine.dispose()
    clean = servers.run_script('cyborg-manage', 'audit', 'allocations',
                               config_file=config)
    assert (clean.returncode, clean.stdout) == (0, (
        '0 allocation(s) without an ARQ, 0 ARQ(s) without a consumer (2 '
        'provider(s), 2 ARQ(s) holding an instance checked).\n')), (
        clean.stderr)


def test_without_placement_one_line_and_status_1(tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    engine = sa.create_engine(url)
    migration.upgrade(engine=engine)
    engine.dispose()
    config = servers.write_config(str(tmp_path / 'cyborg.conf'),
                                  {'database': {'connection': url}})
    result = servers.run_script('cyborg-manage', 'audit', 'allocations',
                                config_file=config)
    assert (result.returncode, result.stdout) == (1, '')
    assert result.stderr.splitlines() == [
        'cyborg-manage: [placement] is not configured (no auth_type): '
        'cannot read the allocations.']
