"""ARQ binds under faults, over real HTTP, RabbitMQ and PostgreSQL.

The deployment is nova_flow.py's: two conductors sharing the RPC topic,
the API (noauth), a FakeNova for the ``accelerator-request-bound``
events, and two agents: ``faults-big`` (2 devices x 32 PCI handles) and
``faults-small`` (1 device x 8 PCI handles). Every test starts with no
ARQ and no handle in use, and checks the database directly: a handle is
held by at most one ARQ, handles in use == ARQs holding one == Bound ARQs.
"""

import collections
import json
import time
import uuid
from concurrent import futures

import pytest

from tests.functional import nova_flow

BIG = 'faults-big'
SMALL = 'faults-small'
SMALL_HANDLES = 8
# Events are leased for CLAIM_TIMEOUT seconds: a duplicate caused by an
# expired lease shows up within that time after the last delivery.
CLAIM_TIMEOUT = 5
MEMBER = 'member,reader'


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir):
    agents = [nova_flow.AgentSpec(BIG, devices=2, handles=32),
              nova_flow.AgentSpec(SMALL, devices=1, handles=SMALL_HANDLES,
                                  bus_base=0x60)]
    with nova_flow.deployment(
            'arq-faults', postgres, rabbitmq, placement, work_dir, agents,
            nova_options={'timeout': 2, 'claim_timeout': CLAIM_TIMEOUT}
    ) as deployment:
        yield deployment


@pytest.fixture
def clean(flow):
    """No ARQ and no handle in use before and after the test."""
    flow.delete_all_arqs()
    assert flow.handle_stats()['in_use'] == 0
    flow.nova.up()
    yield flow
    flow.nova.up()
    flow.delete_all_arqs()
    stats = flow.handle_stats()
    assert stats['in_use'] == 0, stats


def _profile(flow, count):
    return flow.create_profile([{'resources:FPGA': str(count),
                                 'trait:' + flow.trait: 'required'}])


def _check_handles(flow, arqs_by_uuid):
    stats = flow.handle_stats()
    bound = sum(1 for a in arqs_by_uuid.values() if a['state'] == 'Bound')
    assert stats['shared'] == [], stats
    assert stats['bound_without_handle'] == 0, stats
    assert stats['held_not_in_use'] == 0, stats
    assert stats['in_use'] == bound == stats['held'], (stats, bound)
    return stats


def _assert_events_once(flow, arqs_by_uuid, instances, timeout=60):
    """Every ARQ's event arrives, then no second one within the lease."""
    tags = set(arqs_by_uuid)

    def all_in():
        counts = flow.nova.tag_counts()
        return all(counts[t] >= 1 for t in tags)
    nova_flow.wait_until(all_in, timeout, 'an event for each of %d ARQs'
                         % len(tags))
    time.sleep(CLAIM_TIMEOUT + 1.5)
    counts = flow.nova.tag_counts()
    twice = {t: counts[t] for t in tags if counts[t] != 1}
    assert twice == {}, _duplicate_report(flow, twice)
    expected = {'Bound': 'completed', 'BindFailed': 'failed'}
    for event in flow.nova.accepted():
        if event['tag'] in tags:
            arq = arqs_by_uuid[event['tag']]
            assert event['status'] == expected[arq['state']], (event, arq)
            assert event['server_uuid'] == instances[event['tag']]


def _duplicate_report(flow, tags):
    """Where each duplicated event came from: Nova's requests, the
    outbox rows and the conductors' logs."""
    lines = []
    for request in flow.nova.requests:
        mine = [e['tag'] for e in request['events'] if e['tag'] in tags]
        if mine:
            lines.append('request at %.3f status %s, %d events, with %s'
                         % (request['arrived'], request['status'],
                            len(request['events']), mine))
    for tag in tags:
        for row in flow.db_rows('SELECT * FROM nova_events WHERE arq_uuid '
                                '= :tag ORDER BY id', tag=tag):
            lines.append('outbox: %s' % (dict(row._mapping),))
    for process in flow.conductors:
        lines.extend(line for line in process.log_text().splitlines()
                     if any(t in line for t in tags)
                     or 'Nova events' in line or 'Started' in line)
    return '\n'.join(lines)


def _bind_each(flow, bindings_per_request, threads=16):
    """PATCH each bindings dict concurrently; the responses."""
    with futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda b: flow.bind(b), bindings_per_request))


