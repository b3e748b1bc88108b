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

"""Every transition of the ARQ state table, allowed and refused: at the
level of :mod:`cyborg.domain.arq_states`, and through the database
functions that drive each one, on each database.

The expected transitions are written out here, not read from the
table, so that a change to the table fails a test.
"""

import datetime
import itertools

import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import models
from cyborg.domain import arq_states as states
from tests.unit.conductor import test_binding

INSTANCE = test_binding.INSTANCE
OTHER_INSTANCE = test_binding.OTHER_INSTANCE

(INITIAL, BIND_STARTED, BOUND, BIND_FAILING, BIND_FAILED, UNBOUND,
 DELETING) = (
    'Initial', 'BindStarted', 'Bound', 'BindFailing', 'BindFailed',
    'Unbound', 'Deleting')
ALL = (INITIAL, BIND_STARTED, BOUND, BIND_FAILING, BIND_FAILED, UNBOUND,
       DELETING)

# (from, to) pairs the state machine allows; every other pair is refused.
ALLOWED = {
    (INITIAL, BIND_STARTED), (UNBOUND, BIND_STARTED),
    (BIND_STARTED, BOUND),
    (BIND_STARTED, BIND_FAILING),
    (BIND_STARTED, BIND_FAILED), (BIND_FAILING, BIND_FAILED),
    *((source, UNBOUND) for source in ALL if source != DELETING),
    *((source, DELETING) for source in ALL if source != DELETING),
}


def test_the_states_are_these():
    assert states.ALL == ALL
    assert set(states.TRANSITIONS) | {INITIAL} == set(ALL)


@pytest.mark.parametrize('source,target', list(itertools.product(ALL, ALL)))
def test_every_transition_of_the_table(source, target):
    expected = (source, target) in ALLOWED
    assert states.allowed(source, target) is expected
    assert (source in states.sources(target)) is expected
    row = type('Row', (), {'state': source, 'uuid': 'u'})()
    if expected:
        arq_db.check_transition(row, target)
    else:
        with pytest.raises(exception.ARQBadState) as error:
            arq_db.check_transition(row, target)
        assert error.value.code == 409


def test_nothing_enters_initial():
    assert not any(states.allowed(source, INITIAL) for source in ALL)


# Through the functions that drive each transition -----------------------

@pytest.fixture
def hosts(database, admin_context, conf):
    """host1: one device of 4 PCI handles; host2: one of 4 MDEV handles
    (bound by a job). Their rp uuids."""
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    pci = test_binding._report(admin_context, conf, 'host1', 'PCI')
    mdev = test_binding._report(admin_context, conf, 'host2', 'MDEV')
    return pci, mdev


def _bind(context, uuid, rp, host, instance=INSTANCE):
    return binding_db.bind(context, {uuid: {
        'hostname': host, 'device_rp_uuid': rp, 'instance_uuid': instance}},
        None, 'cond1')


def _set_state(engine, uuid, state):
    """A state no flow persists (Deleting: only inside a delete's
    transaction) is written as is."""
    with engine.begin() as connection:
        connection.execute(sa.update(models.ExtendedAcceleratorRequest
                                     .__table__)
                           .where(models.ExtendedAcceleratorRequest.uuid
                                  == uuid).values(state=state))


def _arq_in(state, context, engine, hosts):
    """A new ARQ brought to ``state`` by the flows that lead there."""
    pci, mdev = hosts
    uuid = arq_db.arq_create(context, 'one', 'p1')[0]['uuid']
    if state in (BIND_STARTED, BIND_FAILING, BIND_FAILED):
        assert _bind(context, uuid, mdev, 'host2').jobs == [uuid]
        if state == BIND_FAILING:
            binding_db.finish(context, uuid, 'no mdev', bind_timeout=600)
        elif state == BIND_FAILED:
            binding_db.finish(context, uuid, 'no mdev')
    elif state in (BOUND, UNBOUND):
        _bind(context, uuid, pci, 'host1')
        if state == UNBOUND:
            arq_db.arq_unbind(context, [uuid], None)
    if state == DELETING:
        _set_state(engine, uuid, state)
    assert _state(context, uuid) == state
    return uuid


def _state(context, uuid):
    try:
        return arq_db.arq_get(context, uuid, None)['state']
    except exception.ARQNotFound:
        return None


def _snapshot(context, engine, uuid):
    """What a refused or ignored operation must leave as it was."""
    with engine.connect() as connection:
        handles = connection.execute(sa.select(
            models.AttachHandle.id, models.AttachHandle.in_use).order_by(
                models.AttachHandle.id)).all()
        events = connection.execute(sa.select(sa.func.count()).select_from(
            models.NovaEvent.__table__)).scalar()
    return arq_db.arq_get(context, uuid, None), handles, events


