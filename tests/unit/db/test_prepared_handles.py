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

"""A host's prepared handles for its agent's restore at start, and what
the agent reports back (conductor RPC ``prepared_handles`` and
``handles_restored``; :mod:`cyborg.db.prepared_handles`,
:mod:`cyborg.conductor.restore`)."""

import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import programming
from cyborg.conductor import restore as conductor_restore
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import prepared_handles as handles_db
from cyborg.db import programming as programming_db
from cyborg.db.models import HANDLES
from cyborg.domain import bitstream as bitstream_rules
from cyborg.domain import device_tree
from cyborg.domain import providers
from cyborg.domain import restore

INSTANCE = '7d3c2b1a-0000-4000-8000-000000000001'
GPU = '0000:d8:00.0'
FPGA = '0000:5e:00.0'
TRAIT = bitstream_rules.function_trait(
    'INTEL', 'd8424dc4a4a3c413f89e433683f9040b')


def _info(address: str, **extra) -> dict[str, str]:
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return dict(domain=domain, bus=bus, device=device, function=function,
                **extra)


def _cpid(address: str) -> device_tree.ControlPathID:
    return device_tree.ControlPathID('PCI', _info(address))


def _tree() -> list[dict]:
    """A vGPU deployable with two mdev handles, an FPGA region
    (``program``) and a passthrough GPU (no preparation)."""
    vgpu = device_tree.Device('GPU', 'nvidia', 't4', GPU, [_cpid(GPU)], [
        device_tree.Deployable(
            'vgpu', 2, 'VGPU', preparation=device_tree.Preparation.MDEV,
            attach_handles=[device_tree.AttachHandle(
                'MDEV', _info(GPU, asked_type='nvidia-223',
                              vgpu_mark='m%d' % i)) for i in range(2)])])
    fpga = device_tree.Device(
        'FPGA', 'intel', 'n6000', FPGA,
        [_cpid(FPGA)], [
            device_tree.Deployable(
                'region', 1, 'FPGA',
                preparation=device_tree.Preparation.PROGRAM,
                attach_handles=[device_tree.AttachHandle('PCI',
                                                         _info(FPGA))])])
    passthrough = device_tree.Deployable('pgpu', 1, 'PGPU', attach_handles=[
        device_tree.AttachHandle('PCI', _info('0000:3b:00.0'))])
    pgpu = device_tree.Device('GPU', 'nvidia', 't4', '0000:3b:00.0',
                              [_cpid('0000:3b:00.0')], [passthrough])
    for device in (vgpu, fpga, pgpu):
        device.driver = 'drv'
    return device_tree.tree_to_wire([vgpu, fpga, pgpu])


def _bound(context, host: str, address: str, deployable: str,
           resource: str) -> dict:
    """An ARQ bound (its job finished) on ``deployable``."""
    name = 'p-%s-%s' % (host, deployable)
    profiles_db.device_profile_create(context, {
        'name': name, 'groups': [{'resources:%s' % resource: '1'}]})
    arq = arq_db.arq_create(context, name, 'p1')[0]
    rp_uuid = providers.provider_uuid(host, address, deployable)
    binding_db.bind(context, {arq['uuid']: {
        'hostname': host, 'instance_uuid': INSTANCE,
        'device_rp_uuid': rp_uuid}}, None, 'c1')
    binding_db.finish(context, arq['uuid'])
    return arq_db.arq_get(context, arq['uuid'], None)


@pytest.fixture
def host(database, admin_context):
    wire = _tree()
    for name in ('host1', 'host2'):
        inventory.apply_report(admin_context, name, name, wire,
                               device_tree.tree_digest(wire), [])
    return admin_context


def test_every_prepared_handle_of_the_host_with_its_action(host):
    context = host
    assert {h.action for h in handles_db.host_handles(context, 'host1')} == {
        restore.Action.REMOVE}
    arq = _bound(context, 'host1', GPU, 'vgpu', 'VGPU')
    found = handles_db.host_handles(context, 'host1')
    # The passthrough GPU's handle needs no preparation: not listed.
    assert sorted((h.preparation, h.action) for h in found) == [
        ('mdev', 'remove'), ('mdev', 'restore'), ('program', 'remove')]
    (held,) = [h for h in found if h.action == restore.Action.RESTORE]
    assert held.uuid == arq['attach_handle_uuid']
    assert (held.arq_uuid, held.arq_state) == (arq['uuid'], 'Bound')
    assert (held.driver, held.device_address) == ('drv', GPU)
    assert held.attach_info['asked_type'] == 'nvidia-223'
    # The other host's are its own.
    assert {h.action for h in handles_db.host_handles(context, 'host2')} == {
        restore.Action.REMOVE}
    # What the agent is sent (RPC 1.9).
    wire = conductor_manager.ConductorManager('c1').prepared_handles(
        context, 'host1')
    assert sorted((h['uuid'], h['action'], h['arq_uuid']) for h in wire
                  if h['action'] == 'restore') == [
        (held.uuid, 'restore', arq['uuid'])]
    assert all(h['arq_uuid'] is None for h in wire
               if h['action'] == 'remove')