def _bind_all(flow, bindings_per_request, threads=16):
    """PATCH each bindings dict concurrently; every answer must be 202."""
    responses = _bind_each(flow, bindings_per_request, threads)
    bad = [(r.status_code, r.text) for r in responses if r.status_code != 202]
    assert bad == [], bad[:5]


def _sigkill_binds(flow, kill, delay_before_kill=0.0):
    """30 ARQs over 6 instances (two devices), bound through both
    conductors; then ``kill`` (conductor indexes) are SIGKILLed and
    restarted. Returns the resolved ARQs, their instances, the
    monotonic time of the kill and the (owner, state) counts then."""
    profile = _profile(flow, 5)
    rps = [d.rp_uuid for d in flow.devices[BIG]]
    requests_, instances = [], {}
    for number in range(6):
        instance = str(uuid.uuid4())
        arqs = flow.create_arqs(profile)
        rp = rps[number % 2]
        requests_.append({a['uuid']: {'hostname': BIG, 'device_rp_uuid': rp,
                                      'instance_uuid': instance}
                          for a in arqs})
        instances.update({a['uuid']: instance for a in arqs})
    _bind_all(flow, requests_, threads=6)
    time.sleep(delay_before_kill)
    for index in kill:
        flow.kill_conductor(index)
    killed_at = time.monotonic()
    at_kill = collections.Counter(
        (row.bind_owner, row.state) for row in flow.db_rows(
            'SELECT bind_owner, state FROM extended_accelerator_requests'))
    for index in kill:
        flow.start_conductor(index)
    arqs = flow.wait_resolved(list(instances), timeout=nova_flow.BIND_TIMEOUT
                              + 30)
    owners = {owner for owner, _state in at_kill}
    assert len(owners) == 2, ('both conductors should have bound some',
                              at_kill)
    _check_handles(flow, arqs)
    # 64 free handles for 30 ARQs: nothing may fail for lack of handles.
    failed = {u: a for u, a in arqs.items() if a['state'] != 'Bound'}
    reasons = dict(flow.db_rows(
        "SELECT uuid, bind_error FROM extended_accelerator_requests "
        "WHERE state = 'BindFailed'"))
    assert failed == {}, (at_kill, reasons)
    return arqs, instances, killed_at, at_kill


def _assert_delivered_after_kill(flow, arqs, instances, killed_at):
    """Every ARQ's event (completed) arrives; an event is repeated only
    if it was in flight at the kill (its first copy arrived by then, the
    second after the lease expired), and at most once."""
    tags = set(arqs)
    nova_flow.wait_until(
        lambda: all(flow.nova.tag_counts()[t] >= 1 for t in tags), 60,
        'an event for each ARQ')
    time.sleep(CLAIM_TIMEOUT + 1.5)
    arrivals = collections.defaultdict(list)
    for event in flow.nova.accepted():
        if event['tag'] in tags:
            arrivals[event['tag']].append(event['arrived'])
            assert event['status'] == 'completed'
            assert event['server_uuid'] == instances[event['tag']]
    assert set(arrivals) == tags
    for tag, times in arrivals.items():
        assert len(times) <= 2, (tag, times)
        if len(times) == 2:
            first, second = sorted(times)
            assert first <= killed_at + 0.5, (tag, times, killed_at)
            assert second - first >= CLAIM_TIMEOUT - 0.5, (tag, times)
    flow.check_alive()


def test_conductor_sigkill_mid_bind(flow, clean):
    """Conductor 0 is SIGKILLed right after the PATCHes and restarted:
    every ARQ ends Bound, no handle leaks, Nova hears of every ARQ; an
    event is repeated only if the killed conductor had it in flight (the
    first copy arrived before the kill, the second one after its lease
    expired), and at most once."""
    arqs, instances, killed_at, _at_kill = _sigkill_binds(flow, [0])
    _assert_delivered_after_kill(flow, arqs, instances, killed_at)


def test_at_least_once_when_conductors_die_during_delivery(flow, clean):
    """Nova takes 1.5s to answer; both conductors are SIGKILLed while the
    first events are in flight, then restarted. Delivery is at least
    once: every ARQ's event arrives; one Nova received but whose answer
    no conductor recorded is sent again once its lease expires (Nova
    ignores an event nobody waits for), and only such an event."""
    flow.nova.delay = 1.5
    try:
        arqs, instances, killed_at, _at_kill = _sigkill_binds(
            flow, [0, 1], delay_before_kill=0.5)
    finally:
        flow.nova.delay = 0.0
    _assert_delivered_after_kill(flow, arqs, instances, killed_at)


