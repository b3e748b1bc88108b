"""The API WSGI application and its middleware pipeline."""

from oslo_config import cfg
from oslo_middleware import cors
from oslo_middleware import healthcheck
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
from oslo_middleware import sizelimit
import pecan

from cyborg.api.controllers import root
from cyborg.api import hooks
from cyborg.api import middleware
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg import policies

HEALTHCHECK_PATH = '/healthcheck'


def setup_app(conf: cfg.ConfigOpts, transport=None):
    """Build the API application.

    ``transport`` is the RPC transport to the conductor; by default the one
    ``[DEFAULT] transport_url`` names.
    """
    if transport is None:
        transport = rpc.get_transport(conf)
    conductor_api = conductor_rpcapi.ConductorAPI(transport)
    enforcer = policies.get_enforcer(conf)
    app = pecan.Pecan(root.RootController(),
                      hooks=[hooks.ContextHook(conf, conductor_api, enforcer),
                             hooks.ErrorHook()],
                      force_canonical=False,
                      guess_content_type_from_ext=True)
    app = middleware.VersionMiddleware(app)
    app = _auth(conf, app)
    app = middleware.ErrorEnvelopeMiddleware(app)
    app = sizelimit.RequestBodySizeLimiter(app, conf)
    app = middleware.PathDispatcher(
        app, {HEALTHCHECK_PATH: healthcheck.Healthcheck(None, conf)})
    app = request_id.RequestId(app)
    app = cors.CORS(app, conf)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app


def _auth(conf: cfg.ConfigOpts, app):
    if conf.api.auth_strategy == 'noauth':
        return middleware.NoAuthMiddleware(
            app, conf.api.noauth_default_project_id,
            conf.api.noauth_default_roles)
    return middleware.AuthTokenMiddleware(app, {'oslo_config_config': conf})
