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

"""Device profile updates in the database: what changes, the groups of
ARQs that may still bind, and a disabled profile's ARQ creation."""

import json

import pytest

from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.db import binding
from cyborg.db import device_profiles as profiles_db
from cyborg.domain import arq_states
from tests import factories

GROUPS = [{'resources:PGPU': '1'}]
NEW_GROUPS = [{'resources:VGPU': '2'}]


@pytest.fixture
def profile(database):
    return factories.create_test_device_profile(name='one', groups=GROUPS,
                                                description='first')


def test_update_changes_only_what_it_names(profile, admin_context):
    assert profile['enabled'] is True and profile['updated_at'] is None
    before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'],
        {'description': 'second', 'enabled': False})
    assert before == profile
    assert (after['name'], after['groups']) == ('one', GROUPS)
    assert (after['description'], after['enabled']) == ('second', False)
    assert after['updated_at'] is not None
    assert profiles_db.device_profile_get(
        admin_context, uuid=profile['uuid']) == after


def test_an_update_that_changes_nothing_writes_nothing(profile,
                                                       admin_context):
    before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'],
        {'description': 'first', 'groups': GROUPS, 'enabled': True})
    assert before == after == profile


def test_missing_profile(database, admin_context):
    with pytest.raises(exception.DeviceProfileNotFound):
        profiles_db.device_profile_update(
            admin_context, '44444444-4444-4444-8444-444444444444',
            {'enabled': False})


@pytest.mark.parametrize('state', [arq_states.INITIAL,
                                   arq_states.BIND_STARTED,
                                   arq_states.BIND_FAILING,
                                   arq_states.UNBOUND])
def test_new_groups_wait_for_arqs_older_than_their_own_groups(
        profile, database, admin_context, state):
    with database.begin() as connection:
        factories.create_test_arq(connection, state=state,
                                  device_profile_id=profile['id'])
    with pytest.raises(exception.DeviceProfileGroupsInUse) as error:
        profiles_db.device_profile_update(admin_context, profile['uuid'],
                                          {'groups': NEW_GROUPS})
    assert error.value.code == 409
    assert 'one has 1 accelerator request' in str(error.value)
    assert profiles_db.device_profile_get(
        admin_context, uuid=profile['uuid'])['groups'] == GROUPS
    # What does not change the groups goes through.
    _before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'], {'enabled': False})
    assert after['enabled'] is False


@pytest.mark.parametrize('state', [arq_states.BOUND, arq_states.BIND_FAILED,
                                   arq_states.DELETING])
def test_new_groups_leave_bound_arqs_alone(profile, database,
                                           admin_context, state):
    with database.begin() as connection:
        factories.create_test_arq(connection, state=state,
                                  device_profile_id=profile['id'])
    _before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'], {'groups': NEW_GROUPS})
    assert after['groups'] == NEW_GROUPS


def test_a_disabled_profile_creates_no_arq(profile, admin_context):
    profiles_db.device_profile_update(admin_context, profile['uuid'],
                                      {'enabled': False})
    with pytest.raises(exception.DeviceProfileDisabled) as error:
        arq_db.arq_create(admin_context, 'one', 'p1')
    assert error.value.code == 409
    assert 'Device profile one is disabled' in str(error.value)
    assert arq_db.arq_list(admin_context, None) == []
    profiles_db.device_profile_update(admin_context, profile['uuid'],
                                      {'enabled': True})
    assert len(arq_db.arq_create(admin_context, 'one', 'p1')) == 1


def test_arqs_created_after_an_update_follow_the_new_groups(profile,
                                                            admin_context):
    profiles_db.device_profile_update(admin_context, profile['uuid'],
                                      {'groups': NEW_GROUPS})
    assert len(arq_db.arq_create(admin_context, 'one', 'p1')) == 2


def _bind_group(database, uuid):
    """The group a bind of ARQ ``uuid`` matches, read as the bind reads
    it."""
    with database.begin() as connection:
        (row,) = arq_db.lock(connection, [uuid], None, binding.BIND_COLUMNS)
    return binding._group(row)


def test_an_arq_keeps_the_group_it_was_created_from(
        profile, database, admin_context):
    (arq,) = arq_db.arq_create(admin_context, 'one', 'p1')
    _before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'], {'groups': NEW_GROUPS})
    assert after['groups'] == NEW_GROUPS
    # Its bind matches the group it was created from.
    assert _bind_group(database, arq['uuid']) == GROUPS[0]


@pytest.mark.parametrize('state', [arq_states.INITIAL,
                                   arq_states.BIND_STARTED,
                                   arq_states.BIND_FAILING,
                                   arq_states.UNBOUND])
def test_arqs_with_their_own_groups_let_the_groups_change(
        profile, database, admin_context, state):
    with database.begin() as connection:
        arq = factories.create_test_arq(
            connection, state=state, device_profile_id=profile['id'],
            group_json=json.dumps(GROUPS[0]))
    _before, after = profiles_db.device_profile_update(
        admin_context, profile['uuid'], {'groups': NEW_GROUPS})
    assert after['groups'] == NEW_GROUPS
    assert _bind_group(database, arq['uuid']) == GROUPS[0]