@pytest.mark.parametrize('refuse', [False, True], ids=['503', 'refused'])
def test_nova_down_during_binds(flow, clean, refuse):
    """Nova answers 503 (or refuses connections) while 10 ARQs bind;
    once it is back every event arrives exactly once."""
    profile = _profile(flow, 5)
    rp = flow.devices[BIG][0].rp_uuid
    requests_, instances = [], {}
    before = len(flow.nova.requests)
    flow.nova.down(refuse=refuse)
    for _number in range(2):
        instance = str(uuid.uuid4())
        arqs = flow.create_arqs(profile)
        requests_.append({a['uuid']: {'hostname': BIG, 'device_rp_uuid': rp,
                                      'instance_uuid': instance}
                          for a in arqs})
        instances.update({a['uuid']: instance for a in arqs})
    _bind_all(flow, requests_)
    arqs = flow.wait_resolved(list(instances))
    assert {a['state'] for a in arqs.values()} == {'Bound'}
    _check_handles(flow, arqs)
    if not refuse:
        # The notifier tried (and got 503s) while Nova was down.
        nova_flow.wait_until(
            lambda: any(r['status'] == 503
                        for r in flow.nova.requests[before:]),
            10, 'a request answered 503')
    counts = flow.nova.tag_counts()
    assert all(counts[t] == 0 for t in instances)
    flow.nova.up()
    _assert_events_once(flow, arqs, instances)


def test_200_concurrent_binds_on_8_handles(flow, clean):
    """200 single-ARQ PATCHes (200 instances) at once, across both
    conductors, on a device with 8 free handles: 8 are bound, the other
    192 answered 409 at once and changed nothing (Nova reschedules)."""
    profile = _profile(flow, 10)
    rp = flow.devices[SMALL][0].rp_uuid
    all_arqs = []
    for _number in range(20):
        all_arqs.extend(flow.create_arqs(profile))
    assert len(all_arqs) == 200
    instances = {a['uuid']: str(uuid.uuid4()) for a in all_arqs}
    requests_ = [{u: {'hostname': SMALL, 'device_rp_uuid': rp,
                      'instance_uuid': i}} for u, i in instances.items()]
    responses = _bind_each(flow, requests_, threads=32)
    answers = collections.Counter(r.status_code for r in responses)
    assert answers == {202: SMALL_HANDLES, 409: 200 - SMALL_HANDLES}, answers
    refusals = {r.json()['error_message'] for r in responses
                if r.status_code == 409}
    assert {json.loads(m)['faultstring'] for m in refusals} == {
        'Resource provider %s has 0 free attach handle(s); 1 ARQ(s) asked '
        'for one' % rp}, refusals
    won = {u: i for (u, i), r in zip(instances.items(), responses,
                                     strict=True) if r.status_code == 202}
    arqs = flow.wait_resolved(list(won), timeout=90)
    assert {a['state'] for a in arqs.values()} == {'Bound'}
    _check_handles(flow, arqs)
    owners = {row[0] for row in flow.db_rows(
        'SELECT DISTINCT bind_owner FROM extended_accelerator_requests '
        'WHERE bind_owner IS NOT NULL')}
    assert len(owners) == 2, owners
    # The refused ARQs are as they were: Initial, unbound, no event.
    lost = [u for u in instances if u not in won]
    rows = {row[0]: tuple(row[1:]) for row in flow.db_rows(
        'SELECT uuid, state, instance_uuid, bind_owner FROM '
        'extended_accelerator_requests')}
    untouched = collections.Counter(rows[u] for u in lost)
    assert untouched == {('Initial', None, None): len(lost)}, untouched
    _assert_events_once(flow, arqs, won)
    counts = flow.nova.tag_counts()
    assert all(counts[u] == 0 for u in lost)


# Tenant isolation and service token, over HTTP ---------------------------

def _bound_and_unbound(flow, project):
    """Two ARQs of ``project`` (member): one bound, one left Initial."""
    profile = _profile(flow, 2)
    first, second = flow.create_arqs(profile, project=project, roles=MEMBER)
    instance = str(uuid.uuid4())
    rp = flow.devices[BIG][0].rp_uuid
    response = flow.bind({first['uuid']: {'hostname': BIG,
                                          'device_rp_uuid': rp,
                                          'instance_uuid': instance}},
                         project=project, roles=MEMBER)
    assert response.status_code == 202, response.text
    flow.wait_resolved([first['uuid']])
    return first['uuid'], second['uuid'], instance


