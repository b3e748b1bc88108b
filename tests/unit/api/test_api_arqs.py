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

"""/v2/accelerator_requests through the assembled app, in process.

Reads come from rows inserted into the migrated database (of each kind); the
conductor is a mock, so writes are checked by what reaches it.
"""

import datetime
import json
from unittest import mock

from keystonemiddleware import opts as ksm_opts
from oslo_db import exception as db_exc
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
import webob

from cyborg.api import app as api_app
from cyborg.common import exception
from cyborg.db import models
from cyborg.domain import arq_states as states
from cyborg.domain import restore
from tests import factories

PATH = '/v2/accelerator_requests'
ADMIN: dict[str, str] = {}  # noauth default: admin of the default project
P1 = {'X-Project-Id': 'p1', 'X-Roles': 'member'}
P2 = {'X-Project-Id': 'p2', 'X-Roles': 'member'}
SERVICE = {'X-Service-Roles': 'service'}
V2_1 = {'OpenStack-API-Version': 'accelerator 2.1'}

RP = '11111111-1111-4111-8111-111111111111'
INSTANCE = '22222222-2222-4222-8222-222222222222'
OTHER_INSTANCE = '33333333-3333-4333-8333-333333333333'
MISSING = '44444444-4444-4444-8444-444444444444'
HANDLE = '55555555-5555-4555-8555-555555555555'
OTHER_HANDLE = '55555555-5555-4555-8555-000000000002'
CREATED = datetime.datetime(2026, 1, 2, 3, 4, 5)


@pytest.fixture
def conductor():
    return mock.Mock()


@pytest.fixture
def app(conf, conductor, database):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch(
        'cyborg.conductor.rpcapi.ConductorAPI', return_value=conductor
    ):
        return api_app.setup_app(conf, transport=object())


@pytest.fixture
def seed(database):
    """A device profile and two PCI attach handles; returns their ids."""
    profile = factories.create_test_device_profile(
        uuid='66666666-6666-4666-8666-666666666666', name='dp',
        groups=[{'resources:FPGA': '1'}])
    device = factories.create_test_device(
        database, uuid='77777777-7777-4777-8777-777777777777',
        hostname='h1', address='0000:0c:00.0')
    deployable = factories.create_test_deployable(
        database, uuid='88888888-8888-4888-8888-888888888888', name='d',
        device_id=device['id'], rp_uuid=RP)
    cpid = factories.create_test_controlpath_id(
        database, uuid='99999999-9999-4999-8999-999999999999',
        device_id=device['id'])
    handle_ids = [
        factories.create_test_attach_handle(
            database, uuid=uuid, deployable_id=deployable['id'],
            cpid_id=cpid['id'], in_use=True,
            attach_info=factories.pci_info(index))['id']
        for index, uuid in enumerate((HANDLE, OTHER_HANDLE))
    ]
    return {'profile_id': profile['id'], 'handle_ids': handle_ids}


def _uuid(number: int) -> str:
    return '%08x-0000-4000-8000-000000000000' % number


def _insert(
    database,
    seed,
    number,
    state=states.INITIAL,
    project='p1',
    instance=None,
    handle=None,
    group=0,
):
    """An ARQ row; bind fields are set when it has an instance, and
    ``handle`` is the index of its attach handle in ``seed``."""
    values = {
        'uuid': _uuid(number),
        'state': state,
        'project_id': project,
        'device_profile_id': seed['profile_id'],
        'device_profile_group_id': group,
        'created_at': CREATED,
    }
    if instance:
        values.update(hostname='h1', device_rp_uuid=RP, instance_uuid=instance)
    if handle is not None:
        values['attach_handle_id'] = seed['handle_ids'][handle]
    return factories.create_test_arq(database, **values)['uuid']


def _request(app, method, path, body=None, headers=None):
    request = webob.Request.blank(
        path, method=method, headers=dict(headers or {})
    )
    if body is not None:
        request.body = (
            body if isinstance(body, bytes) else json.dumps(body).encode()
        )
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


def _bind_ops(rp=RP, instance=INSTANCE, hostname='h1'):
    return [
        {'op': 'add', 'path': '/hostname', 'value': hostname},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance},
    ]


UNBIND_OPS = [
    {'op': 'remove', 'path': '/hostname'},
    {'op': 'remove', 'path': '/device_rp_uuid'},
    {'op': 'remove', 'path': '/instance_uuid'},
]


def _writes(conductor):
    return [
        conductor.arq_create.called,
        conductor.arq_bind.called,
        conductor.arq_unbind.called,
        conductor.arq_delete.called,
    ]


# Reads


