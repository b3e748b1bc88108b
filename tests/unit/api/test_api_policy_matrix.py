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

"""Every policy proven at its endpoint, for every persona.

Each case sends one request through the assembled WSGI app (noauth mode,
identity from headers, a mocked conductor, a seeded database of each
kind: SQLite, PostgreSQL, MariaDB) and
asserts its status; a refusal also asserts which check refused it (the
rule named in the fault, or the service-token check). The expected
outcomes below are the specification, written out by hand from the
defaults in ``cyborg/policies`` and what the cyborg-tempest-plugin API and
SRBAC tests expect; they are not derived from the registered rules, so
removing an ``authorize`` call, naming the wrong rule, or loosening a
default makes at least one case fail.
"""

import dataclasses
import datetime
import json
import shutil
from unittest import mock

from oslo_policy import policy as oslo_policy
import pytest
import sqlalchemy as sa
import webob

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.api import app as api_app
from cyborg.api.controllers import root
from cyborg.api.controllers import routing
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models
from cyborg.domain import arq_states as states
from tests import factories
from tests.unit.conftest import DATABASES
from tests.unit.conftest import new_database

P1 = 'p1'
P2 = 'p2'

# Identity headers of each persona; noauth adds Keystone's implied roles
# (admin -> manager -> member -> reader), as a real token carries them.
PERSONAS = {
    'admin': {'X-Project-Id': P1, 'X-Roles': 'admin'},
    'manager': {'X-Project-Id': P1, 'X-Roles': 'manager'},
    'member': {'X-Project-Id': P1, 'X-Roles': 'member'},
    'reader': {'X-Project-Id': P1, 'X-Roles': 'reader'},
    # A member of another project: the rules pass (their target is the
    # caller's own project); the code hides project p1's ARQs from it.
    'other_member': {'X-Project-Id': P2, 'X-Roles': 'member'},
    # A project-scoped token with no role on the project (an empty
    # X-Roles: without the header noauth makes the caller an admin).
    'no_roles': {'X-Project-Id': P1, 'X-Roles': ''},
    # A system-scoped admin token: every rule is project scoped.
    'system_admin': {
        'X-Project-Id': '',
        'X-Roles': 'admin',
        'OpenStack-System-Scope': 'all',
    },
    # A service user's own token with the service role (tempest's
    # service_user): the role, not a service token.
    'service_role': {'X-Project-Id': P1, 'X-Roles': 'service'},
    # Nova acting for a member: the user's token plus Nova's service token.
    'nova_for_member': {
        'X-Project-Id': P1,
        'X-Roles': 'member',
        'X-Service-Roles': 'service',
    },
    # Nova acting for a reader: a service token grants no policy.
    'nova_for_reader': {
        'X-Project-Id': P1,
        'X-Roles': 'reader',
        'X-Service-Roles': 'service',
    },
}

# Who each default admits (with Keystone's implied roles).
PROJECT_READERS = frozenset(
    ['admin', 'manager', 'member', 'reader', 'other_member',
     'nova_for_member', 'nova_for_reader'])
PROJECT_MEMBERS_OR_SERVICE = frozenset(
    ['admin', 'manager', 'member', 'other_member', 'service_role',
     'nova_for_member'])
MANAGERS = frozenset(['admin', 'manager'])
ADMINS = frozenset(['admin'])

# The spec: rule -> personas it admits. Every endpoint rule registered
# must be here, and every one must be exercised by a case below.
RULES = {
    'cyborg:device_profile:get_all': PROJECT_READERS,
    'cyborg:device_profile:get_one': PROJECT_READERS,
    'cyborg:device_profile:create': ADMINS,
    'cyborg:device_profile:delete': ADMINS,
    'cyborg:device_profile:update': ADMINS,
    'cyborg:arq:get_all': PROJECT_READERS,
    'cyborg:arq:get_one': PROJECT_READERS,
    'cyborg:arq:create': PROJECT_MEMBERS_OR_SERVICE,
    'cyborg:arq:update': PROJECT_MEMBERS_OR_SERVICE,
    'cyborg:arq:delete': PROJECT_MEMBERS_OR_SERVICE,
    'cyborg:device:get_all': MANAGERS,
    'cyborg:device:get_one': MANAGERS,
    'cyborg:device:disable': ADMINS,
    'cyborg:device:enable': ADMINS,
    'cyborg:device:set_partitions': ADMINS,
    'cyborg:deployable:get_all': MANAGERS,
    'cyborg:deployable:get_one': MANAGERS,
    'cyborg:deployable:program': ADMINS,
    'cyborg:attribute:get_all': MANAGERS,
    'cyborg:attribute:get_one': MANAGERS,
    'cyborg:attribute:create': ADMINS,
    'cyborg:attribute:delete': ADMINS,
    'cyborg:metrics:get': ADMINS | {'service_role'},
    'cyborg:device_taint_rule:get_all': ADMINS,
    'cyborg:device_taint_rule:get_one': ADMINS,
    'cyborg:device_taint_rule:create': ADMINS,
    'cyborg:device_taint_rule:delete': ADMINS,
    # The project in the path is P1: a reader of another project is not
    # one of its readers.
    'cyborg:quota:get_one': PROJECT_READERS - {'other_member'},
}

