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

"""/v2/device_taint_rules through the assembled app, in process: the
conductor is a mock that applies rules with the database layer, as the
real one does; bad input is a 4xx that never reaches it."""

import json
from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.db import taint_rules as taint_rules_db
from tests import factories

PATH = '/v2/device_taint_rules'
V2_8 = {'OpenStack-API-Version': 'accelerator 2.8'}
V2_7 = {'OpenStack-API-Version': 'accelerator 2.7'}
MEMBER = dict(V2_8, **{'X-Project-Id': 'p1', 'X-Roles': 'member'})
MISSING = '44444444-4444-4444-8444-444444444444'
RULE = {'name': 'drain', 'description': 'fan',
        'selector': {'host': 'h*', 'address': '0000:0c:*'},
        'taint': {'key': 'example.drain', 'value': 'x',
                  'effect': 'NoSchedule', 'reason': 'fan failure'}}


@pytest.fixture
def conductor():
    conductor = mock.Mock()
    conductor.taint_rule_create.side_effect = (
        lambda context, values: taint_rules_db.rule_create(
            context, values).rule)
    conductor.taint_rule_delete.side_effect = (
        lambda context, uuid: taint_rules_db.rule_delete(context, uuid)
        and None)
    return conductor


@pytest.fixture
def app(conf, conductor, database):
    conf.set_override('auth_strategy', 'noauth', group='api')
    factories.create_test_device(
        database, uuid='77777777-7777-4777-8777-777777777777',
        hostname='h1', address='0000:0c:00.0')
    factories.create_test_device(
        database, uuid='77777777-7777-4777-8777-777777777778',
        hostname='h2', address='0000:0d:00.0')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=conductor):
        return api_app.setup_app(conf, transport=object())


def _request(app, method, path, body=None, headers=V2_8):
    request = webob.Request.blank(path, method=method,
                                  headers=dict(headers))
    if body is not None:
        request.body = (body if isinstance(body, bytes)
                        else json.dumps(body).encode())
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


def test_create_show_list_and_delete(app, conductor):
    created = _request(app, 'POST', PATH, RULE)
    assert created.status_int == 201, created.body
    rule = created.json
    assert rule['selector'] == RULE['selector']
    assert rule['taint'] == RULE['taint']
    assert (rule['name'], rule['description']) == ('drain', 'fan')
    assert rule['status'] == {
        'devices': [{'uuid': '77777777-7777-4777-8777-777777777777',
                     'hostname': 'h1', 'address': '0000:0c:00.0'}],
        'arqs': [], 'instances': [], 'projects': []}
    assert rule['links'][0]['href'].endswith(PATH + '/' + rule['uuid'])
    [(_name, (_context, values), _kw)] = conductor.taint_rule_create.mock_calls
    assert values == {'name': 'drain', 'description': 'fan',
                      'selector': RULE['selector'], 'key': 'example.drain',
                      'value': 'x', 'effect': 'NoSchedule',
                      'reason': 'fan failure'}
    shown = _request(app, 'GET', PATH + '/' + rule['uuid'].upper())
    assert shown.json == {'device_taint_rule': rule}
    listed = _request(app, 'GET', PATH).json['device_taint_rules']
    assert listed == [{k: v for k, v in rule.items() if k != 'status'}]
    assert _request(app, 'DELETE', PATH + '/' + rule['uuid']
                    ).status_int == 204
    assert _request(app, 'GET', PATH).json == {'device_taint_rules': []}


def test_a_dry_run_shows_what_it_would_affect(app):
    body = dict(RULE, selector={'host': 'h2'},
                taint={'key': 'example.dry', 'effect': 'None'})
    rule = _request(app, 'POST', PATH, body).json
    assert rule['taint'] == {'key': 'example.dry', 'value': '',
                             'effect': 'None', 'reason': None}
    assert [d['hostname'] for d in rule['status']['devices']] == ['h2']


@pytest.mark.parametrize('body, message', [
    ({}, "'selector' is a required property"),
    (dict(RULE, selector={}), 'selector'),
    (dict(RULE, selector={'hostname': 'h1'}), 'hostname'),
    (dict(RULE, selector={'host': ''}), 'host'),
    (dict(RULE, selector={'attribute': {'k': 1}}), 'attribute'),
    (dict(RULE, taint={'key': 'Bad Key', 'effect': 'NoSchedule'}), 'key'),
    (dict(RULE, taint={'key': 'k' * 64, 'effect': 'NoSchedule'}), 'key'),
    (dict(RULE, taint={'key': 'ok', 'effect': 'Evict'}), 'effect'),
    (dict(RULE, taint={'key': 'ok'}), 'effect'),
    (dict(RULE, taint={'key': 'ok', 'effect': 'None', 'x': 1}), 'x'),
    (dict(RULE, extra=True), 'extra'),
    ([RULE], 'object'),
    (b'{not json', 'JSON'),
])
def test_bad_input_is_a_400_that_changes_nothing(app, conductor, body,
                                                 message):
    response = _request(app, 'POST', PATH, body)
    assert response.status_int == 400, response.body
    assert message in _fault(response)
    assert conductor.mock_calls == []
    assert _request(app, 'GET', PATH).json == {'device_taint_rules': []}


@pytest.mark.parametrize('method, path', [
    ('GET', PATH + '/' + MISSING), ('DELETE', PATH + '/' + MISSING),
    ('GET', PATH + '/not-a-uuid'), ('DELETE', PATH + '/not-a-uuid'),
])
def test_unknown_rules_are_404(app, method, path):
    response = _request(app, method, path)
    assert response.status_int == 404, response.body
    assert 'could not be found' in _fault(response)


def test_delete_needs_the_rule(app, conductor):
    assert _request(app, 'DELETE', PATH).status_int == 400
    assert conductor.mock_calls == []


@pytest.mark.parametrize('method, path, body', [
    ('GET', PATH, None), ('GET', PATH + '/' + MISSING, None),
    ('POST', PATH, RULE), ('DELETE', PATH + '/' + MISSING, None)])
def test_before_2_8_there_are_no_taint_rules(app, conductor, method,
                                             path, body):
    for headers in ({}, V2_7):
        response = _request(app, method, path, body, headers)
        assert response.status_int == 406, response.body
        assert '2.8' in _fault(response)
    assert conductor.mock_calls == []


@pytest.mark.parametrize('method, path, body', [
    ('GET', PATH, None), ('GET', PATH + '/' + MISSING, None),
    ('POST', PATH, RULE), ('DELETE', PATH + '/' + MISSING, None)])
def test_only_admins(app, conductor, method, path, body):
    response = _request(app, method, path, body, MEMBER)
    assert response.status_int == 403
    assert conductor.mock_calls == []


def test_other_methods_are_405(app):
    assert _request(app, 'PATCH', PATH + '/' + MISSING, []
                    ).status_int == 405
