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

"""The API's access log: one INFO line per request, as Placement's.

::

    GET /v2/accelerator_requests?instance=... status: 200 time: 3.1 ms
    request: req-... project: 7f2c...

The line is written when the response starts (its status and headers
are known; the body of every API response is built by then), so the
time is the application's, not the client's download. The path is the
one the client sent, before the version middleware rewrites it, cut and
escaped as every client text in the log (:func:`errors.loggable`).
"""

import time

from oslo_log import log as logging
from oslo_middleware import request_id

from cyborg.api import errors

LOG = logging.getLogger(__name__)

# The longest query string kept in a line (a list of uuids is long).
_QUERY_LIMIT = 200


def request_line(environ: dict) -> tuple[str, str]:
    """The method and ``/path?query`` of ``environ``, fit for one log
    line."""
    path = errors.loggable((environ.get('SCRIPT_NAME', '')
                            + environ.get('PATH_INFO', '')) or '/')
    query = environ.get('QUERY_STRING')
    if query:
        path += '?' + errors.loggable(query, _QUERY_LIMIT)
    return errors.loggable(environ.get('REQUEST_METHOD'), 20), path


class RequestLog:
    """Logs every request the wrapped application answers.

    It sits inside oslo.middleware's ``RequestId`` (which puts the
    request id in the environ) and outside authentication, whose
    identity headers (``X-Project-Id``) are in the environ once the
    application answered; a request refused before authentication logs
    ``project: -``.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        started = time.monotonic()
        method, path = request_line(environ)

        def log_and_start(status, headers, exc_info=None):
            LOG.info('%s %s status: %s time: %.1f ms request: %s '
                     'project: %s', method, path, status.split(' ', 1)[0],
                     (time.monotonic() - started) * 1000,
                     environ.get(request_id.ENV_REQUEST_ID, '-'),
                     errors.loggable(environ.get('HTTP_X_PROJECT_ID')
                                     or '-', 64),
                     # The line says which request it is: formatting the
                     # request context oslo.log keeps per thread (as the
                     # other lines do) would triple its cost, and the
                     # thread's context may be an earlier request's.
                     extra={'context': None})
            return start_response(status, headers, exc_info)

        return self.app(environ, log_and_start)
