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

"""The root controller: version documents and v2 dispatch."""

import pecan
import webob
from webob import exc as webob_exc

from cyborg.api import microversion
from cyborg.api import request_metrics
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.controllers.v2 import arqs
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import device_taint_rules
from cyborg.api.controllers.v2 import devices
from cyborg.api.controllers.v2 import quotas
from cyborg.common import metrics
from cyborg.policies import metrics as metrics_policy

DESCRIPTION = ('Cyborg is the OpenStack project for lifecycle management '
               'of hardware accelerators, such as GPUs, FPGAs, AI chips, '
               'security accelerators (e.g., crypto), NICs and SSDs.')


def _version_fields() -> dict:
    return {
        'max_version': microversion.as_string(microversion.MAX_VERSION),
        'min_version': microversion.as_string(microversion.MIN_VERSION),
        'status': 'CURRENT',
    }


def endpoints(member: str = '{id}') -> list[tuple[str, str]]:
    """(method, path template) of every endpoint of the API."""
    return [('GET', '/'), ('GET', '/v2'),
            ('GET', request_metrics.METRICS_PATH)] + routing.endpoints(
        RootController().collections, member)


class RootController:
    """Routes every request; see :mod:`cyborg.api.controllers.routing`."""

    def __init__(self):
        self.collections: dict[str, routing.Resource] = {
            device_profiles.COLLECTION:
                device_profiles.DeviceProfilesController(),
            devices.COLLECTION: devices.DevicesController(),
            deployables.COLLECTION: deployables.DeployablesController(),
            attributes.COLLECTION: attributes.AttributesController(),
            arqs.COLLECTION: arqs.ARQsController(),
            device_taint_rules.COLLECTION:
                device_taint_rules.DeviceTaintRulesController(),
            quotas.COLLECTION: quotas.QuotasController(),
        }
        #: The paths outside the collections, each to its handler.
        self._fixed = {'/': 'root_document', '/v2': 'v2_document',
                       request_metrics.METRICS_PATH: 'metrics'}

    @pecan.expose()
    def _route(self, args, request):
        path = [segment for segment in args if segment]
        method = request.method
        fixed = '/' + '/'.join(path)
        if fixed in self._fixed:
            request.environ[request_metrics.ROUTE_KEY] = fixed
            if method != 'GET':
                raise routing._method_not_allowed(['GET'])
            return getattr(self, self._fixed[fixed]), []
        if path[0] != 'v2' or path[1] not in self.collections:
            raise webob_exc.HTTPNotFound()
        trailing = [''] if args and args[-1] == '' else []
        resource = self.collections[path[1]]
        route = routing.template(path[1], resource, path[2:] + trailing)
        if route is not None:
            request.environ[request_metrics.ROUTE_KEY] = route
        return routing.dispatch(resource, method, path[2:] + trailing)

    # Exposed as JSON, which JSONHook makes every request ask for; the
    # response it returns carries its own content type.
    @pecan.expose('json')
    def metrics(self):
        """The metrics of every API worker process, with ``[metrics]
        api_enabled`` (else 404), for ``cyborg:metrics:get``."""
        request = pecan.request
        if not request.conf.metrics.api_enabled:
            raise webob_exc.HTTPNotFound()
        request.authorizer.authorize(metrics_policy.GET, request.context)
        return webob.Response(
            body=metrics.exposition(),
            headerlist=[('Content-Type', metrics.CONTENT_TYPE)])

    @pecan.expose('json')
    def root_document(self):
        summary = dict(id='v2', **_version_fields())
        summary['links'] = [{'href': pecan.request.base_url + '/v2',
                             'rel': 'self'}]
        return base.render({'name': 'OpenStack Cyborg API',
                            'description': DESCRIPTION,
                            'versions': [summary],
                            'default_version': summary})

    @pecan.expose('json')
    def v2_document(self):
        document = dict(id='v2.0', **_version_fields())
        document['links'] = [{'href': pecan.request.base_url + '/v2/',
                              'rel': 'self'}]
        return base.render(document)
