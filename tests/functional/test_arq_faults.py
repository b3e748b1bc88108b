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

"""ARQ binds under faults, over real HTTP and RabbitMQ, on PostgreSQL and
then on MariaDB (the module runs once per database: ``db_server``).

The deployment is nova_flow.py's: two conductors sharing the RPC topic,
the API (noauth), a FakeNova for the ``accelerator-request-bound``
events, and three agents: ``faults-big`` (2 devices x 32 PCI handles),
``faults-small`` (1 device x 8 PCI handles) and ``faults-mdev`` (2
devices x 16 MDEV handles, each taking :data:`PREPARE_DELAY` to prepare,
so that its binds are in flight long enough to kill a conductor). Every
test starts with no ARQ and no handle in use, and checks the database
directly: a handle is held by at most one ARQ, handles in use == ARQs
holding one == Bound ARQs.
"""

import collections
from concurrent import futures
import json
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import binding as binding_db
from tests.functional import nova_flow

BIG = 'faults-big'
SMALL = 'faults-small'
MDEV = 'faults-mdev'
# Each mdev takes this long to prepare: binds on MDEV stay in flight.
PREPARE_DELAY = 1.0
SMALL_HANDLES = 8
# Events are leased for CLAIM_TIMEOUT seconds: a duplicate caused by an
# expired lease shows up within that time after the last delivery.
CLAIM_TIMEOUT = 5
MEMBER = 'member,reader'