def test_other_projects_arqs_are_invisible(flow, clean):
    owner, other = 'project-%s' % uuid.uuid4().hex[:8], 'project-other'
    bound, unbound, instance = _bound_and_unbound(flow, owner)
    path = '/v2/accelerator_requests'
    as_other = dict(project=other, roles=MEMBER)
    for arq in (bound, unbound):
        response = flow.request('GET', path + '/' + arq, **as_other)
        assert response.status_code == 404, response.text
        # A service token does not widen a project's scope.
        for body in ([{'op': 'remove', 'path': '/hostname'}],
                     [{'op': 'add', 'path': '/hostname', 'value': 'h'},
                      {'op': 'add', 'path': '/device_rp_uuid',
                       'value': str(uuid.uuid4())},
                      {'op': 'add', 'path': '/instance_uuid',
                       'value': str(uuid.uuid4())}]):
            response = flow.request('PATCH', path, json={arq: body},
                                    service=True, **as_other)
            assert response.status_code == 404, response.text
            response = flow.request('PATCH', path + '/' + arq, json=body,
                                    service=True, **as_other)
            assert response.status_code == 404, response.text
        for service in (False, True):
            response = flow.request('DELETE', path, params={'arqs': arq},
                                    service=service, **as_other)
            assert response.status_code == 404, response.text
            response = flow.request('DELETE', path + '/' + arq,
                                    service=service, **as_other)
            assert response.status_code == 404, response.text
    listed = flow.request('GET', path, **as_other).json()['arqs']
    assert [a for a in listed if a['uuid'] in (bound, unbound)] == []
    listed = flow.request('GET', path, params={'instance': instance},
                          **as_other).json()['arqs']
    assert listed == []
    # Deleting "by instance" from another project touches nothing.
    response = flow.request('DELETE', path, params={'instance': instance},
                            service=True, **as_other)
    assert response.status_code == 204, response.text
    mine = {a['uuid']: a for a in flow.request(
        'GET', path, project=owner, roles=MEMBER).json()['arqs']}
    assert mine[bound]['state'] == 'Bound'
    assert mine[unbound]['state'] == 'Initial'


def test_service_token_required(flow, clean):
    project = 'project-%s' % uuid.uuid4().hex[:8]
    as_member = dict(project=project, roles=MEMBER)
    bound, unbound, instance = _bound_and_unbound(flow, project)
    path = '/v2/accelerator_requests'
    rp = flow.devices[BIG][0].rp_uuid
    add = [{'op': 'add', 'path': '/hostname', 'value': BIG},
           {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
           {'op': 'add', 'path': '/instance_uuid',
            'value': str(uuid.uuid4())}]
    remove = [{'op': 'remove', 'path': '/hostname'},
              {'op': 'remove', 'path': '/device_rp_uuid'},
              {'op': 'remove', 'path': '/instance_uuid'}]
    # Without the service role, even for admins: bind, unbind, delete by
    # instance, delete a bound ARQ.
    for who in (as_member, {}):
        for arq, ops in ((unbound, add), (bound, remove)):
            response = flow.request('PATCH', path, json={arq: ops}, **who)
            assert response.status_code == 403, response.text
            response = flow.request('PATCH', path + '/' + arq, json=ops,
                                    **who)
            assert response.status_code == 403, response.text
        response = flow.request('DELETE', path,
                                params={'instance': instance}, **who)
        assert response.status_code == 403, response.text
        response = flow.request('DELETE', path, params={'arqs': bound},
                                **who)
        assert response.status_code == 403, response.text
        response = flow.request('DELETE', path + '/' + bound, **who)
        assert response.status_code == 403, response.text
    # A role of the user token is not a service token's role.
    response = flow.request('PATCH', path, json={unbound: add},
                            project=project, roles='member,service')
    assert response.status_code == 403, response.text
    states = {a['uuid']: a['state'] for a in flow.arqs()}
    assert states == {bound: 'Bound', unbound: 'Initial'}
    # An unbound ARQ is the user's to delete.
    response = flow.request('DELETE', path, params={'arqs': unbound},
                            **as_member)
    assert response.status_code == 204, response.text
    # With the service role: unbind, then delete by instance.
    response = flow.request('PATCH', path, json={bound: remove},
                            service=True, **as_member)
    assert response.status_code == 202, response.text
    assert flow.handle_stats()['in_use'] == 0
    response = flow.request('DELETE', path, params={'instance': instance},
                            service=True, **as_member)
    assert response.status_code == 204, response.text
    # Unbound now: deletable by uuid without the service role.
    response = flow.request('DELETE', path + '/' + bound, **as_member)
    assert response.status_code == 204, response.text
    assert flow.arqs() == []