def test_view_in_each_state(app, database, seed):
    for number, state in enumerate(states.ALL, start=1):
        bound_like = state not in (states.INITIAL, states.UNBOUND)
        _insert(
            database,
            seed,
            number,
            state=state,
            instance=INSTANCE if bound_like else None,
            handle={states.BOUND: 0, states.BIND_FAILING: 1}.get(state),
        )
    response = _request(app, 'GET', PATH)
    assert response.status_int == 200
    shown = [arq['state'] for arq in response.json['arqs']]
    # A failure Nova has not acted on yet reads as BindStarted (Nova
    # would count BindFailed as resolved and build without waiting).
    assert shown == [states.BIND_STARTED if state == states.BIND_FAILING
                     else state for state in states.ALL]
    arqs = dict(zip(states.ALL, response.json['arqs'], strict=True))
    bound = arqs[states.BOUND]
    assert bound == {
        'uuid': _uuid(3),
        'state': 'Bound',
        'device_profile_name': 'dp',
        'device_profile_group_id': 0,
        'hostname': 'h1',
        'device_rp_uuid': RP,
        'instance_uuid': INSTANCE,
        'project_id': 'p1',
        'attach_handle_type': 'PCI',
        'attach_handle_uuid': HANDLE,
        'attach_handle_info': {
            'domain': '0000',
            'bus': '0c',
            'device': '0',
            'function': '0',
        },
        'links': [
            {'href': 'http://localhost%s/%s' % (PATH, _uuid(3)), 'rel': 'self'}
        ],
        'created_at': '2026-01-02T03:04:05+00:00',
        'updated_at': None,
    }
    for state, arq in arqs.items():
        if state == states.BOUND:
            continue
        # Even with a handle still attached (BindFailing: prepared, not
        # released yet), only a Bound ARQ shows one.
        assert arq['attach_handle_type'] == ''
        assert arq['attach_handle_uuid'] is None
        assert arq['attach_handle_info'] == {}
    initial = arqs[states.INITIAL]
    assert initial['hostname'] is None
    assert initial['device_rp_uuid'] is None
    assert initial['instance_uuid'] is None


def test_bind_error_from_2_5(app, database, seed):
    failed = _insert(database, seed, 1, state=states.BIND_FAILED,
                     instance=INSTANCE)
    bound = _insert(database, seed, 2, state=states.BOUND,
                    instance=INSTANCE, handle=0)
    failing = _insert(database, seed, 3, state=states.BIND_FAILING,
                      instance=INSTANCE)
    with database.begin() as connection:
        connection.execute(
            sa.update(models.ExtendedAcceleratorRequest).values(
                bind_error='No free attach handle'))
    at_2_4 = _request(app, 'GET', PATH,
                      headers={'OpenStack-API-Version': 'accelerator 2.4'})
    assert all('bind_error' not in arq for arq in at_2_4.json['arqs'])
    at_2_5 = _request(app, 'GET', PATH,
                      headers={'OpenStack-API-Version': 'accelerator 2.5'})
    errors = {arq['uuid']: arq['bind_error'] for arq in at_2_5.json['arqs']}
    # Only a failed bind has a reason to show, also while it is still
    # reported to Nova (and reads as BindStarted).
    assert errors == {failed: 'No free attach handle', bound: None,
                      failing: 'No free attach handle'}
    states_2_5 = {arq['uuid']: arq['state'] for arq in at_2_5.json['arqs']}
    assert states_2_5[failing] == states.BIND_STARTED
    one = _request(app, 'GET', '%s/%s' % (PATH, failed),
                   headers={'OpenStack-API-Version': 'accelerator latest'})
    assert one.json['bind_error'] == 'No free attach handle'


def test_a_bound_arq_shows_why_its_handle_was_not_restored(app, database,
                                                           seed):
    bound = _insert(database, seed, 2, state=states.BOUND,
                    instance=INSTANCE, handle=0)
    reason = restore.failure_reason('h1', 'virtual function gone')
    with database.begin() as connection:
        connection.execute(
            sa.update(models.ExtendedAcceleratorRequest).values(
                bind_error=reason))
    one = _request(app, 'GET', '%s/%s' % (PATH, bound),
                   headers={'OpenStack-API-Version': 'accelerator 2.5'})
    assert one.json['state'] == states.BOUND
    assert one.json['bind_error'] == (
        'Restoring attach handle h1 after its host restarted failed: '
        'virtual function gone')


def test_get_one(app, database, seed):
    uuid = _insert(database, seed, 1)
    response = _request(app, 'GET', '%s/%s' % (PATH, uuid), headers=P1)
    assert response.status_int == 200
    assert response.json['uuid'] == uuid
    assert response.json['state'] == 'Initial'
    # Any UUID-like form finds it.
    response = _request(app, 'GET', '%s/%s' % (PATH, uuid.upper()), headers=P1)
    assert response.status_int == 200
    response = _request(app, 'GET', PATH + '/not-a-uuid', headers=P1)
    assert response.status_int == 400
    response = _request(app, 'GET', '%s/%s' % (PATH, MISSING), headers=P1)
    assert response.status_int == 404
    assert _fault(response) == 'ExtArq not found with uuid=%s' % MISSING
    response = _request(app, 'GET', '%s/%s?x=1' % (PATH, uuid), headers=P1)
    assert response.status_int == 400