DP_UUID = '66666666-6666-4666-8666-666666666666'
DEVICE_UUID = '77777777-7777-4777-8777-777777777777'
DEPLOYABLE_UUID = '88888888-8888-4888-8888-888888888888'
ATTRIBUTE_UUID = '99999999-9999-4999-8999-999999999999'
RP = '11111111-1111-4111-8111-111111111111'
TAINT_RULE_UUID = '12121212-1212-4121-8121-121212121212'
V2_8 = {'OpenStack-API-Version': 'accelerator 2.8'}
V2_9 = {'OpenStack-API-Version': 'accelerator 2.9'}
V2_10 = {'OpenStack-API-Version': 'accelerator 2.10'}
INSTANCE = '22222222-2222-4222-8222-222222222222'
ARQ = 'aaaaaaaa-0000-4000-8000-000000000001'  # p1, Initial
BOUND_ARQ = 'aaaaaaaa-0000-4000-8000-000000000002'  # p1, bound to INSTANCE
P2_ARQ = 'aaaaaaaa-0000-4000-8000-000000000003'  # p2, Initial
CREATED = datetime.datetime(2026, 1, 2, 3, 4, 5)

ARQS = '/v2/accelerator_requests'
BIND_OPS = [
    {'op': 'add', 'path': '/hostname', 'value': 'h1'},
    {'op': 'add', 'path': '/device_rp_uuid', 'value': RP},
    {'op': 'add', 'path': '/instance_uuid', 'value': INSTANCE},
]

# Why a refusal happened: the policy (the fault names the rule), or one of
# the service-token checks of the ARQ controller.
POLICY = 'policy'
SERVICE_TOKEN = 'service token'
BOUND = 'bound to an instance'


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    rule: str
    allowed_status: int
    body: object = None
    # Where a service token is needed: which check refuses the personas
    # the policy admits but who bring none (SERVICE_TOKEN or BOUND). The
    # policy is checked first.
    needs_service_token: str | None = None
    # Outcomes of personas the policy admits that are decided by other
    # checks (project isolation), persona -> status.
    overrides: dict = dataclasses.field(default_factory=dict)
    # Headers sent with the persona's (a microversion).
    headers: dict = dataclasses.field(default_factory=dict)