@pytest.fixture(scope='module')
def flow(db_server, rabbitmq, placement, work_dir):
    agents = [nova_flow.AgentSpec(BIG, devices=2, handles=32),
              nova_flow.AgentSpec(SMALL, devices=1, handles=SMALL_HANDLES,
                                  bus_base=0x60),
              nova_flow.AgentSpec(MDEV, devices=2, handles=16, bus_base=0x70,
                                  handle_type='MDEV',
                                  fake_driver={'prepare_delay':
                                               PREPARE_DELAY})]
    with nova_flow.deployment(
            'arq-faults-' + nova_flow.database_kind(db_server), db_server,
            rabbitmq, placement, work_dir, agents,
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
    # An mdev's handle is free once its agent has removed the mdev.
    nova_flow.wait_until(lambda: flow.handle_stats()['in_use'] == 0,
                         nova_flow.AGENT_TIMEOUT + 15, 'every handle free')


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


def _kill_state(flow):
    """What the database holds right after a kill: every ARQ's (state,
    bind owner, handle) and every undelivered outbox row's owner."""
    arqs = {row.uuid: (row.state, row.bind_owner, row.attach_handle_id)
            for row in flow.db_rows(
                'SELECT uuid, state, bind_owner, attach_handle_id FROM '
                'extended_accelerator_requests')}
    unsent = {row.arq_uuid: row.claimed_by for row in flow.db_rows(
        'SELECT arq_uuid, claimed_by FROM nova_events WHERE sent_at IS '
        'NULL')}
    return arqs, unsent


def _sigkill_binds(flow, kill, host, in_flight, settle=0.0):
    """30 ARQs over 6 instances (``host``'s two devices), bound through
    both conductors (every PATCH answered 202); as soon as
    ``in_flight(arqs, unsent)`` holds for the database's state (see
    :func:`_kill_state`), and ``settle`` seconds later, ``kill``
    (conductor indexes) are SIGKILLed, then restarted once the state at
    the kill is captured. Returns the resolved ARQs, their instances, the
    monotonic time of the kill, the state then, and the killed
    conductors' hosts."""
    profile = _profile(flow, 5)
    rps = [d.rp_uuid for d in flow.devices[host]]
    requests_, instances = [], {}
    for number in range(6):
        instance = str(uuid.uuid4())
        arqs = flow.create_arqs(profile)
        rp = rps[number % 2]
        requests_.append({a['uuid']: {'hostname': host, 'device_rp_uuid': rp,
                                      'instance_uuid': instance}
                          for a in arqs})
        instances.update({a['uuid']: instance for a in arqs})
    killed = {flow.conductor_configs[i]['DEFAULT']['host'] for i in kill}
    _bind_all(flow, requests_, threads=6)
    nova_flow.wait_until(lambda: in_flight(*_kill_state(flow)), 10,
                         'binds in flight to kill', interval=0.02)
    time.sleep(settle)
    for index in kill:
        flow.kill_conductor(index)
    killed_at = time.monotonic()
    at_kill = _kill_state(flow)
    for index in kill:
        flow.start_conductor(index)
    arqs = flow.wait_resolved(list(instances), timeout=nova_flow.BIND_TIMEOUT
                              + 30)
    _check_handles(flow, arqs)
    # Enough free handles for 30 ARQs: none may fail for lack of them.
    failed = {u: a for u, a in arqs.items() if a['state'] != 'Bound'}
    reasons = dict(flow.db_rows(
        "SELECT uuid, bind_error FROM extended_accelerator_requests "
        "WHERE state = 'BindFailed'"))
    assert failed == {}, (at_kill, reasons)
    # An ARQ keeps the handle it held at the kill: a bind in flight is
    # finished where it stood, not started again.
    handles = dict(flow.db_rows(
        'SELECT uuid, attach_handle_id FROM extended_accelerator_requests'))
    moved = {u: (h, handles[u]) for u, (_s, _o, h) in at_kill[0].items()
             if u in instances and h is not None and handles[u] != h}
    assert moved == {}, moved
    return arqs, instances, killed_at, at_kill, killed


def _assert_delivered_after_kill(flow, arqs, instances, killed_at, unsent,
                                 killed):
    """Every ARQ's event (completed) is accepted by Nova; it is accepted
    twice exactly when it was in flight at the kill (Nova had received it
    while the outbox row, leased to a killed conductor, was not marked
    sent), its second copy once the lease expired; the redeliveries
    counted. Returns how many there were."""
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
    # Slack for a request the kernel had taken before the kill and
    # FakeNova read after it; nothing killed sends again for a lease.
    received = {tag for tag, times in arrivals.items()
                if min(times) <= killed_at + 0.5}
    in_flight = {tag for tag, owner in unsent.items()
                 if tag in tags and owner in killed} & received
    redelivered = {tag for tag, times in arrivals.items() if len(times) > 1}
    assert redelivered == in_flight, (
        redelivered, in_flight, _duplicate_report(flow,
                                                  redelivered ^ in_flight))
    lease = CLAIM_TIMEOUT - 0.5
    for tag in redelivered:
        times = sorted(arrivals[tag])
        assert len(times) == 2, (tag, times)
        assert times[1] - times[0] >= lease, (tag, times)
    flow.check_alive()
    return len(redelivered)


def test_conductor_sigkill_mid_bind(flow, clean):
    """Conductor 0 is SIGKILLed while its binds are in flight (ARQs it
    started are BindStarted, their mdevs being prepared: the state at the
    kill says so) and restarted: it resumes them, every ARQ ends Bound
    with the handle it had claimed, no handle leaks, and Nova accepts
    each ARQ's event once, twice only if it was in flight at the kill."""
    owner = flow.conductor_configs[0]['DEFAULT']['host']

    def started_by_0(arqs, _unsent):
        return any(state == 'BindStarted' and who == owner
                   for state, who, _handle in arqs.values())
    arqs, instances, killed_at, (at_kill, unsent), killed = _sigkill_binds(
        flow, [0], MDEV, started_by_0)
    states = collections.Counter((who, state)
                                 for state, who, _h in at_kill.values())
    assert states[(owner, 'BindStarted')] > 0, states
    assert not [u for u, (state, _w, handle) in at_kill.items()
                if state == 'BindStarted' and handle is None], at_kill
    resumed = [u for u, (state, who, _h) in at_kill.items()
               if state == 'BindStarted' and who == owner]
    assert 'Resuming %d unfinished bind jobs' % len(resumed) in (
        flow.conductors[0].log_text()), states
    _assert_delivered_after_kill(flow, arqs, instances, killed_at, unsent,
                                 killed)


def test_at_least_once_when_conductors_die_during_delivery(flow, clean):
    """Nova takes 1.5s to answer; both conductors are SIGKILLed while
    events are in flight (Nova has them, the outbox has not recorded
    them as sent: the state at the kill says so), then restarted.
    Delivery is at least once: every ARQ's event arrives; those in flight
    are sent again once their lease expires (Nova ignores an event nobody
    waits for), and only those."""
    flow.nova.delay = 1.5

    def delivering(_arqs, unsent):
        return any(owner is not None for owner in unsent.values())
    try:
        # Leased events are posted at once; half a second later their
        # request is with Nova, which answers a second after that.
        arqs, instances, killed_at, (_at_kill, unsent), killed = (
            _sigkill_binds(flow, [0, 1], BIG, delivering, settle=0.5))
    finally:
        flow.nova.delay = 0.0
    redelivered = _assert_delivered_after_kill(flow, arqs, instances,
                                               killed_at, unsent, killed)
    assert redelivered > 0, 'no event was in flight at the kill'


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
    # Both conductors took the PATCHes (RabbitMQ spreads them), but which
    # of them won the 8 handles depends on timing: on a loaded machine one
    # may win them all. Each winner is owned by one conductor or the other.
    assert 1 <= len(owners) <= 2, owners
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


def test_handle_claims_skip_only_the_handles_taken(flow, clean):
    """Two binds claim handles of one device in concurrent transactions:
    the second neither waits for the first nor finds the device's other
    free handles locked; each takes handles of its own (the claim is
    cyborg/db/arqs.py's, on this database)."""
    rp = flow.devices[BIG][0].rp_uuid
    engine = sa.create_engine(flow.db_url, poolclass=sa.pool.NullPool)
    first, second = engine.connect(), engine.connect()
    first_tx, second_tx = first.begin(), second.begin()
    pool = futures.ThreadPoolExecutor(1)
    try:
        mine = binding_db._claim_free(first, rp, BIG, 2)
        theirs = pool.submit(binding_db._claim_free, second, rp, BIG,
                             2).result(timeout=10)
        assert len(mine) == len(theirs) == 2
        assert not {h.id for h in mine} & {h.id for h in theirs}
    finally:
        first_tx.rollback()  # lets a blocked second claim go on
        pool.shutdown(wait=True)
        second_tx.rollback()
        first.close()
        second.close()
        engine.dispose()


def test_concurrent_binds_share_a_device(flow, clean):
    """64 single-ARQ PATCHes at once, across both conductors, on a host
    whose two devices have 64 free handles between them: a bind never
    finds a device's free handles all taken by the concurrent claims of
    others (each claim locks only the handles it takes), so every one is
    answered 202 and ends Bound, each with a handle of its own."""
    profile = _profile(flow, 8)
    rps = [d.rp_uuid for d in flow.devices[BIG]]
    all_arqs = []
    for _number in range(8):
        all_arqs.extend(flow.create_arqs(profile))
    instances = {a['uuid']: str(uuid.uuid4()) for a in all_arqs}
    requests_ = [{u: {'hostname': BIG, 'device_rp_uuid': rps[n % 2],
                      'instance_uuid': i}}
                 for n, (u, i) in enumerate(instances.items())]
    responses = _bind_each(flow, requests_, threads=32)
    refused = [(r.status_code, r.text) for r in responses
               if r.status_code != 202]
    assert refused == [], (len(refused), refused[:3])
    arqs = flow.wait_resolved(list(instances), timeout=60)
    assert {a['state'] for a in arqs.values()} == {'Bound'}
    _check_handles(flow, arqs)
    _assert_events_once(flow, arqs, instances)


@pytest.mark.parametrize('host', [BIG, MDEV], ids=['pci', 'mdev'])
def test_delete_racing_bind(flow, clean, host):
    """Nova deletes ARQs while their binds run: 40 ARQs (one instance
    each), each PATCHed and DELETEd at the same moment through both
    conductors (on mdevs, the delete lands during the bind's job, or
    before or after it). Whichever wins, every answer is one the contract
    allows, every ARQ is gone, and every handle it claimed is free
    again (on mdevs, once its agent released the mdev)."""
    profile = _profile(flow, 10)
    rps = [d.rp_uuid for d in flow.devices[host]]
    all_arqs = []
    for _number in range(4):
        all_arqs.extend(flow.create_arqs(profile))
    instances = {a['uuid']: str(uuid.uuid4()) for a in all_arqs}
    def bind(number, arq):
        return flow.bind({arq: {'hostname': host,
                                'device_rp_uuid': rps[number % 2],
                                'instance_uuid': instances[arq]}})

    def delete(arq):
        return flow.request('DELETE', '/v2/accelerator_requests',
                            service=True, params={'arqs': arq})

    with futures.ThreadPoolExecutor(16) as pool:
        binds, deletes = [], []
        for number, arq in enumerate(instances):
            if number % 2:  # half the deletes leave first
                deletes.append(pool.submit(delete, arq))
                binds.append(pool.submit(bind, number, arq))
            else:
                binds.append(pool.submit(bind, number, arq))
                deletes.append(pool.submit(delete, arq))
        binds = [f.result() for f in binds]
        deletes = [f.result() for f in deletes]
    # A bind that lost answers 404 (the ARQ is gone); a delete always
    # succeeds, of a bound, binding or unbound ARQ alike.
    assert {r.status_code for r in binds} <= {202, 404}, [
        (r.status_code, r.text) for r in binds if r.status_code not in (
            202, 404)][:3]
    # Some binds won (their ARQ was deleted bound, or binding).
    assert 202 in {r.status_code for r in binds}
    assert {r.status_code for r in deletes} == {204}, [
        (r.status_code, r.text) for r in deletes if r.status_code != 204][:3]
    assert flow.arqs() == []
    nova_flow.wait_until(
        lambda: flow.handle_stats()['in_use'] == 0,
        nova_flow.AGENT_TIMEOUT + 15, 'every claimed handle free')
    stats = flow.handle_stats()
    assert stats['states'] == {} and stats['held'] == 0, stats
    if host == MDEV:
        # No job is left to finish, and none failed for the race.
        time.sleep(PREPARE_DELAY + 1)
        assert flow.handle_stats()['in_use'] == 0
    # Nova hears of a bound ARQ at most once (it may have been deleted
    # before its event was sent).
    counts = flow.nova.tag_counts(accepted_only=False)
    assert all(counts[u] <= 1 for u in instances), counts
    flow.check_alive()


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
