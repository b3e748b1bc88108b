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

"""The ARQs a bind, an unbind or a deletion describes for its
notifications, read in its own transaction; on each database."""

import pytest

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.domain import arq_states
from cyborg.domain import device_tree
from tests.unit.db import statements as sql_statements

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'


@pytest.fixture
def rp(database, admin_context, conf):
    """One fake device with PCI handles on host1 and a profile of one
    accelerator: the device's rp uuid."""
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    return hardware.deployable_list(admin_context)[0]['rp_uuid']


def _bind(context, rp, uuids, describe):
    return binding_db.bind(context, {uuid: {
        'hostname': 'host1', 'device_rp_uuid': rp,
        'instance_uuid': INSTANCE} for uuid in uuids}, None, 'cond1',
        describe=describe)


def _create(context, count):
    return [arq_db.arq_create(context, 'one', 'p1')[0]['uuid']
            for _ in range(count)]


def test_a_bind_describes_what_it_bound_as_a_read_would(rp, admin_context):
    uuids = _create(admin_context, 2)
    outcome = _bind(admin_context, rp, uuids, describe=True)
    assert sorted(arq['uuid'] for arq in outcome.described) == sorted(uuids)
    assert outcome.described == arq_db.arq_list(admin_context, None,
                                                uuids=uuids)
    assert {arq['state'] for arq in outcome.described} == {
        arq_states.BOUND}
    assert all(arq['attach_handle_uuid'] for arq in outcome.described)


def test_a_bind_describes_nothing_unless_asked(rp, admin_context, database):
    uuids = _create(admin_context, 1)
    with sql_statements.StatementCounter(database) as plain:
        assert _bind(admin_context, rp, uuids, False).described == []
    more = _create(admin_context, 1)
    with sql_statements.StatementCounter(database) as described:
        _bind(admin_context, rp, more, True)
    # One statement more, in the same transaction.
    assert described.count == plain.count + 1


def test_an_unbind_describes_the_arqs_it_changes_as_they_were(
        rp, admin_context):
    bound = _create(admin_context, 1)
    _bind(admin_context, rp, bound, describe=False)
    before = arq_db.arq_list(admin_context, None, uuids=bound)
    initial = _create(admin_context, 1)
    described = ['stale']
    arq_db.arq_unbind(admin_context, bound + initial, None, described)
    # The Initial one is left as it is: not described.
    assert described == before
    assert arq_db.arq_get(admin_context, bound[0], None)['state'] == (
        arq_states.UNBOUND)


@pytest.mark.parametrize('by_instance', [False, True])
def test_a_deletion_describes_the_arqs_it_deletes_as_they_were(
        rp, admin_context, by_instance):
    uuids = _create(admin_context, 2)
    _bind(admin_context, rp, uuids, describe=False)
    before = arq_db.arq_list(admin_context, None, uuids=uuids)
    described: list = []
    if by_instance:
        arq_db.arq_delete(admin_context, None, INSTANCE, None, described)
    else:
        arq_db.arq_delete(admin_context, uuids, None, None, described)
    assert described == before
    assert arq_db.arq_list(admin_context, None, uuids=uuids) == []


def test_nothing_to_delete_describes_nothing(rp, admin_context):
    described = ['stale']
    arq_db.arq_delete(admin_context, None, INSTANCE, None, described)
    assert described == []