CASES = [
    Case('list device profiles', 'GET', '/v2/device_profiles',
         'cyborg:device_profile:get_all', 200),
    Case('show a device profile', 'GET', '/v2/device_profiles/' + DP_UUID,
         'cyborg:device_profile:get_one', 200),
    Case('create a device profile', 'POST', '/v2/device_profiles',
         'cyborg:device_profile:create', 201,
         body=[{'name': 'dp2', 'groups': [{'resources:FPGA': '1'}]}]),
    Case('delete device profiles by name', 'DELETE',
         '/v2/device_profiles?value=dp', 'cyborg:device_profile:delete',
         204),
    Case('delete a device profile', 'DELETE',
         '/v2/device_profiles/' + DP_UUID, 'cyborg:device_profile:delete',
         204),
    Case('list ARQs', 'GET', ARQS, 'cyborg:arq:get_all', 200),
    # Another project's ARQ is not found, whatever the caller's role.
    Case('show an ARQ', 'GET', ARQS + '/' + ARQ, 'cyborg:arq:get_one', 200,
         overrides={'other_member': 404}),
    Case('create ARQs', 'POST', ARQS, 'cyborg:arq:create', 201,
         body={'device_profile_name': 'dp'}),
    Case('bind ARQs', 'PATCH', ARQS, 'cyborg:arq:update', 202,
         body={ARQ: BIND_OPS}, needs_service_token=SERVICE_TOKEN),
    Case('bind an ARQ', 'PATCH', ARQS + '/' + ARQ, 'cyborg:arq:update', 202,
         body=BIND_OPS, needs_service_token=SERVICE_TOKEN),
    Case('delete ARQs by uuid', 'DELETE', ARQS + '?arqs=' + ARQ,
         'cyborg:arq:delete', 204, overrides={'other_member': 404}),
    Case('delete an ARQ', 'DELETE', ARQS + '/' + ARQ, 'cyborg:arq:delete',
         204, overrides={'other_member': 404}),
    Case('delete a bound ARQ by uuid', 'DELETE', ARQS + '?arqs=' + BOUND_ARQ,
         'cyborg:arq:delete', 204, needs_service_token=BOUND,
         overrides={'other_member': 404}),
    Case('delete the ARQs of an instance', 'DELETE',
         ARQS + '?instance=' + INSTANCE, 'cyborg:arq:delete', 204,
         needs_service_token=SERVICE_TOKEN),
    Case('list devices', 'GET', '/v2/devices', 'cyborg:device:get_all', 200),
    Case('show a device', 'GET', '/v2/devices/' + DEVICE_UUID,
         'cyborg:device:get_one', 200),
    Case('disable a device', 'POST', '/v2/devices/%s/disable' % DEVICE_UUID,
         'cyborg:device:disable', 204),
    Case('enable a device', 'POST', '/v2/devices/%s/enable' % DEVICE_UUID,
         'cyborg:device:enable', 204),
    Case('set a device\'s partitions', 'PUT',
         '/v2/devices/%s/partitions' % DEVICE_UUID,
         'cyborg:device:set_partitions', 202, headers=V2_10,
         body={'profile': '1g.18gb', 'pinned': True}),
    Case('list deployables', 'GET', '/v2/deployables',
         'cyborg:deployable:get_all', 200),
    Case('show a deployable', 'GET', '/v2/deployables/' + DEPLOYABLE_UUID,
         'cyborg:deployable:get_one', 200),
    Case('program a deployable', 'PATCH',
         '/v2/deployables/%s/program' % DEPLOYABLE_UUID,
         'cyborg:deployable:program', 200,
         body=[{'op': 'replace', 'path': '/program',
                'value': [{'image_uuid': DP_UUID}]}]),
    Case('list attributes', 'GET', '/v2/attributes',
         'cyborg:attribute:get_all', 200),
    Case('show an attribute', 'GET', '/v2/attributes/' + ATTRIBUTE_UUID,
         'cyborg:attribute:get_one', 200),
    Case('create an attribute', 'POST', '/v2/attributes',
         'cyborg:attribute:create', 201,
         body={'deployable_id': 1, 'key': 'k2', 'value': 'v'}),
    Case('delete an attribute', 'DELETE', '/v2/attributes/' + ATTRIBUTE_UUID,
         'cyborg:attribute:delete', 204),
    Case('update a device profile', 'PATCH',
         '/v2/device_profiles/' + DP_UUID, 'cyborg:device_profile:update',
         200, headers=V2_9, body={'enabled': False}),
    Case('read the metrics', 'GET', '/metrics', 'cyborg:metrics:get', 200),
    Case('list device taint rules', 'GET', '/v2/device_taint_rules',
         'cyborg:device_taint_rule:get_all', 200, headers=V2_8),
    Case('show a device taint rule', 'GET',
         '/v2/device_taint_rules/' + TAINT_RULE_UUID,
         'cyborg:device_taint_rule:get_one', 200, headers=V2_8),
    Case('create a device taint rule', 'POST', '/v2/device_taint_rules',
         'cyborg:device_taint_rule:create', 201, headers=V2_8,
         body={'selector': {'host': 'h1'},
               'taint': {'key': 'drain', 'effect': 'None'}}),
    Case('delete a device taint rule', 'DELETE',
         '/v2/device_taint_rules/' + TAINT_RULE_UUID,
         'cyborg:device_taint_rule:delete', 204, headers=V2_8),
    Case('show a project\'s quotas', 'GET', '/v2/quotas/' + P1,
         'cyborg:quota:get_one', 200, headers=V2_9),
]


