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

"""Nova's side of the accelerator flow, played by Nova's own client module.

Nova's ``nova.accelerator.cyborg`` (installed ``nova`` package) runs in a
child interpreter (tests/compat/nova_arq_probe.py) configured like a
nova-compute with service tokens; the requests it sends carry
``X-Auth-Token`` and ``X-Service-Token``, unmodified, which the noauth
API counts as a service token. The
deployment is nova_flow.py's: two conductors, the API, one agent with two
devices of two PCI handles each, real Placement, and a FakeNova that
receives the ``accelerator-request-bound`` events.
"""

import uuid

import pytest

from tests.compat.nova_arq_probe import NovaError
from tests.compat.nova_arq_probe import Probe
from tests.functional import nova_flow

HOST = 'nova-flow-compute-1'
HANDLES_PER_DEVICE = 2
PCI_KEYS = {'domain', 'bus', 'device', 'function'}


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir):
    with nova_flow.deployment(
            'nova-flow', postgres, rabbitmq, placement, work_dir,
            [nova_flow.AgentSpec(HOST, devices=2,
                                 handles=HANDLES_PER_DEVICE)]) as deployment:
        yield deployment


@pytest.fixture(scope='module')
def nova(flow):
    with Probe(flow.url) as probe:
        yield probe


@pytest.fixture
def groups(flow):
    return [{'resources:FPGA': '1', 'trait:' + flow.trait: 'required'},
            {'resources:FPGA': '1', 'trait:' + flow.trait: 'required'}]


@pytest.fixture
def profile(flow, groups):
    return flow.create_profile(groups)


def _events_for(flow, tags):
    return [e for e in flow.nova.events if e['tag'] in tags]


def _wait_events(flow, tags, timeout=30):
    nova_flow.wait_until(lambda: {e['tag'] for e in _events_for(flow, tags)}
                         >= set(tags), timeout,
                         'an event for each of %d ARQs' % len(tags))


def _bindings(arqs, instance):
    return {arq['uuid']: {'hostname': HOST,
                          'device_rp_uuid': arq['device_rp_uuid'],
                          'instance_uuid': instance} for arq in arqs}


def _candidate(flow, groups, same_rp=None):
    """Nova's rg_rp_map from one allocation candidate; ``same_rp``: one
    whose groups all map to that provider."""
    for mapping in flow.allocation_candidates(groups):
        rps = {rp for rps in mapping.values() for rp in rps}
        if same_rp is None or rps == {same_rp}:
            return mapping
    raise AssertionError('no allocation candidate on %s' % same_rp)


def _spawn(flow, nova, profile, groups, rp=None):
    """What Nova does up to spawn: create, match, bind; wait for the
    events; the instance uuid and its resolved ARQs."""
    instance = str(uuid.uuid4())
    rg_rp_map = _candidate(flow, groups, rp)
    arqs = nova('create_and_match', dp_name=profile, rg_rp_map=rg_rp_map)
    assert nova('bind', bindings=_bindings(arqs, instance)) is None
    tags = [arq['uuid'] for arq in arqs]
    _wait_events(flow, tags)
    return instance, arqs


def _in_use(flow):
    return flow.db_rows('SELECT count(*) FROM attach_handles '
                        'WHERE in_use')[0][0]


def test_request_groups(flow, nova, profile):
    groups = nova('request_groups', dp_name=profile)
    assert groups == [
        {'requester_id': 'device_profile_%d' % i, 'resources': {'FPGA': 1},
         'required_traits': [flow.trait], 'forbidden_traits': []}
        for i in range(2)]


def test_nova_sends_service_token_headers(nova):
    # No X-Service-Roles: noauth counts the service token itself.
    assert nova('headers') == {'X-Auth-Token': '<set>',
                               'X-Service-Token': '<set>'}


