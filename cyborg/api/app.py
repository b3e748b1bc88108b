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

"""The API WSGI application and its middleware pipeline."""

from oslo_config import cfg
from oslo_middleware import cors
from oslo_middleware import healthcheck
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import opts as middleware_opts
from oslo_middleware import request_id
import pecan

from cyborg import policies
from cyborg.api import hooks
from cyborg.api import middleware
from cyborg.api import profile_cache as profile_cache_lib
from cyborg.api import request_body
from cyborg.api import request_log
from cyborg.api import request_metrics
from cyborg.api.controllers import root
from cyborg.common import patches
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi

HEALTHCHECK_PATH = '/healthcheck'


def _guarded_body(environ: dict) -> tuple[bool, object]:
    """(True, the document) :class:`request_body.BodyGuard` parsed; a
    body the guard did not parse (or refused) is left to webob."""
    if (request_body.ERROR_KEY not in environ
            and request_body.ENVIRON_KEY in environ):
        return True, environ[request_body.ENVIRON_KEY]
    return False, None


#: Pecan's request, whose ``json`` is the document the body guard parsed
#: (see :func:`patches.parsed_json_request`).
Request = patches.parsed_json_request(_guarded_body)



def setup_app(conf: cfg.ConfigOpts, transport=None,
              authorizer: policies.Authorizer | None = None):
    """Build the API application.

    ``transport`` is the RPC transport to the conductor; by default the one
    ``[DEFAULT] transport_url`` names. ``authorizer`` checks the policy
    (by default a new one on ``conf``'s policy file): a daemon passes its
    own to reload the policy file on SIGHUP.
    """
    patches.install_pecan_argspec_cache()
    if transport is None:
        transport = rpc.get_transport(conf)
    conductor_api = conductor_rpcapi.ConductorAPI(transport)
    if authorizer is None:
        authorizer = policies.Authorizer(policies.get_enforcer(conf))
    profile_cache = profile_cache_lib.ProfileCache(
        conf.api.device_profile_cache_ttl,
        probe_ttl=conf.api.alternatives_probe_ttl,
        probe_max_stale=conf.api.alternatives_probe_max_stale)
    app = pecan.Pecan(root.RootController(),
                      hooks=[hooks.ContextHook(conf, conductor_api,
                                               authorizer, profile_cache),
                             hooks.JSONHook(), hooks.ErrorHook()],
                      force_canonical=False,
                      guess_content_type_from_ext=True,
                      request_cls=Request)
    # Outermost last. Bodies are checked after authentication (an
    # anonymous client costs no parsing); version headers and the fault
    # envelope cover every response under /v2, the body guard's and the
    # authentication's included.
    app = request_body.BodyGuard(app, _max_body_size(conf))
    app = _auth(conf, app)
    app = middleware.JSONOnly(app)
    app = middleware.VersionMiddleware(app)
    app = middleware.ErrorEnvelopeMiddleware(app)
    app = middleware.PathDispatcher(
        app, {HEALTHCHECK_PATH: healthcheck.Healthcheck(None, conf)})
    app = request_metrics.RequestMetrics(app)
    if conf.api.access_log:
        app = request_log.RequestLog(app)
    app = request_id.RequestId(app)
    return _optional_middleware(conf, app)


def _max_body_size(conf: cfg.ConfigOpts) -> int:
    """``[oslo_middleware] max_request_body_size``, the option of
    oslo.middleware's size limiter, which :class:`request_body.BodyGuard`
    enforces instead."""
    for group, opts in middleware_opts.list_opts_sizelimit():
        conf.register_opts(opts, group=group)
    return conf.oslo_middleware.max_request_body_size


def _optional_middleware(conf: cfg.ConfigOpts, app):
    """CORS and proxy header parsing, only where configured to act."""
    cors_app = cors.CORS(app, conf)
    if conf.cors.allowed_origin:
        app = cors_app
    proxy_app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = proxy_app
    return app


def _auth(conf: cfg.ConfigOpts, app):
    if conf.api.auth_strategy == 'noauth':
        return middleware.NoAuthMiddleware(
            app, conf.api.noauth_default_project_id,
            conf.api.noauth_default_roles)
    return middleware.AuthTokenMiddleware(app, {'oslo_config_config': conf})