FAR = datetime.datetime(2999, 1, 1)

# What each operation does to an ARQ in each state: the state it ends in
# (None: deleted), 'refused' (ARQBadState, nothing changed) or 'ignored'
# (nothing changed, no error).
OPERATIONS = {
    # Binding again elsewhere (another instance): BindStarted, then Bound
    # at once (a PCI handle needs no preparation).
    'bind': lambda context, uuid, hosts: _bind(
        context, uuid, hosts[0], 'host1', OTHER_INSTANCE),
    'unbind': lambda context, uuid, hosts: arq_db.arq_unbind(
        context, [uuid], None),
    'delete': lambda context, uuid, hosts: arq_db.arq_delete(
        context, [uuid], None, None),
    'job done': lambda context, uuid, hosts: binding_db.finish(context, uuid),
    'job failed': lambda context, uuid, hosts: binding_db.finish(
        context, uuid, 'no mdev', bind_timeout=600),
    'job timed out': lambda context, uuid, hosts: binding_db.finish(
        context, uuid, 'timed out'),
    'failure ends': lambda context, uuid, hosts: binding_db.end_failures(
        context, FAR),
    'abandoned': lambda context, uuid, hosts: arq_db.delete_abandoned(
        context, FAR),
}

EXPECTED = {
    INITIAL: {'bind': BOUND, 'unbind': 'ignored', 'delete': None,
              'job done': 'ignored', 'job failed': 'ignored',
              'job timed out': 'ignored', 'failure ends': 'ignored',
              'abandoned': None},
    BIND_STARTED: {'bind': 'refused', 'unbind': UNBOUND, 'delete': None,
                   'job done': BOUND, 'job failed': BIND_FAILING,
                   'job timed out': BIND_FAILED, 'failure ends': 'ignored',
                   'abandoned': 'ignored'},
    BOUND: {'bind': 'refused', 'unbind': UNBOUND, 'delete': None,
            'job done': 'ignored', 'job failed': 'ignored',
            'job timed out': 'ignored', 'failure ends': 'ignored',
            'abandoned': 'ignored'},
    BIND_FAILING: {'bind': 'refused', 'unbind': UNBOUND, 'delete': None,
                   'job done': 'ignored', 'job failed': 'ignored',
                   'job timed out': 'ignored', 'failure ends': BIND_FAILED,
                   'abandoned': 'ignored'},
    BIND_FAILED: {'bind': 'refused', 'unbind': UNBOUND, 'delete': None,
                  'job done': 'ignored', 'job failed': 'ignored',
                  'job timed out': 'ignored', 'failure ends': 'ignored',
                  'abandoned': 'ignored'},
    UNBOUND: {'bind': BOUND, 'unbind': 'ignored', 'delete': None,
              'job done': 'ignored', 'job failed': 'ignored',
              'job timed out': 'ignored', 'failure ends': 'ignored',
              'abandoned': 'ignored'},
    # Deleting is never committed; a delete finishes one, and nothing
    # else may move it.
    DELETING: {'bind': 'refused', 'unbind': 'refused', 'delete': None,
               'job done': 'ignored', 'job failed': 'ignored',
               'job timed out': 'ignored', 'failure ends': 'ignored',
               'abandoned': 'ignored'},
}


@pytest.mark.parametrize('source', ALL)
def test_every_operation_from_every_state(source, hosts, admin_context,
                                          database):
    """Each operation on a new ARQ in ``source``: the outcome the table
    allows, and a refusal or no-op changing nothing otherwise."""
    outcomes = {}
    for name, operation in OPERATIONS.items():
        uuid = _arq_in(source, admin_context, database, hosts)
        before = _snapshot(admin_context, database, uuid)
        try:
            operation(admin_context, uuid, hosts)
        except exception.ARQBadState as error:
            assert error.code == 409
            outcomes[name] = 'refused'
        else:
            after = _state(admin_context, uuid)
            outcomes[name] = (
                'ignored' if after is not None
                and _snapshot(admin_context, database, uuid) == before
                else after)
        if outcomes[name] in ('refused', 'ignored'):
            assert _snapshot(admin_context, database, uuid) == before, name
        if _state(admin_context, uuid) is not None:
            # Leave the handles free for the next operation.
            if _state(admin_context, uuid) == DELETING:
                _set_state(database, uuid, INITIAL)
            arq_db.arq_delete(admin_context, [uuid], None, None)
            _free_prepared(admin_context, database)
    assert outcomes == EXPECTED[source]


def _free_prepared(context, engine):
    with engine.connect() as connection:
        ids = [row.id for row in connection.execute(sa.select(
            models.AttachHandle.id).where(
                models.AttachHandle.in_use == sa.true()))]
    arq_db.free_prepared(context, ids)