def test_project_isolation(app, conductor, database, seed):
    mine = _insert(database, seed, 1, project='p1')
    theirs = _insert(database, seed, 2, project='p2', instance=INSTANCE)
    listed = _request(app, 'GET', PATH, headers=P1).json['arqs']
    assert [arq['uuid'] for arq in listed] == [mine]
    listed = _request(app, 'GET', PATH, headers=P2).json['arqs']
    assert [arq['uuid'] for arq in listed] == [theirs]
    listed = _request(app, 'GET', PATH, headers=ADMIN).json['arqs']
    assert [arq['uuid'] for arq in listed] == [mine, theirs]

    one = '%s/%s' % (PATH, theirs)
    response = _request(app, 'GET', one, headers=P1)
    assert response.status_int == 404
    assert _fault(response) == 'ExtArq not found with uuid=%s' % theirs
    assert _request(app, 'GET', one, headers=ADMIN).status_int == 200

    response = _request(app, 'GET', PATH + '?instance=' + INSTANCE, headers=P1)
    assert response.json == {'arqs': []}

    response = _request(app, 'DELETE', one, headers={**P1, **SERVICE})
    assert response.status_int == 404
    response = _request(
        app, 'DELETE', PATH + '?arqs=' + theirs, headers={**P1, **SERVICE}
    )
    assert response.status_int == 404
    assert _writes(conductor) == [False] * 4

    response = _request(
        app, 'PATCH', one, UNBIND_OPS, headers={**ADMIN, **SERVICE}
    )
    assert response.status_int == 202
    conductor.arq_unbind.assert_called_once_with(mock.ANY, [theirs])


@pytest.fixture
def real_app(conf, database):
    """The API in front of a real conductor manager (no RPC)."""
    from cyborg.conductor import binding
    from cyborg.conductor import manager as conductor_manager
    from tests.unit.api import test_api_hostile

    binder = binding.Binder('c1', 1, 60, test_api_hostile.NoAgents(),
                            lambda rows: None)
    manager = conductor_manager.ConductorManager('c1', binder=binder)
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=test_api_hostile.DirectConductor(manager)):
        yield api_app.setup_app(conf, transport=object())
    binder.stop()


def test_patch_is_scoped_by_the_conductor(real_app, database, seed):
    """Bind and unbind reach the real conductor with the caller's
    context, which limits them to the caller's project: another
    project's ARQ is not found, and stays as it was."""
    theirs = _insert(database, seed, 2, project='p2')
    one = '%s/%s' % (PATH, theirs)
    for path, body in ((one, _bind_ops()), (PATH, {theirs: UNBIND_OPS})):
        response = _request(real_app, 'PATCH', path, body,
                            headers={**P1, **SERVICE})
        assert response.status_int == 404
        assert _fault(response) == 'ExtArq not found with uuid=%s' % theirs
    stored = _request(real_app, 'GET', one, headers=P2).json
    assert (stored['state'], stored['hostname'], stored['instance_uuid']) == (
        states.INITIAL, None, None)
    # Its own project reaches it.
    response = _request(real_app, 'PATCH', PATH, {theirs: UNBIND_OPS},
                        headers={**P2, **SERVICE})
    assert response.status_int == 202


def test_list_filters(app, database, seed):
    first = _insert(
        database, seed, 1, state=states.BOUND, instance=INSTANCE, handle=0
    )
    _insert(
        database, seed, 2, state=states.BIND_STARTED, instance=OTHER_INSTANCE
    )
    failed = _insert(
        database, seed, 3, state=states.BIND_FAILED, instance=OTHER_INSTANCE
    )
    _insert(database, seed, 4)

    def uuids(query, headers=P1):
        response = _request(app, 'GET', PATH + query, headers=headers)
        assert response.status_int == 200, response.body
        return [arq['uuid'] for arq in response.json['arqs']]

    assert uuids('?instance=' + INSTANCE) == [first]
    assert uuids('?instance=' + INSTANCE.upper()) == [first]
    assert uuids('?bind_state=resolved') == [first, failed]
    for query in (
        '?instance=nope',
        '?instance=',
        '?bind_state=Bound',
        '?bind_state=',
        '?state=Bound',
        '?instance=%s&instance=%s' % (INSTANCE, INSTANCE),
    ):
        response = _request(app, 'GET', PATH + query, headers=P1)
        assert response.status_int == 400, query
    response = _request(app, 'GET', PATH + '?instance=nope', headers=P1)
    assert 'nope' in _fault(response)


