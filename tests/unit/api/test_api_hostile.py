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

"""Hostile requests against the assembled API with a real conductor
endpoint and database: every one answers 4xx with the fault envelope,
the version headers and a request id, and changes nothing.

The conductor's RPC is replaced by direct calls to a real
:class:`ConductorManager`, so writes that get through reach the database
as they would in a deployment: each test runs on SQLite, PostgreSQL and
MariaDB (``CYBORG_TEST_DATABASES`` selects), whose limits differ.
"""

import json
import logging
from unittest import mock
import urllib.parse

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
import webob

from cyborg.accelerator.drivers.fake import driver as fake_driver
from cyborg.api import app as api_app
from cyborg.api import errors
from cyborg.api import validation
from cyborg.api.controllers import root
from cyborg.api.schemas import arq as arq_schema
from cyborg.api.schemas import attribute as attribute_schema
from cyborg.api.schemas import device_profile as profile_schema
from cyborg.conductor import binding
from cyborg.conductor import manager as conductor_manager
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from tests.unit import conftest
from tests.unit import fakes

ARQ = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
DEVICE = '11111111-2222-4333-8444-555555555555'
PROFILE = {'name': 'dp', 'groups': [{'resources:FPGA': '1'}]}


class DirectConductor:
    """The conductor RPC API as direct calls to a real manager."""

    def __init__(self, manager):
        self._manager = manager

    def __getattr__(self, name):
        method = getattr(self._manager, name)

        def call(context, *args, **kwargs):
            try:
                return method(context, *args, **kwargs)
            except messaging.ExpectedException as e:
                raise e.exc_info[1]
        return call


class NoAgents:
    """Agents that are never needed: the fake device's PCI handles need
    no preparation."""

    def prepare(self, context, claim):
        raise AssertionError('nothing to prepare')

    release = prepare


@pytest.fixture
def api(conf, database):
    binder = binding.Binder('c1', 1, 60, NoAgents(), lambda rows: None)
    manager = conductor_manager.ConductorManager(
        'c1', binder=binder,
        arq_limits=conductor_manager.ARQLimits.from_conf(conf))
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=DirectConductor(manager)):
        app = api_app.setup_app(conf, transport=object())
    response = _request(app, 'POST', '/v2/device_profiles', PROFILE)
    assert response.status_int == 201
    yield app
    binder.stop()


def _request(app, method, path, body=None, query='', headers=None,
             content_type='application/json'):
    request = webob.Request.blank(path, method=method)
    request.environ['QUERY_STRING'] = query
    if body is not None:
        request.body = (body if isinstance(body, bytes)
                        else json.dumps(body).encode())
        request.content_type = content_type
    for name, value in (headers or {}).items():
        request.headers[name] = value
    return _served(app, request)


def _served(app, request):
    """The response of ``app``, with the log records of serving it."""
    records = fakes.LogRecords()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(records)
    try:
        response = request.get_response(app)
    finally:
        root.removeHandler(records)
        root.setLevel(level)
    response.log_records = records.records
    return response


#: How the statements that change no row begin.
_READS = ('SELECT', 'SHOW', 'BEGIN')


class Snapshots:
    """Every row of every table of the test's database, read again only
    after a statement that may have written.

    Reading all 20-odd tables before and after each of the thousands of
    hostile requests was most of this module's time. Every statement of
    the API and of the in-process conductor goes through the one engine
    watched here, so while none but SELECTs went through it since the
    last snapshot, no row can have changed and that snapshot still
    holds. Anything else (an INSERT, a DELETE, a SAVEPOINT, a SET...)
    makes the next snapshot read the tables again.
    """

    def __init__(self, engine: sa.engine.Engine):
        self._engine = engine
        self._statements = 0  # statements that may write, so far
        self._last: tuple[int, dict] | None = None
        sa.event.listen(engine, 'before_cursor_execute', self._seen)

    def _seen(self, _conn, _cursor, statement, _params, _context,
              _executemany) -> None:
        # BEGIN (sent as a statement on SQLite) and SHOW change no row.
        if not statement.lstrip().upper().startswith(_READS):
            self._statements += 1

    def __call__(self) -> dict:
        if self._last is not None and self._last[0] == self._statements:
            return self._last[1]
        with self._engine.connect() as connection:
            rows = {name: sorted(map(repr, connection.execute(
                        sa.select(models.Base.metadata.tables[name]))))
                    for name in conftest._TABLES}
        self._last = (self._statements, rows)
        return rows

    def close(self) -> None:
        sa.event.remove(self._engine, 'before_cursor_execute', self._seen)


