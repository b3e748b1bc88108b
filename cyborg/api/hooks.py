"""Pecan hooks: the request context and error responses."""

from oslo_log import log as logging
from webob import exc as webob_exc
from pecan import hooks

from cyborg.api import errors
from cyborg.api import microversion
from cyborg.common import exception
from cyborg import context as cyborg_context

LOG = logging.getLogger(__name__)


class ContextHook(hooks.PecanHook):
    """Attaches what a controller needs to ``pecan.request``."""

    def __init__(self, conf, conductor_api, authorizer, profile_cache):
        self._conf = conf
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
        base = self._conf.api.public_endpoint or request.application_url
        request.base_url = base.rstrip('/')


class ErrorHook(hooks.PecanHook):
    """Turns cyborg exceptions into JSON fault responses."""

    def on_error(self, state, error):
        if not isinstance(error, exception.CyborgException):
            if isinstance(error, webob_exc.HTTPException):
                return None
            LOG.exception('Unexpected error handling %s %s',
                          state.request.method, state.request.path)
        status, message = errors.status_and_message(error)
        if status >= 500 and isinstance(error, exception.CyborgException):
            LOG.error('Error handling %s %s: %s', state.request.method,
                      state.request.path, message)
        return errors.http_error(status, message)