def test_resolved_for_an_instance(app, database, seed):
    resolved = PATH + '?instance=%s&bind_state=resolved'
    bound = _insert(
        database, seed, 1, state=states.BOUND, instance=INSTANCE, handle=0
    )
    pending = _insert(
        database, seed, 2, state=states.BIND_STARTED, instance=INSTANCE
    )
    response = _request(app, 'GET', resolved % INSTANCE, headers=P1)
    assert response.status_int == 423
    assert response.body == b'{"error_message": "null"}'
    assert response.content_type == 'application/json'

    with database.begin() as connection:
        connection.execute(
            sa.update(models.ExtendedAcceleratorRequest)
            .where(models.ExtendedAcceleratorRequest.uuid == pending)
            .values(state=states.BIND_FAILED)
        )
    response = _request(app, 'GET', resolved % INSTANCE, headers=P1)
    assert response.status_int == 200
    assert [arq['uuid'] for arq in response.json['arqs']] == [bound, pending]

    response = _request(app, 'GET', resolved % OTHER_INSTANCE, headers=P1)
    assert response.status_int == 200
    assert response.json == {'arqs': []}


# Create


def test_create(app, conductor, database, seed):
    conductor.arq_create.return_value = [
        {
            'uuid': _uuid(1),
            'state': 'Initial',
            'device_profile_name': 'dp',
            'device_profile_group_id': 0,
            'hostname': None,
            'device_rp_uuid': None,
            'instance_uuid': None,
            'project_id': 'p1',
            'attach_handle_uuid': None,
            'attach_handle_type': None,
            'attach_handle_info': {},
            'created_at': '2026-01-01T00:00:00',
            'updated_at': None,
        }
    ]
    body = {
        'device_profile_name': 'dp',
        'device_profile_group_id': 0,
        'image_uuid': None,
    }
    response = _request(app, 'POST', PATH, body, headers=P1)
    assert response.status_int == 201
    conductor.arq_create.assert_called_once_with(mock.ANY, 'dp')
    context = conductor.arq_create.call_args[0][0]
    assert context.project_id == 'p1'
    arq = response.json['arqs'][0]
    assert arq['attach_handle_type'] == ''
    assert arq['created_at'] == '2026-01-01T00:00:00+00:00'
    assert arq['links'][0]['href'].endswith('%s/%s' % (PATH, _uuid(1)))


def test_create_and_missing_profile(real_app, database, seed):
    """The real conductor creates one ARQ per accelerator of the profile,
    and answers 404 for a profile that does not exist."""
    response = _request(real_app, 'POST', PATH, {'device_profile_name': 'dp'},
                        headers=P1)
    assert response.status_int == 201
    assert [(arq['state'], arq['device_profile_name'])
            for arq in response.json['arqs']] == [(states.INITIAL, 'dp')]
    response = _request(real_app, 'POST', PATH,
                        {'device_profile_name': 'nope'}, headers=P1)
    assert response.status_int == 404
    assert _fault(response) == 'Device Profile not found with name=nope'


def test_create_with_an_empty_profile_name_is_not_found(app, conductor):
    # Upstream answers 404 (cyborg-tempest-plugin checks it): an empty
    # name is looked up like any other and names no profile.
    conductor.arq_create.side_effect = exception.DeviceProfileNotFound(
        key='name', value='')
    response = _request(app, 'POST', PATH, {'device_profile_name': ''})
    assert response.status_int == 404
    assert conductor.arq_create.call_args.args[1] == ''


@pytest.mark.parametrize(
    'body',
    [
        {},
        {'device_profile_group_id': 0},
        [{'device_profile_name': 'dp'}],
        {'device_profile_name': 'dp', 'extra': 1},
        {'device_profile_name': 7},
        {'device_profile_name': None},
        None,
        b'{not json',
        b'',
    ],
)
def test_create_rejects(app, conductor, body):
    if body is None:
        body = b'null'
    response = _request(app, 'POST', PATH, body, headers=P1)
    assert response.status_int == 400, body
    assert not conductor.arq_create.called


def test_create_needs_a_member(app, conductor, database):
    response = _request(
        app,
        'POST',
        PATH,
        {'device_profile_name': 'dp'},
        headers={'X-Project-Id': 'p1', 'X-Roles': 'reader'},
    )
    assert response.status_int == 403
    assert not conductor.arq_create.called


# Bind and unbind