@pytest.fixture
def snapshot(database):
    """A callable giving every row of every table (see
    :class:`Snapshots`)."""
    snapshots = Snapshots(database)
    yield snapshots
    snapshots.close()


def _assert_refused(response, statuses=range(400, 500)):
    assert response.status_int in statuses, (response.status,
                                             response.body[:300])
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client'
    assert 'Traceback' not in response.text
    assert response.headers['x-openstack-request-id'].startswith('req-')
    assert response.headers['OpenStack-API-Minimum-Version'] == '2.0'
    assert response.headers['OpenStack-API-Maximum-Version']
    assert response.headers['OpenStack-API-Version'].startswith(
        'accelerator 2.')
    assert 'Server' not in response.headers
    _assert_logged_once(response)


ACCESS_LOG = 'cyborg.api.request_log'


def _explained(response) -> list:
    """The log records of ``response`` but its access line."""
    return [r for r in response.log_records if r.name != ACCESS_LOG]


def _assert_logged_once(response):
    """A refused request logs its access line and at most one INFO or
    WARNING line, never an error or a traceback."""
    access = [r for r in response.log_records if r.name == ACCESS_LOG]
    assert [r.levelno for r in access] == [logging.INFO]
    assert ' status: %d ' % response.status_int in access[0].getMessage()
    records = _explained(response)
    assert len(records) <= 1, [r.getMessage() for r in records]
    for record in response.log_records:
        assert record.levelno < logging.ERROR, record.getMessage()
        assert record.exc_info is None and not record.exc_text
        assert 'Traceback' not in record.getMessage()
        # One line: what the client sent cannot forge another.
        assert '\n' not in record.getMessage()
        assert '\r' not in record.getMessage()


# Routes that read a body, with a valid body each.
BODY_ROUTES = [
    ('POST', '/v2/device_profiles', [dict(PROFILE, name='other')]),
    ('POST', '/v2/accelerator_requests', {'device_profile_name': 'dp'}),
    ('PATCH', '/v2/accelerator_requests',
     {ARQ: [{'op': 'add', 'path': '/hostname', 'value': 'h'}]}),
    ('PATCH', '/v2/accelerator_requests/' + ARQ,
     [{'op': 'add', 'path': '/hostname', 'value': 'h'}]),
    ('POST', '/v2/attributes',
     {'deployable_id': 1, 'key': 'k', 'value': 'v'}),
]
# Routes that take no body: a hostile one must not break them either.
NO_BODY_ROUTES = [
    ('POST', '/v2/devices/%s/disable' % DEVICE),
    ('POST', '/v2/devices/%s/enable' % DEVICE),
    ('DELETE', '/v2/accelerator_requests'),
    ('GET', '/v2/device_profiles'),
]
NESTED = b'[' * 9000 + b']' * 9000


@pytest.mark.parametrize('method,path,body', BODY_ROUTES)
@pytest.mark.parametrize('hostile', [
    NESTED,
    b'{"device_profile_name": "\\ud800"}',
    b'{"deployable_id": 1e308, "key": "k", "value": "v"}',
    b'{"deployable_id": 99999999999999999999, "key": "k", "value": "v"}',
    b'[{"name": "x", "description": "\\udfff", "groups": []}]',
    b'{"k": NaN}',
    b'\xff\xfe',
])
def test_hostile_bodies_are_refused(api, method, path, body, hostile,
                                    snapshot):
    before = snapshot()
    _assert_refused(_request(api, method, path, hostile,
                             headers={'X-Service-Token': 't'}))
    assert snapshot() == before


@pytest.mark.parametrize('method,path', NO_BODY_ROUTES)
def test_hostile_bodies_are_refused_by_routes_without_one(api, method,
                                                          path, snapshot):
    before = snapshot()
    for body in (NESTED, b'{"x": "\\u0000"}', b'\xff'):
        _assert_refused(_request(api, method, path, body), (400,))
    assert snapshot() == before


