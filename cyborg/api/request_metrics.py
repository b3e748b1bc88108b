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

"""The API's request metrics, and its ``/metrics`` route.

:class:`RequestMetrics` counts every request the API answers in
``cyborg_api_requests_total`` and ``cyborg_api_request_duration_seconds``
(:mod:`cyborg.common.metrics`) by method, status and route: the path
template of the route that matched (``/v2/accelerator_requests/{uuid}``),
which the router writes in the environ under :data:`ROUTE_KEY`. A request
no route took (an unknown path, or one refused before routing: no token,
a bad version header) counts under ``unmatched``: the path a client sent
never becomes a label, whose values must stay few.
"""

import time

from cyborg.common import metrics

#: Where the router puts the template of the route it matched.
ROUTE_KEY = 'cyborg.route'
#: The path of the API's own /metrics ([metrics] api_enabled).
METRICS_PATH = '/metrics'


class RequestMetrics:
    """Counts and times every request the wrapped application answers
    (until its response starts: as the access log, the application's
    time, not the client's download)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        started = time.monotonic()

        def count_and_start(status, headers, exc_info=None):
            metrics.api_request(
                environ.get('REQUEST_METHOD'),
                environ.get(ROUTE_KEY, metrics.UNMATCHED_ROUTE),
                status[:3], time.monotonic() - started)
            return start_response(status, headers, exc_info)

        return self.app(environ, count_and_start)