def test_both_patch_shapes_bind_the_same(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    headers = {**P1, **SERVICE}
    expected = {
        uuid: {
            'hostname': 'h1',
            'device_rp_uuid': RP,
            'instance_uuid': INSTANCE,
        }
    }
    ops = _bind_ops(rp=RP.upper(), instance=INSTANCE.upper())
    response = _request(
        app, 'PATCH', PATH, {uuid.upper(): ops}, headers=headers
    )
    assert response.status_int == 202
    assert response.body == b''
    conductor.arq_bind.assert_called_once_with(mock.ANY, expected)

    for path, body in (
        ('%s/%s' % (PATH, uuid), ops),
        # openstacksdk sends the collection's object to the member path.
        ('%s/%s' % (PATH, uuid), {uuid: ops}),
    ):
        conductor.arq_bind.reset_mock()
        response = _request(app, 'PATCH', path, body, headers=headers)
        assert response.status_int == 202
        conductor.arq_bind.assert_called_once_with(mock.ANY, expected)
    assert not conductor.arq_unbind.called


def test_unbind(app, conductor, database, seed):
    first = _insert(
        database, seed, 1, state=states.BOUND, instance=INSTANCE, handle=0
    )
    second = _insert(
        database, seed, 2, state=states.BIND_FAILED, instance=INSTANCE
    )
    response = _request(
        app,
        'PATCH',
        PATH,
        {first: UNBIND_OPS, second: UNBIND_OPS[:1]},
        headers={**P1, **SERVICE},
    )
    assert response.status_int == 202
    conductor.arq_unbind.assert_called_once_with(mock.ANY, [first, second])
    assert not conductor.arq_bind.called


def test_bind_many(app, conductor, database, seed):
    first = _insert(database, seed, 1)
    second = _insert(database, seed, 2)
    response = _request(
        app,
        'PATCH',
        PATH,
        {first: _bind_ops(), second: _bind_ops(hostname='h2')},
        headers={**P1, **SERVICE},
    )
    assert response.status_int == 202
    bindings = conductor.arq_bind.call_args[0][1]
    assert bindings[first]['hostname'] == 'h1'
    assert bindings[second]['hostname'] == 'h2'


def test_conductor_conflict_is_409(app, conductor, database, seed):
    uuid = _insert(
        database, seed, 1, state=states.BOUND, instance=INSTANCE, handle=0
    )
    conductor.arq_bind.side_effect = exception.ARQBadState(
        state='Bound', uuid=uuid, expected=['Initial', 'Unbound']
    )
    response = _request(
        app, 'PATCH', PATH, {_uuid(1): _bind_ops()}, headers={**P1, **SERVICE}
    )
    assert response.status_int == 409


def _ops_without(field):
    return [op for op in _bind_ops() if op['path'] != '/' + field]


def _ops_with(field, value):
    return [
        dict(op, value=value) if op['path'] == '/' + field else op
        for op in _bind_ops()
    ]


A = _uuid(1)
B = _uuid(2)

BAD_PATCHES = [
    ({}, 'body'),
    ([], 'body'),
    ({A: []}, 'non-empty'),
    ({A: {}}, 'array'),
    ({A: 'x'}, 'array'),
    ({A: ['x']}, 'object'),
    ({A: [{'op': 'add', 'value': 'h'}]}, "'path' is a required"),
    ({A: [{'path': '/hostname', 'value': 'h'}]}, "'op' is a required"),
    ({'not-a-uuid': _bind_ops()}, 'Expected a uuid'),
    ({A: _bind_ops()[:2] + UNBIND_OPS[2:]}, 'Every op must be add or remove'),
    (
        {A: [dict(op, op='replace') for op in _bind_ops()]},
        'Every op must be add or remove',
    ),
    (
        {A: _bind_ops() + [{'op': 'add', 'path': '/state', 'value': 'x'}]},
        'Invalid path in patch /state',
    ),
    (
        {A: UNBIND_OPS + [{'op': 'remove', 'path': 'hostname'}]},
        'Invalid path in patch hostname',
    ),
    (
        {A: [{'op': 'add', 'path': '/hostname'}] + _bind_ops()[1:]},
        'Missing value for /hostname',
    ),
    ({A: _ops_without('hostname')}, 'Fields absent in patch hostname'),
    (
        {A: _bind_ops()[:1]},
        'Fields absent in patch device_rp_uuid,instance_uuid',
    ),
    (
        {A: _ops_with('instance_uuid', None)},
        'Fields absent in patch instance_uuid',
    ),
    (
        {A: _ops_with('device_rp_uuid', 'rp')},
        'Invalid values in patch for device_rp_uuid',
    ),
    (
        {A: _ops_with('instance_uuid', 7)},
        'Invalid values in patch for instance_uuid',
    ),
    ({A: _ops_with('hostname', '')}, 'Invalid values in patch for hostname'),
    (
        {A: _ops_with('hostname', 'h' * 256)},
        'Invalid values in patch for hostname',
    ),
    (
        {A: _ops_with('hostname', ['h'])},
        'Invalid values in patch for hostname',
    ),
    ({A: _bind_ops() + _bind_ops()[:1]}, 'Duplicate path in patch /hostname'),
    ({A: _bind_ops(), B: UNBIND_OPS}, 'either bind or unbind'),
    ({A: UNBIND_OPS, B: _bind_ops()}, 'either bind or unbind'),
    (
        {A: _bind_ops(), A.replace('-', ''): _bind_ops()},
        'given more than once',
    ),
]


@pytest.mark.parametrize('body,message', BAD_PATCHES)
def test_patch_rejects(app, conductor, database, seed, body, message):
    _insert(database, seed, 1)
    _insert(database, seed, 2)
    response = _request(app, 'PATCH', PATH, body, headers={**P1, **SERVICE})
    assert response.status_int == 400, response.body
    assert message in _fault(response)
    assert _writes(conductor) == [False] * 4


@pytest.mark.parametrize(
    'path,body',
    [
        (PATH + '/not-a-uuid', _bind_ops()),
        ('%s/%s' % (PATH, A), {B: _bind_ops()}),
        ('%s/%s' % (PATH, A), {A: _bind_ops(), B: _bind_ops()}),
        ('%s/%s' % (PATH, A), []),
        ('%s/%s' % (PATH, A), 'x'),
        ('%s/%s' % (PATH, A), None),
        ('%s/%s?x=1' % (PATH, A), _bind_ops()),
        (PATH, None),
    ],
)
def test_member_patch_rejects(app, conductor, database, seed, path, body):
    _insert(database, seed, 1)
    _insert(database, seed, 2)
    data = b'null' if body is None else body
    response = _request(app, 'PATCH', path, data, headers={**P1, **SERVICE})
    assert response.status_int == 400, response.body
    assert _writes(conductor) == [False] * 4


def test_patch_needs_a_service_token_first(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    for body in (
        {uuid: _bind_ops()},
        {uuid: UNBIND_OPS},
        # Malformed bodies do not tell a caller without a token why.
        {uuid: []},
        {},
        b'{not json',
    ):
        response = _request(app, 'PATCH', PATH, body, headers=P1)
        assert response.status_int == 403, body
        assert _fault(response) == exception.ServiceTokenRequired().message
    response = _request(
        app,
        'PATCH',
        PATH,
        {uuid: _bind_ops()},
        headers={**P1, 'X-Service-Roles': 'reader'},
    )
    assert response.status_int == 403
    # Nothing validates tokens in noauth mode: an X-Service-Token with
    # roles that are no service's is still no service token.
    response = _request(
        app,
        'PATCH',
        PATH,
        {uuid: _bind_ops()},
        headers={**P1, 'X-Service-Token': 'x', 'X-Service-Roles': 'reader'},
    )
    assert response.status_int == 403
    # A service role on the user's own token is not a service token.
    response = _request(
        app,
        'PATCH',
        PATH,
        {uuid: _bind_ops()},
        headers={'X-Project-Id': 'p1', 'X-Roles': 'member,service'},
    )
    assert response.status_int == 403
    assert _writes(conductor) == [False] * 4


def test_noauth_nova_binds_with_its_service_token(app, conductor, database,
                                                  seed):
    """Nova pointed at a noauth API sends X-Service-Token and no
    X-Service-Roles: that is a service token, as no token is checked."""
    uuid = _insert(database, seed, 1)
    response = _request(app, 'PATCH', PATH, {uuid: _bind_ops()},
                        headers={**P1, 'X-Service-Token': 'nova-token'})
    assert response.status_int == 202
    assert conductor.arq_bind.called


def test_policy_comes_before_the_service_token(app, conductor):
    response = _request(
        app,
        'PATCH',
        PATH,
        b'{not json',
        headers={'X-Project-Id': 'p1', 'X-Roles': 'reader'},
    )
    assert response.status_int == 403
    assert _fault(response) == (
        'Access was denied to the following resource: cyborg:arq:update'
    )


def test_service_token_roles_come_from_config(
    app, conf, conductor, database, seed
):
    for group, opts in ksm_opts.list_auth_token_opts():
        conf.register_opts(opts, group=group)
    conf.set_override(
        'service_token_roles', ['nova_svc'], group='keystone_authtoken'
    )
    uuid = _insert(database, seed, 1)
    response = _request(
        app, 'PATCH', PATH, {uuid: _bind_ops()}, headers={**P1, **SERVICE}
    )
    assert response.status_int == 403
    response = _request(
        app,
        'PATCH',
        PATH,
        {uuid: _bind_ops()},
        headers={**P1, 'X-Service-Roles': 'reader,Nova_Svc'},
    )
    assert response.status_int == 202
    conf.clear_override('service_token_roles', group='keystone_authtoken')


def test_project_id_needs_2_1_and_an_admin(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    ops = _bind_ops() + [{'op': 'add', 'path': '/project_id', 'value': 'p9'}]
    response = _request(
        app, 'PATCH', PATH, {uuid: ops}, headers={**ADMIN, **SERVICE}
    )
    assert response.status_int == 406
    assert _fault(response) == (
        'Request not acceptable. The minimal required API version should '
        'be 2.1'
    )
    response = _request(
        app, 'PATCH', PATH, {uuid: ops}, headers={**P1, **SERVICE, **V2_1}
    )
    assert response.status_int == 403
    assert _fault(response) == (
        'Access was denied to the following resource: cyborg:arq:update'
    )
    assert _writes(conductor) == [False] * 4

    response = _request(
        app, 'PATCH', PATH, {uuid: ops}, headers={**ADMIN, **SERVICE, **V2_1}
    )
    assert response.status_int == 202
    conductor.arq_bind.assert_called_once_with(
        mock.ANY,
        {
            uuid: {
                'hostname': 'h1',
                'device_rp_uuid': RP,
                'instance_uuid': INSTANCE,
                'project_id': 'p9',
            }
        },
    )

    # A null project_id means the default, as if it were not given.
    conductor.arq_bind.reset_mock()
    ops[-1]['value'] = None
    response = _request(
        app, 'PATCH', PATH, {uuid: ops}, headers={**ADMIN, **SERVICE, **V2_1}
    )
    assert response.status_int == 202
    binding = conductor.arq_bind.call_args[0][1][uuid]
    assert 'project_id' not in binding

    ops[-1]['value'] = 5
    response = _request(
        app, 'PATCH', PATH, {uuid: ops}, headers={**ADMIN, **SERVICE, **V2_1}
    )
    assert response.status_int == 400
    assert 'project_id' in _fault(response)


# Delete


def test_delete_by_uuids(app, conductor, database, seed):
    first = _insert(database, seed, 1)
    second = _insert(database, seed, 2)
    response = _request(
        app,
        'DELETE',
        '%s?arqs=%s,%s,%s' % (PATH, first, second, first),
        headers=P1,
    )
    assert response.status_int == 204
    assert response.body == b''
    conductor.arq_delete.assert_called_once_with(
        mock.ANY, uuids=[first, second]
    )


def test_delete_by_path(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    response = _request(
        app, 'DELETE', '%s/%s' % (PATH, uuid.upper()), headers=P1
    )
    assert response.status_int == 204
    conductor.arq_delete.assert_called_once_with(mock.ANY, uuids=[uuid])


def test_delete_missing_deletes_nothing(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    response = _request(
        app, 'DELETE', '%s?arqs=%s,%s' % (PATH, uuid, MISSING), headers=P1
    )
    assert response.status_int == 404
    assert _fault(response) == 'ExtArq not found with uuid=%s' % MISSING
    assert not conductor.arq_delete.called


def test_delete_bound_needs_a_service_token(app, conductor, database, seed):
    free = _insert(database, seed, 1)
    bound = _insert(
        database, seed, 2, state=states.BOUND, instance=INSTANCE, handle=0
    )
    query = '%s?arqs=%s,%s' % (PATH, free, bound)
    response = _request(app, 'DELETE', query, headers=P1)
    assert response.status_int == 403
    assert _fault(response) == (
        'ARQ %s is bound to instance %s. Use the Compute API to manage '
        'instance accelerators.' % (bound, INSTANCE)
    )
    assert not conductor.arq_delete.called
    response = _request(app, 'DELETE', query, headers={**P1, **SERVICE})
    assert response.status_int == 204
    conductor.arq_delete.assert_called_once_with(mock.ANY, uuids=[free, bound])


def test_delete_by_instance(app, conductor, database, seed):
    query = PATH + '?instance=' + INSTANCE.upper()
    response = _request(app, 'DELETE', query, headers=P1)
    assert response.status_int == 403
    assert _fault(response) == exception.ServiceTokenRequired().message
    assert not conductor.arq_delete.called
    # Idempotent: the conductor is asked even when nothing is visible.
    response = _request(app, 'DELETE', query, headers={**P1, **SERVICE})
    assert response.status_int == 204
    conductor.arq_delete.assert_called_once_with(
        mock.ANY, instance_uuid=INSTANCE
    )


@pytest.mark.parametrize(
    'path',
    [
        PATH,
        '%s?arqs=%s&instance=%s' % (PATH, A, INSTANCE),
        '%s?arqs=' % PATH,
        '%s?arqs=%s,' % (PATH, A),
        '%s?arqs=%s,nope' % (PATH, A),
        '%s?instance=nope' % PATH,
        '%s?value=%s' % (PATH, A),
        '%s/%s?arqs=%s' % (PATH, A, A),
        '%s/%s?instance=%s' % (PATH, A, INSTANCE),
        '%s/nope' % PATH,
    ],
)
def test_delete_rejects(app, conductor, database, seed, path):
    _insert(database, seed, 1)
    response = _request(app, 'DELETE', path, headers={**P1, **SERVICE})
    assert response.status_int == 400, path
    assert not conductor.arq_delete.called


def test_delete_needs_a_member(app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    response = _request(
        app,
        'DELETE',
        '%s/%s' % (PATH, uuid),
        headers={'X-Project-Id': 'p1', 'X-Roles': 'reader'},
    )
    assert response.status_int == 403
    assert not conductor.arq_delete.called


def test_unsupported_methods(app):
    response = _request(app, 'POST', '%s/%s' % (PATH, A))
    assert response.status_int == 405
    assert response.headers['Allow'] == 'DELETE, GET, PATCH'


# A write the conductor did, whose answer was lost ------------------------


def _set_arq(database, uuid, **values):
    table = models.ExtendedAcceleratorRequest.__table__
    with database.begin() as connection:
        connection.execute(
            sa.update(table).where(table.c.uuid == uuid).values(**values))


def _delete_arqs(database, *uuids):
    table = models.ExtendedAcceleratorRequest.__table__
    with database.begin() as connection:
        connection.execute(sa.delete(table).where(table.c.uuid.in_(uuids)))


def _lost_answer(do=lambda: None):
    """A conductor call that does ``do`` (the conductor's write), then
    times out as when its answer was lost."""
    def call(*args, **kwargs):
        do()
        raise messaging.MessagingTimeout('no answer')
    return call


def _bound(database, uuid, instance=INSTANCE):
    return lambda: _set_arq(database, uuid, state=states.BOUND,
                            hostname='h1', device_rp_uuid=RP,
                            instance_uuid=instance)


@pytest.mark.parametrize('bound_to,status', [
    (INSTANCE, 202), (OTHER_INSTANCE, 503), (None, 503)])
def test_a_bind_done_whose_answer_was_lost_is_accepted(
        app, conductor, database, seed, bound_to, status):
    uuid = _insert(database, seed, 1)
    conductor.arq_bind.side_effect = _lost_answer(
        _bound(database, uuid, bound_to) if bound_to else lambda: None)
    response = _request(app, 'PATCH', PATH, {uuid: _bind_ops()},
                        headers={**P1, **SERVICE})
    assert response.status_int == status
    if status == 503:
        assert response.headers['Retry-After'] == '5'


def test_a_bind_answered_503_when_the_database_cannot_tell(
        app, conductor, database, seed):
    uuid = _insert(database, seed, 1)
    conductor.arq_bind.side_effect = _lost_answer(_bound(database, uuid))
    with mock.patch('cyborg.db.arqs.arq_list',
                    side_effect=db_exc.DBConnectionError('gone')):
        response = _request(app, 'PATCH', PATH, {uuid: _bind_ops()},
                            headers={**P1, **SERVICE})
    assert response.status_int == 503
    assert 'conductor' in _fault(response)


@pytest.mark.parametrize('done,status', [(True, 202), (False, 503)])
def test_an_unbind_done_whose_answer_was_lost_is_accepted(
        app, conductor, database, seed, done, status):
    uuid = _insert(database, seed, 1, state=states.BOUND,
                   instance=INSTANCE, handle=0)
    conductor.arq_unbind.side_effect = _lost_answer(
        (lambda: _set_arq(database, uuid, state=states.UNBOUND,
                          hostname=None, device_rp_uuid=None,
                          instance_uuid=None, attach_handle_id=None))
        if done else lambda: None)
    response = _request(app, 'PATCH', PATH, {uuid: UNBIND_OPS},
                        headers={**P1, **SERVICE})
    assert response.status_int == status


@pytest.mark.parametrize('done,status', [(True, 204), (False, 503)])
def test_a_deletion_done_whose_answer_was_lost_is_done(
        app, conductor, database, seed, done, status):
    first = _insert(database, seed, 1)
    second = _insert(database, seed, 2, state=states.BOUND,
                     instance=INSTANCE, handle=0)
    conductor.arq_delete.side_effect = _lost_answer(
        (lambda: _delete_arqs(database, first)) if not done
        else (lambda: _delete_arqs(database, first, second)))
    response = _request(app, 'DELETE', '%s?arqs=%s,%s' % (PATH, first,
                                                          second),
                        headers={**P1, **SERVICE})
    assert response.status_int == status
    # By instance: done once the instance has none left.
    conductor.arq_delete.side_effect = _lost_answer(
        lambda: _delete_arqs(database, second))
    response = _request(app, 'DELETE', PATH + '?instance=' + INSTANCE,
                        headers={**P1, **SERVICE})
    assert response.status_int == 204


def test_a_creation_whose_answer_was_lost_is_answered_503(
        app, conductor, database, seed):
    # Its ARQs' uuids are unknown to the caller: the conductors delete
    # them as abandoned ([conductor] abandoned_arq_timeout).
    conductor.arq_create.side_effect = _lost_answer()
    response = _request(app, 'POST', PATH, {'device_profile_name': 'dp'},
                        headers=P1)
    assert response.status_int == 503
