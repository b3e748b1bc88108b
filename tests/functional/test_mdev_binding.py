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

"""Handles the agent prepares (mdevs), over real HTTP, RabbitMQ and
PostgreSQL.

The deployment is nova_flow.py's with one agent, ``mdev-host``, whose
fake device has MDEV attach handles: preparing one creates a file named by
the handle's uuid in the agent's mdev directory (taking PREPARE_DELAY
seconds), releasing it removes the file. A bind claims the handle and
leaves the preparation to a job; unbind and delete release the mdev
before the handle is free again.
"""

import os
import signal
import time
import uuid

import pytest

from tests.functional import nova_flow
from tests.functional import servers

HOST = 'mdev-host'
FAILING_HOST = 'failing-host'
V2_5 = {'OpenStack-API-Version': 'accelerator 2.5'}
HANDLES = 6
PREPARE_DELAY = 0.3


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir):
    mdev_dir = os.path.join(work_dir, 'mdevs')
    agent = nova_flow.AgentSpec(
        HOST, devices=1, handles=HANDLES, handle_type='MDEV',
        fake_driver={'mdev_dir': mdev_dir, 'prepare_delay': PREPARE_DELAY})
    # A host where creating an mdev always fails.
    failing = nova_flow.AgentSpec(
        FAILING_HOST, devices=1, handles=2, handle_type='MDEV',
        bus_base=0x60, fake_driver={'prepare_failures': '*'})
    with nova_flow.deployment('mdev', postgres, rabbitmq, placement,
                              work_dir, [agent, failing]) as deployment:
        deployment.mdev_dir = mdev_dir
        yield deployment


@pytest.fixture
def clean(flow):
    """No ARQ, no handle in use and no mdev before and after."""
    yield flow
    flow.delete_all_arqs()
    nova_flow.wait_until(lambda: _quiet(flow), 30,
                         'every mdev released and every handle free')


def _quiet(flow) -> bool:
    return flow.handle_stats()['in_use'] == 0 and _mdevs(flow) == set()


def _mdevs(flow) -> set[str]:
    if not os.path.isdir(flow.mdev_dir):
        return set()
    return set(os.listdir(flow.mdev_dir))


def _bind(flow, count: int) -> tuple[str, dict[str, dict]]:
    profile = flow.create_profile([{'resources:FPGA': str(count),
                                    'trait:' + flow.trait: 'required'}])
    arqs = flow.create_arqs(profile)
    instance = str(uuid.uuid4())
    rp = flow.devices[HOST][0].rp_uuid
    response = flow.bind({a['uuid']: {'hostname': HOST, 'device_rp_uuid': rp,
                                      'instance_uuid': instance}
                          for a in arqs})
    assert response.status_code == 202, response.text
    return instance, flow.wait_resolved([a['uuid'] for a in arqs])


def _assert_one_completed_event_each(flow, instances: dict[str, str]):
    """Nova hears once of each ARQ (keys) bound to its instance (values).

    The events leave once the binds are recorded: they may follow them.
    """
    nova_flow.wait_until(
        lambda: all(flow.nova.tag_counts()[t] >= 1 for t in instances), 30,
        'an event for each ARQ')
    counts = flow.nova.tag_counts()
    assert {counts[t] for t in instances} == {1}
    for event in flow.nova.accepted():
        if event['tag'] in instances:
            assert event['status'] == 'completed'
            assert event['server_uuid'] == instances[event['tag']]