def test_a_programmed_region_without_a_bitstream_source_says_why(host):
    context = host
    _programmed(context)
    wire = conductor_manager.ConductorManager('c1').prepared_handles(
        context, 'host1')
    (region,) = [h for h in wire if h['preparation'] == 'program']
    assert region['image'] is None
    assert region['image_error'].startswith('bitstream img-1: ')


class _Resolver:
    def __init__(self, fail=None):
        self.fail = fail

    def image(self, context, image_uuid, target):
        if self.fail:
            raise self.fail
        # The metadata is not read: None stands for it.
        return programming.Bitstream(image_uuid, 'sha512', 'ab', 4,
                                     None)  # type: ignore[arg-type]


def _programmed(context) -> dict:
    """An ARQ bound on host1's region, which holds image img-1."""
    arq = _bound(context, 'host1', FPGA, 'region', 'FPGA')
    (handle,) = [h for h in handles_db.host_handles(context, 'host1')
                 if h.preparation == 'program']
    programming_db.record(context, handle.deployable_id, 'img-1', TRAIT)
    return arq


def test_a_programmed_region_comes_with_its_image(host):
    context = host
    arq = _programmed(context)
    (region,) = [h for h in conductor_restore.prepared_handles(
        context, 'host1', _Resolver()) if h['preparation'] == 'program']
    assert region['arq_uuid'] == arq['uuid']
    assert region['action'] == 'restore'
    assert region['function_trait'] == TRAIT
    assert region['image'] == {'id': 'img-1', 'os_hash_algo': 'sha512',
                               'os_hash_value': 'ab', 'size': 4}
    assert region['controlpath'] == {'cpid_type': 'PCI',
                                     'cpid_info': _info(FPGA)}
    assert restore.PreparedHandle.from_wire(region).image_error is None


def test_a_region_whose_image_is_gone_comes_with_the_reason(host):
    context = host
    _programmed(context)
    (region,) = [h for h in conductor_restore.prepared_handles(
        context, 'host1', _Resolver(exception.BitstreamNotFound(
            image='img-1'))) if h['preparation'] == 'program']
    assert region['image'] is None and region['function_trait'] == TRAIT
    assert region['image_error'].startswith('bitstream img-1: ')


def test_the_outcome_is_written_on_the_arqs(host):
    context = host
    arq = _bound(context, 'host1', GPU, 'vgpu', 'VGPU')
    handle = arq['attach_handle_uuid']
    manager = conductor_manager.ConductorManager('c1')
    manager.handles_restored(context, 'host1', {
        'restored': [], 'failed': {handle: 'no instance left'},
        'released': []})
    failed = arq_db.arq_get(context, arq['uuid'], None)
    assert failed['state'] == 'Bound'
    assert failed['bind_error'] == (
        'Restoring attach handle %s after its host restarted failed: no '
        'instance left' % handle)
    # Another host's agent cannot touch it.
    manager.handles_restored(context, 'host2', {'restored': [handle]})
    assert arq_db.arq_get(context, arq['uuid'], None)['bind_error']
    # Restored at a later start: the error goes.
    manager.handles_restored(context, 'host1', {'restored': [handle]})
    assert arq_db.arq_get(context, arq['uuid'], None)['bind_error'] is None


def test_a_released_handle_no_arq_holds_is_freed(host):
    context = host
    arq = _bound(context, 'host1', GPU, 'vgpu', 'VGPU')
    held = arq['attach_handle_uuid']
    # Deleted: its prepared handle stays in use until released.
    arq_db.arq_delete(context, [arq['uuid']], None, None)
    in_use = [h.uuid for h in handles_db.host_handles(context, 'host1')]
    assert held in in_use
    # Another host's agent cannot free it.
    conductor_restore.record(context, 'host2', {'released': [held]})
    assert _in_use(context, held) is True
    conductor_restore.record(context, 'host1', {'released': [held]})
    rows = handles_db.host_handles(context, 'host1')
    assert all(h.arq_uuid is None for h in rows)
    assert _in_use(context, held) is False


def test_a_handle_an_arq_holds_is_never_freed(host):
    context = host
    arq = _bound(context, 'host1', GPU, 'vgpu', 'VGPU')
    handle = arq['attach_handle_uuid']
    conductor_restore.record(context, 'host1', {'released': [handle]})
    assert _in_use(context, handle) is True


@db_api.connection_reader
def _in_use(context, handle_uuid: str) -> bool:
    return bool(context.connection.execute(
        sa.select(HANDLES.c.in_use).where(
            HANDLES.c.uuid == handle_uuid)).scalar())


@pytest.mark.parametrize('outcome', [
    {'failed': ['not', 'a', 'dict']}, {'restored': 5}])
def test_a_malformed_outcome_is_refused(host, outcome):
    with pytest.raises(exception.Invalid):
        conductor_restore.record(host, 'host1', outcome)
