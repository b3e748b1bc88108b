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

"""Fakes shared by unit tests."""

import json
import logging

import futurist
import requests

from cyborg.conductor import placement_sync
from cyborg.conductor import sync_worker


class FakeTransport(requests.adapters.BaseAdapter):
    """A requests transport answering from a list of replies; records
    every request it was sent."""

    def __init__(self):
        super().__init__()
        self.replies: list = []
        self.sent: list[requests.PreparedRequest] = []

    def reply(self, status=200, body=None, text=None, headers=None):
        self.replies.append((status, body, text, headers or {}))

    def fail(self, exception: Exception):
        self.replies.append(exception)

    def send(self, request, **kwargs):
        self.sent.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        status, body, text, headers = reply
        response = requests.Response()
        response.status_code = status
        response.reason = 'Fake'
        response.url = request.url
        response.request = request
        response.encoding = 'utf-8'
        if body is not None:
            response._content = json.dumps(body).encode()
            response.headers['Content-Type'] = 'application/json'
        else:
            response._content = (text or '').encode()
        response.headers.update(headers)
        return response

    @property
    def last(self) -> requests.PreparedRequest:
        return self.sent[-1]

    def close(self):
        pass


class LogRecords(logging.Handler):
    """Keeps every record logged at INFO or above, for a test to read."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def inline_syncer(client) -> sync_worker.SyncWorker:
    """A sync worker on ``client`` whose requested syncs run at once, in
    the caller's thread: a conductor's answer then tells the sync's
    outcome (``synced``), as tests of what a sync writes want."""
    return sync_worker.SyncWorker(placement_sync.PlacementSync(client),
                                  executor=futurist.SynchronousExecutor())