def test_mdevs_prepared_on_bind_released_on_unbind_and_delete(flow, clean):
    instance, arqs = _bind(flow, 3)
    assert {a['state'] for a in arqs.values()} == {'Bound'}
    for arq in arqs.values():
        # What Nova's libvirt driver reads to find (or create) the mdev:
        # its parent's PCI address, its type, and its uuid (the handle's).
        assert arq['attach_handle_type'] == 'MDEV'
        info = arq['attach_handle_info']
        assert info['asked_type'] == 'fake-mdev-1'
        assert {'domain', 'bus', 'device', 'function'} <= set(info)
    assert _mdevs(flow) == {a['attach_handle_uuid'] for a in arqs.values()}
    _assert_one_completed_event_each(flow, dict.fromkeys(arqs, instance))

    first, *rest = arqs.values()
    response = flow.request('PATCH', '/v2/accelerator_requests', service=True,
                            json={first['uuid']: [
                                {'op': 'remove', 'path': '/' + field}
                                for field in ('hostname', 'device_rp_uuid',
                                              'instance_uuid')]})
    assert response.status_code == 202, response.text
    left = {a['attach_handle_uuid'] for a in rest}
    nova_flow.wait_until(lambda: _mdevs(flow) == left, 10,
                         'the unbound ARQ\'s mdev removed')
    nova_flow.wait_until(lambda: flow.handle_stats()['in_use'] == 2, 10,
                         'its handle free')

    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True, params={'instance': instance})
    assert response.status_code == 204, response.text
    nova_flow.wait_until(lambda: _quiet(flow), 10,
                         'the deleted ARQs\' mdevs removed, handles free')
    flow.check_alive()


def test_conductor_sigkill_while_preparing(flow, clean):
    """Both conductors are SIGKILLed while their jobs prepare mdevs and
    restarted: every ARQ ends Bound (each conductor resumes its own jobs),
    Nova hears of each once, and handles, ARQs and mdevs agree."""
    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    rp = flow.devices[HOST][0].rp_uuid
    instances = {}
    for _number in range(HANDLES):
        arq = flow.create_arqs(profile)[0]
        instances[arq['uuid']] = str(uuid.uuid4())
    for uuid_, instance in instances.items():
        response = flow.bind({uuid_: {'hostname': HOST, 'device_rp_uuid': rp,
                                      'instance_uuid': instance}})
        assert response.status_code == 202, response.text
    for index in (0, 1):
        flow.kill_conductor(index)
    started = {row.state for row in flow.db_rows(
        'SELECT state FROM extended_accelerator_requests')}
    assert 'BindStarted' in started, started
    for index in (0, 1):
        flow.start_conductor(index)
    arqs = flow.wait_resolved(list(instances),
                              timeout=nova_flow.BIND_TIMEOUT + 30)
    assert {a['state'] for a in arqs.values()} == {'Bound'}
    stats = flow.handle_stats()
    assert stats['shared'] == [] and stats['in_use'] == HANDLES, stats
    assert _mdevs(flow) == {a['attach_handle_uuid'] for a in arqs.values()}
    _assert_one_completed_event_each(flow, instances)
    flow.check_alive()


def test_release_waits_for_the_agent(flow, clean):
    """The agent is down when its ARQ is deleted: the handle stays in use
    (its mdev still exists) until a sweeper releases it once the agent
    is back and ``[conductor] bind_timeout`` has passed."""
    instance, arqs = _bind(flow, 1)
    (arq,) = arqs.values()
    agent = flow.agents[0]
    servers.kill_group(agent.process, signal.SIGKILL)
    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True, params={'instance': instance})
    assert response.status_code == 204, response.text
    assert flow.arqs(instance=instance) == []
    time.sleep(nova_flow.AGENT_TIMEOUT + 1)  # the release gave up
    assert flow.handle_stats()['in_use'] == 1
    assert _mdevs(flow) == {arq['attach_handle_uuid']}
    agent.start()
    nova_flow.wait_until(lambda: _quiet(flow), nova_flow.BIND_TIMEOUT + 30,
                         'the mdev released and the handle free')
    flow.check_alive()


def _bind_failing(flow, unhosted: bool = False) -> tuple[str, list[str]]:
    """Two ARQs bound on the failing host (202); instance, ARQ uuids.
    With ``unhosted``, Nova refuses the instance's events (422: no host
    yet) from the first one on."""
    profile = flow.create_profile([{'resources:FPGA': '2',
                                    'trait:' + flow.trait: 'required'}])
    arqs = [a['uuid'] for a in flow.create_arqs(profile)]
    instance = str(uuid.uuid4())
    if unhosted:
        flow.nova.set_unhosted(instance)
    rp = flow.devices[FAILING_HOST][0].rp_uuid
    response = flow.bind({u: {'hostname': FAILING_HOST, 'device_rp_uuid': rp,
                              'instance_uuid': instance} for u in arqs})
    assert response.status_code == 202, response.text
    return instance, arqs