def expected(case: Case, persona: str) -> tuple[int, str | None]:
    """(status, why refused) of ``case`` for ``persona``."""
    if persona not in RULES[case.rule]:
        return 403, POLICY
    if persona in case.overrides:
        return case.overrides[persona], None
    if case.needs_service_token and 'X-Service-Roles' not in PERSONAS[
            persona]:
        return 403, case.needs_service_token
    return case.allowed_status, None


MATRIX = [
    pytest.param(case, persona, id='%s-%s' % (case.name.replace(' ', '_'),
                                              persona))
    for case in CASES for persona in PERSONAS
]


def _arq_view(uuid, project_id):
    return {
        'uuid': uuid, 'state': states.INITIAL, 'device_profile_name': 'dp',
        'device_profile_group_id': 0, 'hostname': None,
        'device_rp_uuid': None, 'instance_uuid': None,
        'project_id': project_id, 'attach_handle_type': None,
        'attach_handle_uuid': None, 'attach_handle_info': None,
        'created_at': CREATED, 'updated_at': None, 'bind_error': None,
    }


@pytest.fixture
def conductor():
    conductor = mock.Mock()
    conductor.arq_create.return_value = [_arq_view(ARQ, P1)]
    conductor.device_profile_create.return_value = {
        'uuid': DP_UUID, 'name': 'dp2', 'description': None,
        'groups': [{'resources:FPGA': '1'}], 'created_at': CREATED,
        'updated_at': None,
    }
    conductor.taint_rule_create.return_value = {'uuid': TAINT_RULE_UUID}
    conductor.device_profile_update.return_value = dict(
        conductor.device_profile_create.return_value, enabled=False)
    conductor.attribute_create.return_value = {
        'uuid': ATTRIBUTE_UUID, 'deployable_id': 1, 'key': 'k2',
        'value': 'v', 'created_at': CREATED, 'updated_at': None,
    }
    return conductor


def _seed(engine) -> None:
    """One of each resource and ARQs of two projects."""
    migration.upgrade(engine=engine)
    with engine.begin() as connection:
        profile = factories.create_test_device_profile(
            engine=connection, uuid=DP_UUID, name='dp', created_at=CREATED)
        device = factories.create_test_device(
            connection, uuid=DEVICE_UUID, type='FPGA', vendor='0x8086',
            model='m', hostname='h1', address='0000:0c:00.0',
            created_at=CREATED)
        deployable = factories.create_test_deployable(
            connection, uuid=DEPLOYABLE_UUID, name='d', num_accelerators=1,
            device_id=device['id'], rp_uuid=RP, created_at=CREATED)
        connection.execute(sa.insert(models.TAINT_RULES).values(
            uuid=TAINT_RULE_UUID, selector='{"host": "h1"}', key='drain',
            effect='None', created_at=CREATED))
        factories.create_test_attribute(
            connection, uuid=ATTRIBUTE_UUID, deployable_id=deployable['id'],
            key='k', value='v', created_at=CREATED)
        for uuid, project, instance in ((ARQ, P1, None),
                                        (BOUND_ARQ, P1, INSTANCE),
                                        (P2_ARQ, P2, None)):
            values = {}
            if instance:
                values = {'hostname': 'h1', 'device_rp_uuid': RP,
                          'instance_uuid': instance}
            factories.create_test_arq(
                connection, uuid=uuid,
                state=states.BOUND if instance else states.INITIAL,
                project_id=project, device_profile_id=profile['id'],
                device_profile_group_id=0, created_at=CREATED, **values)
    engine.dispose()


@pytest.fixture(scope='module')
def template(tmp_path_factory):
    """A seeded SQLite database, built once; each test gets a copy."""
    path = tmp_path_factory.mktemp('policy_matrix') / 'template.sqlite'
    _seed(sa.create_engine('sqlite:///%s' % path))
    return path


def _seeded_on_server(kind, request) -> str:
    """A seeded database on the session's ``kind`` server, built once
    for the module and shared by its tests: the API only reads (the
    conductor, which does every write, is a mock)."""
    url = new_database(kind, request, 'policy_matrix')
    _seed(sa.create_engine(url))
    return url


@pytest.fixture(scope='module')
def seeded_postgresql(request):
    return _seeded_on_server('postgresql', request)


@pytest.fixture(scope='module')
def seeded_mariadb(request):
    return _seeded_on_server('mariadb', request)