def test_create_match_bind_events_and_resolved_arqs(flow, nova, profile,
                                                    groups):
    instance = str(uuid.uuid4())
    rg_rp_map = _candidate(flow, groups)
    arqs = nova('create_and_match', dp_name=profile, rg_rp_map=rg_rp_map)
    assert len(arqs) == 2
    assert sorted(a['device_profile_group_id'] for a in arqs) == [0, 1]
    for arq in arqs:
        assert arq['state'] == 'Initial'
        assert arq['device_rp_uuid'] == rg_rp_map[
            'device_profile_%d' % arq['device_profile_group_id']][0]
    nova('bind', bindings=_bindings(arqs, instance))
    tags = {arq['uuid'] for arq in arqs}
    _wait_events(flow, tags)
    events = _events_for(flow, tags)
    assert len(events) == 2, events
    for event in events:
        assert event['name'] == 'accelerator-request-bound'
        assert event['status'] == 'completed'
        assert event['server_uuid'] == instance
        assert event['code'] == 200
    # The compute manager, once the events are in.
    resolved = nova('get_for_instance', instance_uuid=instance,
                    only_resolved=True)
    assert {a['uuid'] for a in resolved} == tags
    handles = set()
    for arq in resolved:
        assert arq['state'] == 'Bound'
        assert arq['hostname'] == HOST
        assert arq['instance_uuid'] == instance
        assert arq['attach_handle_type'] == 'PCI'
        info = arq['attach_handle_info']
        assert set(info) == PCI_KEYS, info
        assert len(info['domain']) == 4 and len(info['bus']) == 2
        handles.add((info['domain'], info['bus'], info['device'],
                     info['function']))
    assert len(handles) == 2
    one = nova('get_by_uuid', arq_uuid=arqs[0]['uuid'])
    assert one['state'] == 'Bound' and one['uuid'] == arqs[0]['uuid']
    assert _in_use(flow) == 2

    # Instance deleted: by instance, with the service token.
    assert nova('delete_for_instance', instance_uuid=instance) is None
    assert flow.arqs(instance=instance) == []
    with pytest.raises(NovaError, match='returned no accelerator requests'):
        nova('get_for_instance', instance_uuid=instance)
    assert _in_use(flow) == 0
    # Idempotent, as Nova expects.
    assert nova('delete_for_instance', instance_uuid=instance) is None
    assert len(_events_for(flow, tags)) == 2


def test_handles_released_and_reused(flow, nova, profile, groups):
    """Fill every handle, fail one more bind, delete by uuid, bind
    again: deleted ARQs give their handles back."""
    rps = [d.rp_uuid for d in flow.devices[HOST]]
    instances = []
    for rp in rps:  # each device's two handles
        instance, arqs = _spawn(flow, nova, profile, groups, rp)
        resolved = nova('get_for_instance', instance_uuid=instance,
                        only_resolved=True)
        assert {a['state'] for a in resolved} == {'Bound'}, resolved
        instances.append((instance, arqs))
    assert _in_use(flow) == 2 * HANDLES_PER_DEVICE

    # No free handle left: the bind PATCH is refused (409), so Nova's
    # conductor fails the build before any compute host is involved;
    # nothing changed, no event.
    full = str(uuid.uuid4())
    arqs = nova('create_and_match', dp_name=profile,
                rg_rp_map=_candidate(flow, groups, rps[0]))
    with pytest.raises(NovaError, match='409') as error:
        nova('bind', bindings=_bindings(arqs, full))
    assert error.value.type.endswith('AcceleratorRequestBindingFailed')
    tags = {a['uuid'] for a in arqs}
    assert {a['state'] for a in flow.arqs()
            if a['uuid'] in tags} == {'Initial'}
    assert _events_for(flow, tags) == []
    assert _in_use(flow) == 2 * HANDLES_PER_DEVICE
    # Nova cleans up a failed bind by uuid.
    nova('delete_by_uuid', arq_uuids=sorted(tags))
    assert flow.arqs(instance=full) == []

    # Delete the first instance's ARQs by uuid (Nova's cleanup path).
    instance, arqs = instances.pop(0)
    nova('delete_by_uuid', arq_uuids=[a['uuid'] for a in arqs])
    assert flow.arqs(instance=instance) == []
    assert _in_use(flow) == HANDLES_PER_DEVICE
    # A second delete of the same uuids is a 404 that Nova only logs.
    assert nova('delete_by_uuid', arq_uuids=[a['uuid'] for a in arqs]) is None

    # The freed handles are bound again.
    again, arqs = _spawn(flow, nova, profile, groups, rps[0])
    resolved = nova('get_for_instance', instance_uuid=again,
                    only_resolved=True)
    assert {a['state'] for a in resolved} == {'Bound'}, resolved
    assert _in_use(flow) == 2 * HANDLES_PER_DEVICE
    for instance, _arqs in instances + [(again, None)]:
        nova('delete_for_instance', instance_uuid=instance)
    assert _in_use(flow) == 0
    assert flow.arqs() == []


def test_without_service_token_nova_cannot_bind_or_delete(flow, profile,
                                                          groups):
    with Probe(flow.url, service_token=False) as nova:
        assert nova('headers') == {'X-Auth-Token': '<set>'}
        instance = str(uuid.uuid4())
        arqs = nova('create_and_match', dp_name=profile,
                    rg_rp_map=_candidate(flow, groups))
        with pytest.raises(NovaError, match='403') as error:
            nova('bind', bindings=_bindings(arqs, instance))
        assert error.value.type.endswith('AcceleratorRequestBindingFailed')
        with pytest.raises(NovaError, match='403'):
            nova('delete_for_instance', instance_uuid=instance)
        assert {a['state'] for a in flow.arqs()
                if a['uuid'] in {x['uuid'] for x in arqs}} == {'Initial'}
        # Unbound ARQs may be deleted by uuid without a service token.
        nova('delete_by_uuid', arq_uuids=[a['uuid'] for a in arqs])
    assert flow.arqs() == []
