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

"""The rules of the agent's restore at start
(:mod:`cyborg.domain.restore`)."""

import pytest

from cyborg.domain import arq_states as states
from cyborg.domain import remediation
from cyborg.domain import restore


def test_a_prepared_handle_goes_over_the_wire_and_back():
    handle = restore.PreparedHandle(
        uuid='h1', action=restore.Action.RESTORE, driver='d',
        device_address='0000:5e:00.0', attach_type='PCI',
        attach_info={'bus': '5e'}, preparation='program', arq_uuid='a1',
        controlpath={'cpid_type': 'PCI', 'cpid_info': {'bus': '5e'}},
        image={'id': 'i1'}, function_trait='CUSTOM_F')
    wire = handle.to_wire()
    assert wire['action'] == 'restore'
    assert restore.PreparedHandle.from_wire(wire) == handle


@pytest.mark.parametrize('wire', [
    {'uuid': 'h1'}, {'uuid': 'h1', 'action': 'restore', 'driver': None,
                     'device_address': 'x', 'attach_type': 'PCI',
                     'attach_info': {}, 'preparation': 'vf', 'extra': 1}])
def test_a_malformed_wire_entry_is_a_value_error(wire):
    with pytest.raises(ValueError, match='malformed prepared handle'):
        restore.PreparedHandle.from_wire(wire)


def test_an_unknown_action_is_a_value_error():
    with pytest.raises(ValueError):
        restore.PreparedHandle(uuid='h1', action='explode', driver=None,
                               device_address='x', attach_type='PCI',
                               attach_info={}, preparation='vf')


def test_the_outcome_in_wire_form_is_sorted():
    outcome = restore.Outcome(restored=['b', 'a'], failed={'d': 'x'},
                              released=['f', 'e'])
    assert outcome.to_wire() == {'restored': ['a', 'b'],
                                 'failed': {'d': 'x'},
                                 'released': ['e', 'f']}


@pytest.mark.parametrize('state,error,shown', [
    (states.BIND_FAILED, 'No free attach handle', 'No free attach handle'),
    (states.BIND_FAILING, 'boom', 'boom'),
    (states.BOUND, restore.failure_reason('h1', 'gone'),
     'Restoring attach handle h1 after its host restarted failed: gone'),
    # Any other error of a Bound ARQ is stale: never shown.
    (states.BOUND, 'No free attach handle', None),
    (states.BOUND, None, None),
    (states.INITIAL, restore.failure_reason('h1', 'gone'), None)])
def test_which_bind_error_an_arq_shows(state, error, shown):
    assert restore.shown_bind_error(state, error) == shown


def test_the_default_catalog_taints_a_failed_restore_until_a_restart():
    remedy = remediation.Catalog(remediation.DEFAULT_CATALOG).lookup(
        restore.RESTORE_FAILED)
    assert remedy.action == remediation.Action.TAINT
    assert remedy.effect == remediation.Effect.NO_SCHEDULE
    assert remedy.holds
    assert remedy.taint_key(restore.RESTORE_FAILED) == (
        'cyborg.restore.failed')
