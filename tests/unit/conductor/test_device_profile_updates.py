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

"""The conductor's device profile update: its answer and the
device_profile.update/enable/disable notifications."""

import pytest

from cyborg.conductor import manager as conductor_manager
from cyborg.notifications import notifier as notifier_mod
from tests import factories
from tests.unit.conductor.test_notifications import Recorder


@pytest.fixture
def sent():
    return Recorder()


@pytest.fixture
def conductor(sent):
    return conductor_manager.ConductorManager(
        'cond1', notifier=notifier_mod.Notifier(sent))


@pytest.fixture
def profile(database):
    return factories.create_test_device_profile(
        name='gpu', groups=[{'resources:PGPU': '1'}])


def test_one_notification_per_kind_of_change(conductor, sent, profile,
                                             admin_context):
    updated = conductor.device_profile_update(
        admin_context, profile['uuid'],
        {'description': 'new', 'enabled': False})
    assert isinstance(updated['updated_at'], str)  # crosses any transport
    events = sent.take()
    assert [event for event, _data in events] == [
        'device_profile.update', 'device_profile.disable']
    data = events[1][1]
    assert (data['uuid'], data['name'], data['enabled']) == (
        profile['uuid'], 'gpu', False)
    assert data['description'] == 'new'
    conductor.device_profile_update(admin_context, profile['uuid'],
                                    {'enabled': True})
    assert [event for event, _data in sent.take()] == [
        'device_profile.enable']
    conductor.device_profile_update(
        admin_context, profile['uuid'],
        {'groups': [{'resources:VGPU': '1'}]})
    [(event, data)] = sent.take()
    assert event == 'device_profile.update'
    assert data['groups'] == [{'resources:VGPU': '1'}]


def test_no_change_no_notification(conductor, sent, profile,
                                   admin_context):
    conductor.device_profile_update(admin_context, profile['uuid'],
                                    {'enabled': True})
    assert sent.take() == []
