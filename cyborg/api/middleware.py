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

"""WSGI middleware of the API pipeline."""

import html
import posixpath
import re

from keystonemiddleware import auth_token
from oslo_log import log as logging
from webob import acceptparse

from cyborg.api import errors
from cyborg.api import microversion
from cyborg.api import request_metrics
from cyborg.common import constants

LOG = logging.getLogger(__name__)

# Keystone's implied roles: a token for a role carries the roles below it.
IMPLIED_ROLES = {
    'admin': ('manager', 'member', 'reader'),
    'manager': ('member', 'reader'),
    'member': ('reader',),
}

_PUBLIC_PATHS = re.compile(r'^/(v2)?(\.json)?/?$')
_TAGS = re.compile(r'<[^>]+>')


def is_public_path(path: str) -> bool:
    """The version documents need no token."""
    return path in ('', '/') or _PUBLIC_PATHS.match(path) is not None


def expand_roles(roles: list[str]) -> list[str]:
    expanded = list(roles)
    for role in roles:
        for implied in IMPLIED_ROLES.get(role, ()):
            if implied not in expanded:
                expanded.append(implied)
    return expanded


class VersionMiddleware:
    """Routes unversioned paths to v2 and negotiates the microversion.

    Every response under /v2 and every error carries the version
    headers; the root document carries none.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        # The version documents and /metrics are not versioned.
        if path in ('', '/', '/.json', request_metrics.METRICS_PATH):
            return self.app(environ, _version_headers_on_errors(
                start_response))
        if path != '/v2' and not path.startswith(('/v2/', '/v2.')):
            environ['PATH_INFO'] = '/v2' + path
        try:
            version = microversion.parse_header(
                environ.get('HTTP_OPENSTACK_API_VERSION'))
        except microversion.InvalidHeader:
            return self._reject(start_response, 'Invalid value for '
                                'OpenStack-API-Version header')
        except microversion.UnsupportedVersion as e:
            return self._reject(start_response, str(e))
        environ[microversion.ENVIRON_KEY] = version
        extra = microversion.response_headers(version)

        def add_headers(status, headers, exc_info=None):
            headers = [h for h in headers if h[0].lower() != 'vary']
            return start_response(status, headers + extra, exc_info)

        return self.app(environ, add_headers)

    @staticmethod
    def _reject(start_response, message):
        """406, with the supported range in the version headers (and the
        default version, the one a request without the header gets)."""
        headers = microversion.response_headers(microversion.MIN_VERSION)
        body = errors.fault_body(406, message)
        start_response('406 Not Acceptable',
                       [('Content-Type', errors.JSON),
                        ('Content-Length', str(len(body)))] + list(headers))
        return [body]


def _version_headers_on_errors(start_response):
    """``start_response`` adding the version headers to an error."""
    extra = microversion.response_headers(microversion.MIN_VERSION)

    def add_headers(status, headers, exc_info=None):
        if int(status[:3]) >= 400:
            headers = [h for h in headers if h[0].lower() != 'vary'] + extra
        return start_response(status, headers, exc_info)
    return add_headers


class JSONOnly:
    """The API speaks JSON only.

    A request whose ``Accept`` header admits no JSON (406), or whose path
    names another format by its extension (404), is answered here with
    the fault body and one INFO line; pecan would log an error for each.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        extension = posixpath.splitext(path)[1]
        if extension and extension != '.json':
            return self._refuse(start_response, environ, 404,
                                'The resource could not be found.')
        accept = environ.get('HTTP_ACCEPT')
        # /metrics answers Prometheus' text format.
        if (accept and path != request_metrics.METRICS_PATH
                and not acceptparse.create_accept_header(
                    accept).acceptable_offers([errors.JSON])):
            return self._refuse(start_response, environ, 406,
                                'The API answers application/json only, '
                                'which the Accept header excludes.')
        return self.app(environ, start_response)

    @staticmethod
    def _refuse(start_response, environ, status, message):
        LOG.info('Refused %s %s: %s',
                 errors.loggable(environ.get('REQUEST_METHOD'), 20),
                 errors.loggable(environ.get('PATH_INFO')), message)
        body = errors.fault_body(status, message)
        start_response('%d %s' % (status, errors.reason(status)),
                       [('Content-Type', errors.JSON),
                        ('Content-Length', str(len(body)))])
        return [body]