@pytest.fixture(params=DATABASES)
def seeded(request, conf, tmp_path):
    """The seeded database of each kind, configured for the DB API."""
    if request.param == 'sqlite':
        path = tmp_path / 'db.sqlite'
        shutil.copyfile(request.getfixturevalue('template'), path)
        url = 'sqlite:///%s' % path
    else:
        url = request.getfixturevalue('seeded_' + request.param)
    conf.set_override('connection', url, group='database')
    db_api.configure(conf)
    yield
    db_api.get_engine().dispose()


@pytest.fixture
def app(conf, conductor, seeded):
    conf.set_override('auth_strategy', 'noauth', group='api')
    conf.set_override('api_enabled', True, group='metrics')
    with mock.patch(
        'cyborg.conductor.rpcapi.ConductorAPI', return_value=conductor
    ):
        return api_app.setup_app(conf, transport=object())


def _request(app, case: Case, headers: dict):
    request = webob.Request.blank(case.path, method=case.method,
                                  headers=headers)
    if case.body is not None:
        request.body = json.dumps(case.body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _faultstring(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


@pytest.mark.parametrize('case,persona', MATRIX)
def test_endpoint_policy(app, conductor, case, persona):
    status, refused_by = expected(case, persona)
    response = _request(app, case, dict(PERSONAS[persona], **case.headers))
    assert response.status_int == status, response.body
    if refused_by == POLICY:
        assert _faultstring(response) == (
            'Access was denied to the following resource: %s' % case.rule)
    elif refused_by == SERVICE_TOKEN:
        assert _faultstring(response).startswith(
            'This operation requires a service token.')
    elif refused_by == BOUND:
        assert _faultstring(response) == (
            'ARQ %s is bound to instance %s. Use the Compute API to manage '
            'instance accelerators.' % (BOUND_ARQ, INSTANCE))
    if refused_by is not None:
        assert conductor.mock_calls == []


def _show_arqs(app, persona):
    request = webob.Request.blank(ARQS, headers=PERSONAS[persona])
    return {arq['uuid'] for arq in request.get_response(app).json['arqs']}


def test_arq_list_is_scoped_to_the_project(app):
    # The read rules pass for any project's reader: the list itself must
    # keep projects apart. Admins see every project's ARQs.
    assert _show_arqs(app, 'reader') == {ARQ, BOUND_ARQ}
    assert _show_arqs(app, 'other_member') == {P2_ARQ}
    assert _show_arqs(app, 'admin') == {ARQ, BOUND_ARQ, P2_ARQ}


def test_every_registered_rule_is_in_the_matrix():
    registered = {rule.name for rule in policies.list_rules()
                  if rule.name.startswith('cyborg:')}
    assert registered == set(RULES)
    assert {case.rule for case in CASES} == set(RULES)


def _route(method: str, path: str):
    """The handler ``method path`` dispatches to (404/405 raise)."""
    segments = path.split('?')[0].split('/')[1:]
    if segments == ['metrics']:
        return root.RootController().metrics, []
    assert segments[0] == 'v2'
    resource = root.RootController().collections[segments[1]]
    return routing.dispatch(resource, method, segments[2:])


def test_every_rule_documents_endpoints_that_exist():
    """No rule for an endpoint that does not exist (yet)."""
    for rule in policies.list_rules():
        if not rule.name.startswith('cyborg:'):
            continue
        for operation in rule.operations:
            path = operation['path'].replace('{', '').replace('}', '')
            handler, _ = _route(operation['method'], path)
            assert callable(handler), (rule.name, operation)


def test_every_case_is_a_documented_operation_of_its_rule():
    rules = {rule.name: rule for rule in policies.list_rules()}
    for case in CASES:
        handler, _ = _route(case.method, case.path)
        documented = [
            _route(op['method'],
                   op['path'].replace('{', '').replace('}', ''))[0].__func__
            for op in rules[case.rule].operations
        ]
        assert handler.__func__ in documented, case.name


def test_invalid_scope_is_a_refusal(conf):
    """Older oslo.policy releases (requirements.txt allows them) raise
    InvalidScope for a system-scoped token instead of returning False."""
    authorizer = policies.Authorizer(policies.get_enforcer(conf))
    scope_error = oslo_policy.InvalidScope('cyborg:device:get_all',
                                           ['project'], 'system')
    context = cyborg_context.RequestContext(
        roles=['admin'], project_id='', system_scope='all')
    with mock.patch.object(authorizer.enforcer, 'authorize',
                           side_effect=scope_error):
        with pytest.raises(exception.PolicyNotAuthorized):
            authorizer.authorize('cyborg:device:get_all', context)