def test_a_hostile_body_never_disables_a_device(populated, snapshot):
    """The finding: a disable with a deeply nested body answered 500."""
    api, ids = populated
    before = snapshot()
    for action in ('disable', 'enable'):
        response = _request(api, 'POST', '/v2/devices/%s/%s'
                            % (ids['device'], action), NESTED)
        _assert_refused(response, (400,))
    assert snapshot() == before


@pytest.mark.parametrize('method,path,body', BODY_ROUTES)
@pytest.mark.parametrize('hostile', [b'{"x": "a\\u0000b"}',
                                     b'["\\u0000"]'])
def test_nul_in_bodies_is_refused(api, method, path, body, hostile, snapshot):
    before = snapshot()
    response = _request(api, method, path, hostile,
                        headers={'X-Service-Token': 't'})
    _assert_refused(response, (400,))
    assert 'NUL' in response.text
    assert snapshot() == before


@pytest.mark.parametrize('method,path,query', [
    ('GET', '/v2/device_profiles', 'name=a%00b'),
    ('DELETE', '/v2/device_profiles', 'value=dp%00'),
    ('GET', '/v2/device_profiles/dp%00', ''),
    ('DELETE', '/v2/device_profiles/dp%00', ''),
    ('GET', '/v2/attributes', 'key=%00'),
])
def test_nul_in_paths_and_queries_is_refused(api, method, path, query,
                                             snapshot):
    before = snapshot()
    request = webob.Request.blank(path, method=method)
    request.environ['QUERY_STRING'] = query
    _assert_refused(_served(api, request), (400,))
    assert snapshot() == before


def test_a_snapshot_sees_every_write_and_reads_only_after_one(
        database, conf, snapshot):
    """The snapshot cache: reads alone reuse the last snapshot; any other
    statement, through the DB API or any connection of the engine, makes
    it read again (so ``snapshot() == before`` fails when a row
    changed)."""
    table = models.Base.metadata.tables['deployables']
    before = snapshot()
    with database.connect() as connection:
        connection.execute(sa.select(table)).all()
    assert snapshot() is before
    deployable = _inventory(conf)
    after = snapshot()
    assert after != before
    assert [row for row in after['deployables'] if deployable['uuid'] in row]
    with database.begin() as connection:
        connection.execute(table.update().values(name='renamed'))
    assert snapshot() != after


def test_links_never_follow_the_host_header(api):
    for path in ('/', '/v2', '/v2/device_profiles'):
        response = _request(api, 'GET', path,
                            headers={'Host': 'evil.example.com:8080'})
        assert response.status_int == 200
        assert 'evil' not in response.text
        assert 'http://localhost/' in response.text


def test_errors_at_the_root_carry_the_version_headers(api):
    response = _request(api, 'POST', '/')
    _assert_refused(response, (405,))
    assert 'OpenStack-API-Version' not in _request(api, 'GET', '/').headers


@pytest.mark.parametrize('method,path,body', [
    ('GET', '/v2/devices.xml%0A2026-01-01 ERROR forged', None),
    ('POST', '/v2/device_profiles%0D%0Aforged', NESTED),
    ('GET', '/v2/device_profiles/%0Aforged' + 'x' * 5000, NESTED),
    ('GET%0Aforged', '/v2/device_profiles', None),
])
def test_a_refusal_is_logged_on_one_line(api, method, path, body):
    request = webob.Request.blank(path, method=urllib.parse.unquote(method))
    if body is not None:
        request.body = body
        request.content_type = 'application/json'
    response = _served(api, request)
    assert 400 <= response.status_int < 500
    _assert_logged_once(response)
    for record in response.log_records:
        assert len(record.getMessage()) < 800


def test_a_refused_request_logs_one_info_line(api):
    response = _request(api, 'POST', '/v2/device_profiles', NESTED)
    _assert_refused(response, (400,))
    assert [r.levelno for r in _explained(response)] == [logging.INFO]


