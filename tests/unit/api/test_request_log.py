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

"""The API's access log: one INFO line per request."""

import logging
import re
from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import request_log

LOGGER = 'cyborg.api.request_log'
LINE = re.compile(r'^(?P<method>\S+) (?P<path>\S+) status: (?P<status>\d+) '
                  r'time: (?P<ms>\d+\.\d) ms request: (?P<request>\S+) '
                  r'project: (?P<project>\S+)$')


@pytest.fixture
def app(conf):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
        return api_app.setup_app(conf, transport=object())


def _lines(caplog) -> list[dict[str, str]]:
    found = [LINE.match(record.getMessage()) for record in caplog.records
             if record.name == LOGGER and record.levelno == logging.INFO]
    assert all(found), [r.getMessage() for r in caplog.records]
    return [match.groupdict() for match in found]


def _get(app, path, **headers):
    return webob.Request.blank(path, headers=headers).get_response(app)


def test_one_line_per_request_with_status_time_id_and_project(app, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    response = _get(app, '/v2?name=x', **{'X-Project-Id': 'p1'})
    assert response.status_int == 200
    [line] = _lines(caplog)
    assert line['method'] == 'GET'
    assert line['path'] == '/v2?name=x'
    assert line['status'] == '200'
    assert line['request'] == response.headers['X-OpenStack-Request-Id']
    assert line['project'] == 'p1'
    assert float(line['ms']) >= 0


def test_refusals_are_logged_with_their_status(app, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _get(app, '/v2/accelerator_requests/not-a-uuid')
    _get(app, '/device_profiles', Accept='text/html')
    _get(app, '/v2/no-such-thing')
    statuses = [(line['path'], line['status']) for line in _lines(caplog)]
    # The path the client sent (the version middleware adds /v2 to a
    # path without it, after the log saw it).
    assert statuses == [('/v2/accelerator_requests/not-a-uuid', '400'),
                        ('/device_profiles', '406'),
                        ('/v2/no-such-thing', '404')]


def test_a_request_without_identity_logs_no_project(caplog):
    """Refused before authentication filled in the project."""
    def refuse(environ, start_response):
        start_response('401 Unauthorized', [])
        return [b'']

    caplog.set_level(logging.INFO, logger=LOGGER)
    webob.Request.blank('/v2/devices').get_response(
        request_log.RequestLog(refuse))
    [line] = _lines(caplog)
    assert (line['status'], line['request'], line['project']) == (
        '401', '-', '-')


def test_client_text_cannot_forge_or_flood_a_line(caplog):
    def answer(environ, start_response):
        start_response('200 OK', [])
        return [b'']

    caplog.set_level(logging.INFO, logger=LOGGER)
    request = webob.Request.blank('/v2/x%0Aforged?' + 'q' * 5000)
    request.environ['PATH_INFO'] = '/v2/x\nforged'
    request.environ['HTTP_X_PROJECT_ID'] = 'p\nq'
    request.get_response(request_log.RequestLog(answer))
    [record] = [r for r in caplog.records if r.name == LOGGER]
    message = record.getMessage()
    assert '\n' not in message
    assert '/v2/x\\nforged?' + 'q' * 200 + '...' in message
    assert 'project: p\\nq' in message


def test_the_access_log_can_be_turned_off(conf, caplog):
    conf.set_override('auth_strategy', 'noauth', group='api')
    conf.set_override('access_log', False, group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
        app = api_app.setup_app(conf, transport=object())
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert _get(app, '/v2').status_int == 200
    assert _lines(caplog) == []