class ErrorEnvelopeMiddleware:
    """Gives any non-JSON error response the JSON fault body.

    It is also the last barrier: an exception no inner layer handled is
    logged with its traceback and answers a 500 fault, never the WSGI
    server's plain-text page.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        captured = []

        def capture(status, headers, exc_info=None):
            captured[:] = [status, headers, exc_info]
            return _no_write

        try:
            app_iter = self.app(environ, capture)
        except Exception:
            LOG.exception('Unexpected error handling %s %s',
                          errors.loggable(environ.get('REQUEST_METHOD'), 20),
                          errors.loggable(environ.get('PATH_INFO')))
            body = errors.fault_body(500, errors.INTERNAL_ERROR)
            start_response('500 Internal Server Error',
                           [('Content-Type', errors.JSON),
                            ('Content-Length', str(len(body)))])
            return [body]
        status, headers, exc_info = captured
        code = int(status[:3])
        if code < 400 or _content_type(headers).startswith(errors.JSON):
            start_response(status, headers, exc_info)
            return app_iter
        try:
            text = b''.join(app_iter).decode('utf-8', 'replace')
        finally:
            if hasattr(app_iter, 'close'):
                app_iter.close()
        body = errors.fault_body(code, _plain_message(status, text))
        headers = [(k, v) for k, v in headers
                   if k.lower() not in ('content-type', 'content-length')]
        headers += [('Content-Type', errors.JSON),
                    ('Content-Length', str(len(body)))]
        start_response(status, headers, exc_info)
        return [body]


def _no_write(_data):
    raise NotImplementedError('write() is not supported')


def _content_type(headers) -> str:
    for name, value in headers:
        if name.lower() == 'content-type':
            return value
    return ''


def _plain_message(status: str, text: str) -> str:
    text = html.unescape(_TAGS.sub(' ', text))
    text = ' '.join(text.split())
    if text.startswith(status):
        text = text[len(status):].strip()
    return text or status[4:]


class NoAuthMiddleware:
    """Development authentication: identity comes from request headers.

    Missing identity headers get the configured defaults, and roles get
    Keystone's implied roles, so a plain client acts as an admin of the
    default project. A request with an ``X-Service-Token`` (Nova's, with
    ``[service_user] send_service_user_token``) carries a service token
    of role ``service`` unless ``X-Service-Roles`` names its roles:
    nothing validates tokens in this mode, as with every other header.
    """


    def __init__(self, app, default_project_id: str,
                 default_roles: list[str]):
        self.app = app
        self._project_id = default_project_id
        self._roles = ','.join(expand_roles(default_roles))

    def __call__(self, environ, start_response):
        environ.setdefault('HTTP_X_PROJECT_ID', self._project_id)
        environ.setdefault('HTTP_X_USER_ID', 'noauth')
        roles = environ.get('HTTP_X_ROLES')
        if roles is None:
            environ['HTTP_X_ROLES'] = self._roles
        else:
            environ['HTTP_X_ROLES'] = ','.join(expand_roles(
                [r.strip() for r in roles.split(',') if r.strip()]))
        environ['HTTP_X_IDENTITY_STATUS'] = 'Confirmed'
        if 'HTTP_X_SERVICE_TOKEN' in environ:
            environ.setdefault('HTTP_X_SERVICE_ROLES', ','.join(
                constants.DEFAULT_SERVICE_TOKEN_ROLES))
        return self.app(environ, start_response)


class AuthTokenMiddleware(auth_token.AuthProtocol):
    """keystonemiddleware, except for the public version documents."""

    def __call__(self, environ, start_response):
        if is_public_path(environ.get('PATH_INFO', '')):
            return self._app(environ, start_response)
        return super().__call__(environ, start_response)


class PathDispatcher:
    """Sends requests for exact ``paths`` to their own applications."""

    def __init__(self, app, paths: dict):
        self.app = app
        self._paths = paths

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO')
        app = self._paths.get(path)
        if app is None:
            return self.app(environ, start_response)
        environ[request_metrics.ROUTE_KEY] = path
        return app(environ, start_response)