@pytest.mark.parametrize('path,query', [
    ('/v2/attributes', 'deployable_id=%C2%B2'),
    ('/v2/attributes', 'deployable_id=' + '9' * 4301),
    ('/v2/attributes', 'deployable_id=99999999999'),
    ('/v2/devices', 'filters.field=limit&filters.value=' + '9' * 30),
    ('/v2/deployables', 'filters.field=limit&filters.value=%D9%A1'),
    ('/v2/devices', 'filters[%s].field=limit' % ('9' * 4301)),
    ('/v2/accelerator_requests', 'instance=%FF%FE'),
])
def test_hostile_numbers_in_queries_are_refused(api, path, query):
    _assert_refused(_request(api, 'GET', path, query=query), (400,))


@pytest.mark.parametrize('value', ['accelerator 2.' + '9' * 4301,
                                   '9' * 5000 + '.1', 'accelerator \u0662.1'])
def test_a_hostile_microversion_is_a_json_406(api, value):
    for path in ('/v2', '/v2/device_profiles'):
        response = _request(api, 'GET', path,
                            headers={'OpenStack-API-Version': value})
        _assert_refused(response, (406,))


def _inventory(conf) -> dict:
    """The fake driver's device on host1; the deployable's row."""
    context = conftest.make_context(roles=('admin',))
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    wire = device_tree.tree_to_wire(fake_driver.FakeDriver(conf).discover())
    inventory.apply_report(context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    return hardware.deployable_list(context)[0]


@pytest.fixture
def populated(api, conf):
    """``api`` with a record of every kind; their identifiers."""
    deployable = _inventory(conf)
    arq = _request(api, 'POST', '/v2/accelerator_requests',
                   {'device_profile_name': 'dp'}).json['arqs'][0]
    attribute = _request(api, 'POST', '/v2/attributes',
                         {'deployable_id': deployable['id'], 'key': 'k',
                          'value': 'v'}).json
    profile = _request(api, 'GET', '/v2/device_profiles',
                       query='name=dp').json['device_profiles'][0]
    devices = _request(api, 'GET', '/v2/devices').json['devices']
    return api, {'device': devices[0]['uuid'],
                 'deployable': deployable['uuid'],
                 'accelerator_request': arq['uuid'],
                 'attribute': attribute['uuid'],
                 'device_profile': profile['uuid'],
                 'device_profile_name': 'dp',
                 'rp_uuid': deployable['rp_uuid']}


def test_a_bind_to_another_host_than_the_devices_is_refused(api, conf,
                                                            snapshot):
    rp_uuid = _inventory(conf)['rp_uuid']
    created = _request(api, 'POST', '/v2/accelerator_requests',
                       {'device_profile_name': 'dp'})
    uuid = created.json['arqs'][0]['uuid']
    before = snapshot()
    ops = [{'op': 'add', 'path': '/hostname', 'value': 'host9'},
           {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
           {'op': 'add', 'path': '/instance_uuid', 'value': ARQ}]
    response = _request(api, 'PATCH', '/v2/accelerator_requests',
                        {uuid: ops}, headers={'X-Service-Token': 't'})
    _assert_refused(response, (400,))
    assert 'not of host9' in response.text
    assert snapshot() == before
    ops[0]['value'] = 'host1'
    response = _request(api, 'PATCH', '/v2/accelerator_requests',
                        {uuid: ops}, headers={'X-Service-Token': 't'})
    assert response.status_int == 202
    shown = _request(api, 'GET', '/v2/accelerator_requests/' + uuid)
    assert (shown.json['state'], shown.json['hostname']) == ('Bound',
                                                             'host1')


def test_a_body_shorter_than_its_length_is_a_400(api):
    request = webob.Request.blank('/v2/device_profiles', method='POST',
                                  content_type='application/json')
    request.body = b'[{"name": "x"'
    request.environ['CONTENT_LENGTH'] = '400'
    _assert_refused(_served(api, request), (400,))


def test_a_body_over_the_size_limit_is_a_json_413(api, conf):
    body = b'[' + b'0,' * 60000 + b'0]'
    _assert_refused(_request(api, 'POST', '/v2/device_profiles', body),
                    (413,))


def test_a_profile_may_request_only_so_many_accelerators(api, snapshot):
    before = snapshot()
    for groups in ([{'resources:FPGA': '65'}],
                   [{'resources:CUSTOM_A%d' % i: '1024'} for i in range(16)],
                   [{'resources:CUSTOM_A': '40', 'resources:PGPU': '40'}]):
        response = _request(api, 'POST', '/v2/device_profiles',
                            [{'name': 'big', 'groups': groups}])
        _assert_refused(response, (400,))
        assert 'max_accelerators_per_profile' in response.text
    assert snapshot() == before


def test_arq_creation_is_capped_per_request_and_project(api, conf, snapshot):
    conf.set_override('max_arqs_per_project', 2, group='api')
    conf.set_override('max_arqs_per_request', 1, group='api')
    created = _request(api, 'POST', '/v2/device_profiles',
                       [{'name': 'two', 'groups': [{'resources:FPGA': '2'}]}])
    assert created.status_int == 201
    # The limits are read when the conductor starts.
    manager = conductor_manager.ConductorManager(
        'c1', arq_limits=conductor_manager.ARQLimits.from_conf(conf))
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=DirectConductor(manager)):
        app = api_app.setup_app(conf, transport=object())
    before = snapshot()
    _assert_refused(_request(app, 'POST', '/v2/accelerator_requests',
                             {'device_profile_name': 'two'}), (400,))
    assert snapshot() == before
    for _ in range(2):
        assert _request(app, 'POST', '/v2/accelerator_requests',
                        {'device_profile_name': 'dp'}).status_int == 201
    before = snapshot()
    _assert_refused(_request(app, 'POST', '/v2/accelerator_requests',
                             {'device_profile_name': 'dp'}), (403,))
    assert snapshot() == before


def test_patch_and_delete_name_only_so_many_arqs(api, conf):
    conf.set_override('max_items_per_request', 2, group='api')
    uuids = ['00000000-0000-4000-8000-00000000000%d' % i for i in range(3)]
    ops = [{'op': 'remove', 'path': '/hostname'}]
    response = _request(api, 'PATCH', '/v2/accelerator_requests',
                        dict.fromkeys(uuids, ops),
                        headers={'X-Service-Token': 't'})
    _assert_refused(response, (400,))
    assert 'max_items_per_request' in response.text
    response = _request(api, 'DELETE', '/v2/accelerator_requests',
                        query='arqs=' + ','.join(uuids))
    _assert_refused(response, (400,))


# Property-based layer -----------------------------------------------------

# Raw JSON that no endpoint may accept anywhere in a body.
HOSTILE_TOKENS = st.one_of(
    st.integers(33, 20000).map(lambda n: '[' * n + ']' * n),
    st.integers(0xD800, 0xDFFF).map(lambda c: '"\\u%04x"' % c),
    st.integers(2 ** 63, 2 ** 200).map(str),
    st.integers(2 ** 63 + 1, 2 ** 200).map(lambda n: '-%d' % n),
    st.integers(4301, 6000).map(lambda n: '1' * n),
    st.sampled_from(['NaN', 'Infinity', '-Infinity', '1e400', '-1e999']),
)


def _violations(schema: dict):
    """Values that break ``schema`` (a property's), from its keywords."""
    kinds = schema.get('type', [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    options = [st.just({'not': 'a scalar'})] if kinds else []
    if 'maxLength' in schema:
        longest = schema['maxLength']
        options.append(st.tuples(st.integers(longest + 1, longest + 40),
                                 st.characters(codec='utf-8')).map(
            lambda pair: pair[1] * pair[0]))
    if schema.get('maxLength', 0) > validation.MAX_TEXT_BYTES // 3:
        # Within the character count, beyond a TEXT column's bytes.
        options.append(st.just('\u20ac' * (validation.MAX_TEXT_BYTES // 3
                                           + 1)))
    if 'maximum' in schema:
        options.append(st.integers(schema['maximum'] + 1, 2 ** 62))
    if 'minimum' in schema:
        options.append(st.integers(-2 ** 62, schema['minimum'] - 1))
    if 'pattern' in schema:
        options.append(st.sampled_from(['\u00b2', 'a b', '\u0661', '']))
    return st.one_of(*options) if options else st.nothing()


PLACEHOLDER = '__hostile__'


def _with_token(body, key_path):
    """``body`` as JSON text with the value at ``key_path`` replaced by
    the placeholder (then by a raw hostile token)."""
    body = json.loads(json.dumps(body))
    target = body
    for key in key_path[:-1]:
        target = target[key]
    target[key_path[-1]] = PLACEHOLDER
    return json.dumps(body)


# (method, path, valid body, paths of its values, schema of each value).
FUZZ_ROUTES = [
    ('POST', '/v2/device_profiles', [dict(PROFILE, name='fz')],
     {(0, 'name'): profile_schema.PROFILE['properties']['name'],
      (0, 'description'): profile_schema.PROFILE['properties'][
          'description'],
      (0, 'groups'): profile_schema.PROFILE['properties']['groups']}),
    ('POST', '/v2/accelerator_requests', {'device_profile_name': 'dp'},
     {('device_profile_name',): arq_schema.CREATE['properties'][
         'device_profile_name']}),
    ('PATCH', '/v2/accelerator_requests',
     {ARQ: [{'op': 'add', 'path': '/hostname', 'value': 'h'}]},
     {(ARQ, 0, 'value'): {}, (ARQ, 0, 'op'): {'type': 'string'}}),
    ('POST', '/v2/attributes',
     {'deployable_id': 1, 'key': 'fz', 'value': 'v'},
     {(name,): attribute_schema._ATTRIBUTE['properties'][name]
      for name in ('deployable_id', 'key', 'value')}),
]


@st.composite
def hostile_bodies(draw):
    method, path, body, fields = draw(st.sampled_from(FUZZ_ROUTES))
    key_path = draw(st.sampled_from(sorted(fields, key=repr)))
    text = _with_token(body, key_path)
    violation = _violations(fields[key_path])
    if violation.is_empty or draw(st.booleans()):
        token = draw(HOSTILE_TOKENS)
    else:
        token = json.dumps(draw(violation), ensure_ascii=False)
    raw = text.replace('"%s"' % PLACEHOLDER, token).encode()
    return method, path, raw


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(case=hostile_bodies())
def test_generated_hostile_bodies_are_refused(populated, case, snapshot):
    # Deployable 1 exists: an attribute body that got through would be
    # stored.
    api, _ids = populated
    method, path, raw = case
    before = snapshot()
    response = _request(api, method, path, raw,
                        headers={'X-Service-Token': 't'})
    # A PATCH of an unknown ARQ is a 404 once its body is valid.
    _assert_refused(response, (400, 404, 413))
    assert snapshot() == before


QUERY_ROUTES = [
    ('GET', '/v2/device_profiles', ['name']),
    ('GET', '/v2/accelerator_requests', ['instance', 'bind_state']),
    ('GET', '/v2/devices', ['filters.field', 'filters.value', 'type',
                            'vendor', 'hostname', 'status']),
    ('GET', '/v2/deployables', ['filters.field', 'filters.value']),
    ('GET', '/v2/attributes', ['deployable_id', 'key']),
    ('DELETE', '/v2/accelerator_requests', ['arqs', 'instance']),
    ('DELETE', '/v2/device_profiles', ['value']),
]
HOSTILE_TEXT = st.one_of(
    st.text(max_size=50),
    st.sampled_from(['%FF%FE', '%ED%A0%80', '%00', '%C2%B2', '9' * 4400,
                     '-1', '1e308', '[]', '{}', '%']),
)


@st.composite
def hostile_queries(draw):
    method, path, keys = draw(st.sampled_from(QUERY_ROUTES))
    pairs = draw(st.lists(st.tuples(
        st.one_of(st.sampled_from(keys), st.text(min_size=1, max_size=20)),
        HOSTILE_TEXT), min_size=1, max_size=4))
    query = '&'.join('%s=%s' % (urllib.parse.quote(k), v if '%' in v
                                else urllib.parse.quote(v))
                     for k, v in pairs)
    return method, path, query


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(case=hostile_queries(),
       version=st.one_of(st.none(), st.text(max_size=30),
                         st.sampled_from(['accelerator 2.' + '9' * 5000])))
def test_generated_hostile_queries_and_headers_never_fail(api, case,
                                                          version, snapshot):
    method, path, query = case
    before = snapshot()
    headers = {} if version is None else {
        'OpenStack-API-Version': version.encode(
            'latin-1', 'replace').decode('latin-1')}
    response = _request(api, method, path, query=query, headers=headers)
    assert response.status_int < 500, (response.status, response.body)
    if response.status_int >= 400:
        _assert_refused(response)
    assert snapshot() == before


# Every endpoint ---------------------------------------------------------


#: Every route of the API, from its routing table: a new endpoint is
#: fuzzed without touching this test. ``{id}`` stands for a member's
#: identifier.
ENDPOINTS = root.endpoints()


def test_the_fuzzed_endpoints_are_every_endpoint(database):
    paths = {path for _method, path in ENDPOINTS}
    for collection in ('device_profiles', 'accelerator_requests',
                       'attributes', 'devices', 'deployables'):
        assert '/v2/%s/{id}' % collection in paths
    assert ('PATCH', '/v2/accelerator_requests/{id}') in ENDPOINTS
    assert ('PATCH', '/v2/accelerator_requests') in ENDPOINTS
    assert ('DELETE', '/v2/accelerator_requests/{id}') in ENDPOINTS
    assert ('DELETE', '/v2/attributes/{id}') in ENDPOINTS
    assert ('DELETE', '/v2/device_profiles/{id}') in ENDPOINTS
    assert ('POST', '/v2/devices/{id}/disable') in ENDPOINTS
    assert ('POST', '/v2/devices/{id}/enable') in ENDPOINTS
    assert ('GET', '/v2/deployables/{id}') in ENDPOINTS


# Identifiers no record has, each hostile in its own way (percent-encoded
# as they would be on the wire).
HOSTILE_IDS = st.one_of(
    st.sampled_from(['%C2%B2', '%D9%A1', '%FF%FE', '%ED%A0%80', 'a%00b',
                     '..', '%2E%2E', '-1', '0', str(2 ** 64), '9' * 4400,
                     'x' * 3000, '%20', 'urn:uuid:' + ARQ,
                     ARQ.upper(), ARQ.replace('-', ''), '{}', '%25',
                     'dp%0A', 'dp ', 'DP']),
    st.text(min_size=1, max_size=40).map(
        lambda text: urllib.parse.quote(text, safe='')),
)
# Query strings every endpoint refuses: a parameter none takes, or bytes
# that are no UTF-8 or hold a NUL.
HOSTILE_QUERIES = st.one_of(
    st.text(max_size=20).map(lambda text: 'x-%s=1' % urllib.parse.quote(
        text, safe='')),
    st.sampled_from(['name=%FF', 'value=%ED%A0%80', 'x=%00', 'limit=%C0',
                     'filters[%s].field=limit' % ('9' * 4301)]),
)
# Headers every endpoint refuses.
HOSTILE_HEADERS = st.sampled_from([
    {'OpenStack-API-Version': 'accelerator 2.' + '9' * 5000},
    {'OpenStack-API-Version': '9' * 5000 + '.1'},
    {'OpenStack-API-Version': 'accelerator 3.0'},
    {'OpenStack-API-Version': 'accelerator 2.99'},
    {'OpenStack-API-Version': 'accelerator -1.0'},
    {'OpenStack-API-Version': 'accelerator \xd9\xa2.1'},
    {'OpenStack-API-Version': 'a b c'},
    {'Accept': 'text/html'},
    {'Accept': 'application/json;q=0'},
])
# Bodies every endpoint refuses, whatever it expects.
HOSTILE_RAW_BODIES = st.one_of(
    HOSTILE_TOKENS.map(str.encode),
    HOSTILE_TOKENS.map(lambda token: b'{"device_profile_name": %s}'
                       % token.encode()),
    HOSTILE_TOKENS.map(lambda token: b'[{"op": "add", "value": %s}]'
                       % token.encode()),
    st.sampled_from([b'\xff\xfe', b'{"a": "\\u0000"}', b'[1,', b'']),
)


@st.composite
def hostile_requests(draw):
    method, template = draw(st.sampled_from(ENDPOINTS))
    if draw(st.integers(0, 9)) == 0:
        # A method no route takes there (405), or none at all.
        method = draw(st.sampled_from(['PUT', 'OPTIONS', 'TRACE',
                                       'PROPFIND', 'CONNECT', 'X']))
    kinds = ['query', 'headers', 'body', 'short body']
    if '{id}' in template:
        kinds.append('id')
    hostile = set(draw(st.lists(st.sampled_from(kinds), min_size=1,
                                max_size=3, unique=True)))
    case = {'method': method, 'template': template, 'query': '',
            'headers': {'X-Service-Token': 't'}, 'body': None,
            'id': draw(HOSTILE_IDS) if 'id' in hostile else None,
            'length': None}
    if 'query' in hostile:
        case['query'] = draw(HOSTILE_QUERIES)
    if 'headers' in hostile:
        case['headers'].update(draw(HOSTILE_HEADERS))
    if 'body' in hostile:
        case['body'] = draw(HOSTILE_RAW_BODIES) or b'[]'
        case['content_type'] = draw(st.sampled_from(
            ['application/json', 'APPLICATION/JSON; charset=UTF-8',
             'text/plain', 'application/x-www-form-urlencoded']))
    if 'short body' in hostile:
        case['body'] = case['body'] or b'{"device_profile_name": "dp"}'
        case['length'] = len(case['body']) + draw(st.integers(1, 10 ** 6))
    return case


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(case=hostile_requests(), real=st.sampled_from(
    ['device', 'deployable', 'accelerator_request', 'attribute',
     'device_profile', 'device_profile_name']))
def test_every_endpoint_refuses_generated_hostile_requests(populated, case,
                                                           real, snapshot):
    """Each generated request is hostile in at least one way every
    endpoint refuses (the version documents excepted: they ignore what
    they do not read); where its identifier is not the hostile part, it
    names a real record (so a request that got through would change it).
    """
    api, ids = populated
    identifier = case['id'] or ids[real]
    path = case['template'].replace('{id}', identifier)
    request = webob.Request.blank(path, method=case['method'])
    request.environ['QUERY_STRING'] = case['query']
    if case['body'] is not None:
        request.body = case['body']
        request.content_type = case.get('content_type', 'application/json')
    if case['length'] is not None:
        request.environ['CONTENT_LENGTH'] = str(case['length'])
    for name, value in case['headers'].items():
        request.headers[name] = value
    before = snapshot()
    response = _served(api, request)
    if case['template'] in ('/', '/v2') and response.status_int == 200:
        # The version documents answer any client that can reach them.
        assert response.json['versions' if path == '/' else 'id']
    else:
        _assert_refused(response)
    assert snapshot() == before


@pytest.mark.parametrize('content_type', ['APPLICATION/JSON',
                                          'Application/Json; charset=UTF-8'])
def test_media_types_compare_case_insensitively(api, content_type):
    response = _request(api, 'POST', '/v2/device_profiles',
                        [dict(PROFILE, name='upper')],
                        content_type=content_type)
    assert response.status_int == 201, response.body


def test_a_413_is_the_json_fault_with_the_limit(api):
    response = _request(api, 'POST', '/v2/device_profiles',
                        b'[' + b'0,' * 60000 + b'0]')
    _assert_refused(response, (413,))
    fault = json.loads(response.json['error_message'])
    assert '%s' not in fault['faultstring']
    assert '114688' in fault['faultstring']


def test_a_400_cuts_a_long_bad_value_it_echoes(api):
    name = 'x' * 20000
    response = _request(api, 'POST', '/v2/device_profiles',
                        [dict(PROFILE, name=name)])
    _assert_refused(response, (400,))
    fault = json.loads(response.json['error_message'])
    # The value's repr (with its quotes) cut to 200 characters.
    assert fault['faultstring'] == (
        "0/name: '%s...(20002 characters) is too long" % ('x' * 199))
    assert len(fault['faultstring']) < 300


def test_no_error_message_is_longer_than_the_limit():
    fault = json.loads(json.loads(errors.fault_body(
        400, 'y' * 50000))['error_message'])
    assert fault['faultstring'] == '%s...(50000 characters)' % (
        'y' * errors.MAX_MESSAGE)
