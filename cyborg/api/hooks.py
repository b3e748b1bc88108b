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

"""Pecan hooks: the request context and error responses."""

import urllib.parse

from oslo_log import log as logging
from pecan import hooks
from webob import exc as webob_exc

from cyborg import context as cyborg_context
from cyborg.api import errors
from cyborg.api import microversion
from cyborg.common import exception

LOG = logging.getLogger(__name__)


class ContextHook(hooks.PecanHook):
    """Attaches what a controller needs to ``pecan.request``."""

    def __init__(self, conf, conductor_api, authorizer, profile_cache):
        self._conf = conf
        # Writes wait [api] conductor_timeout for a conductor, not
        # oslo.messaging's rpc_response_timeout (60 s by default). A test
        # double without with_timeout (a Mock) is used as given.
        if hasattr(type(conductor_api), 'with_timeout'):
            conductor_api = conductor_api.with_timeout(
                conf.api.conductor_timeout)
        self._conductor_api = conductor_api
        self._authorizer = authorizer
        self._profile_cache = profile_cache

    def before(self, state):
        request = state.request
        request.context = cyborg_context.RequestContext.from_environ(
            request.environ)
        request.conf = self._conf
        request.conductor_api = self._conductor_api
        request.authorizer = self._authorizer
        request.profile_cache = self._profile_cache
        request.version = request.environ.get(microversion.ENVIRON_KEY,
                                              microversion.MIN_VERSION)
        endpoint = (self._conf.api.public_endpoint
                    or server_url(request.environ))
        request.base_url = endpoint.rstrip('/')


_DEFAULT_PORTS = {'http': '80', 'https': '443'}


def server_url(environ: dict) -> str:
    """The URL the API is served at, without ``[api] public_endpoint``.

    It is built from the server's own name and port (``SERVER_NAME``,
    ``SERVER_PORT``), never from the client's ``Host`` header: links
    must not point wherever a client says. Behind a proxy, set
    ``public_endpoint``.
    """
    scheme = environ.get('wsgi.url_scheme', 'http')
    host = environ.get('SERVER_NAME') or 'localhost'
    if ':' in host and not host.startswith('['):
        host = '[%s]' % host
    port = environ.get('SERVER_PORT')
    if port and port != _DEFAULT_PORTS.get(scheme):
        host += ':' + port
    return '%s://%s%s' % (scheme, host,
                          urllib.parse.quote(environ.get('SCRIPT_NAME', '')))


class JSONHook(hooks.PecanHook):
    """Answers JSON without pecan negotiating it on every request.

    Every handler answers ``application/json`` only, and
    :class:`cyborg.api.middleware.JSONOnly` has refused any request
    whose ``Accept`` header admits no JSON, so pecan's negotiation (the
    ``Accept`` header parsed twice more, matched against the handler's
    types) could only pick JSON. A path with a dot is left to pecan,
    which takes ``.json`` off it.
    """

    def on_route(self, state):
        if '.' not in state.request.environ.get('PATH_INFO', ''):
            state.request.pecan['content_type'] = errors.JSON


class ErrorHook(hooks.PecanHook):
    """Turns exceptions into JSON fault responses.

    A database error of the API's own reads, and a conductor that did not
    answer within ``[api] conductor_timeout`` or could not be reached,
    answer 503 with ``Retry-After``; a traceback is logged, never sent.
    """

    def __init__(self, conf=None):
        self._conf = conf

    def _conductor_timeout(self, state) -> float | None:
        conf = getattr(state.request, 'conf', None) or self._conf
        return conf.api.conductor_timeout if conf is not None else None

    def on_error(self, state, error):
        if (isinstance(error, webob_exc.HTTPException)
                and not isinstance(error, exception.CyborgException)):
            return None
        status, message = errors.status_and_message(
            error, self._conductor_timeout(state))
        method = errors.loggable(state.request.method, 20)
        path = errors.loggable(state.request.path)
        # A refused request (4xx) logs at most one INFO line; only the
        # unexpected gets a traceback.
        if isinstance(error, exception.CyborgException):
            if status >= 500:
                LOG.error('Error handling %s %s: %s', method, path, message)
        elif status == 500:
            LOG.exception('Unexpected error handling %s %s', method, path)
        elif status < 500:
            LOG.info('Refused %s %s: %s (%s)', method, path,
                     errors.loggable(message),
                     type(error).__name__)
        else:
            LOG.error('Error handling %s %s: %s (%s: %s)', method, path,
                      message, type(error).__name__, error)
        return errors.http_error(status, message,
                                 errors.retry_after(status))