def _shown(flow, arqs: list[str]) -> dict[str, dict]:
    """The ARQs as Nova reads them, at 2.5 (with ``bind_error``)."""
    return {a['uuid']: a for a in flow.request(
        'GET', '/v2/accelerator_requests', headers=V2_5).json()['arqs']
        if a['uuid'] in arqs}


def _sent(flow, arqs: list[str]) -> dict[str, int]:
    """How often Nova was sent each ARQ's event (refused ones too)."""
    counts = flow.nova.tag_counts(accepted_only=False)
    return {u: counts[u] for u in arqs}


def _failed(flow, arqs):
    shown = _shown(flow, arqs)
    return all(a['bind_error'] for a in shown.values())


def test_a_preparation_failure_is_repeated_until_nova_deletes(flow, clean):
    """The mdev cannot be created: the ARQs keep reading BindStarted (not
    resolved: Nova keeps waiting) with the reason, and their failed event
    is sent again whether Nova refuses it (422: no host yet) or takes it,
    until Nova deletes the ARQs; then nothing is left."""
    before = flow.handle_stats()['in_use']
    # Nova's conductor has not placed it (before the bind: the first
    # failed event can be sent at once).
    instance, arqs = _bind_failing(flow, unhosted=True)
    nova_flow.wait_until(lambda: _failed(flow, arqs), 30,
                         'the failure recorded')
    shown = _shown(flow, arqs)
    assert {a['state'] for a in shown.values()} == {'BindStarted'}
    assert all('Preparing attach handle' in a['bind_error']
               for a in shown.values())
    # The agent's reason, never its traceback.
    assert not any('Traceback' in a['bind_error'] for a in shown.values())
    resolved = flow.request('GET', '/v2/accelerator_requests', params={
        'instance': instance, 'bind_state': 'resolved'})
    assert resolved.status_code == 423  # Nova's compute would wait
    # Refused (422), and sent again all the same.
    nova_flow.wait_until(lambda: min(_sent(flow, arqs).values()) >= 2, 10,
                         'each failed event sent twice')
    assert flow.nova.tag_counts()[arqs[0]] == 0  # none accepted yet
    # The instance is on its host now: events are taken, still repeated.
    with flow.nova._lock:
        flow.nova.unhosted.discard(instance)
    taken = flow.nova.tag_counts()
    nova_flow.wait_until(
        lambda: all(flow.nova.tag_counts()[u] >= taken[u] + 2
                    for u in arqs), 15, 'the taken event repeated')
    assert {e['status'] for e in flow.nova.events
            if e['tag'] in arqs} == {'failed'}
    assert flow.handle_stats()['in_use'] == before  # released at failure
    # Nova acts: it deletes the instance's ARQs; the repeats stop.
    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True, params={'instance': instance})
    assert response.status_code == 204, response.text
    time.sleep(0.5)  # a send in flight at the delete may still land
    stopped = _sent(flow, arqs)
    time.sleep(4)
    assert _sent(flow, arqs) == stopped
    assert flow.db_rows('SELECT count(*) FROM nova_events WHERE arq_uuid '
                        'IN (:a, :b) AND sent_at IS NULL', a=arqs[0],
                        b=arqs[1])[0][0] == 0
    assert flow.arqs(instance=instance) == []
    flow.check_alive()


def test_a_failure_nova_never_acts_on_ends_bind_failed(flow, clean):
    """Nobody deletes the ARQs: after [conductor] bind_timeout they read
    BindFailed (resolved) and the repeats end."""
    instance, arqs = _bind_failing(flow)
    nova_flow.wait_until(lambda: _failed(flow, arqs), 30,
                         'the failure recorded')
    assert {a['state'] for a in _shown(flow, arqs).values()} == {
        'BindStarted'}
    ended = flow.wait_resolved(arqs, timeout=nova_flow.BIND_TIMEOUT + 30)
    assert {a['state'] for a in ended.values()} == {'BindFailed'}
    repeats = _sent(flow, arqs)
    assert min(repeats.values()) >= 2, repeats
    time.sleep(3)
    assert _sent(flow, arqs) == repeats
    flow.check_alive()
