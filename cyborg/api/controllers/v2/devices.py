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

"""/v2/devices: list and show devices; disable and enable them."""

import pecan

from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api import filters as filters_lib
from cyborg.api import validation
from cyborg.db import hardware
from cyborg.db import models

COLLECTION = 'devices'
STATUS_VERSION = (2, 3)
HEALTH_VERSION = (2, 4)
_COLUMNS = frozenset(c.name for c in models.Device.__table__.columns)


def view(device: dict) -> dict:
    result = {
        'uuid': device['uuid'], 'type': device['type'],
        'vendor': device['vendor'], 'model': device['model'],
        'std_board_info': device['std_board_info'],
        'vendor_board_info': device['vendor_board_info'],
        'hostname': device['hostname'],
        'links': [base.link(COLLECTION, device['uuid'])],
        'created_at': base.timestamp(device['created_at']),
        'updated_at': base.timestamp(device['updated_at']),
    }
    if base.version_at_least(STATUS_VERSION):
        result['status'] = device['status']
    if base.version_at_least(HEALTH_VERSION):
        result['health'] = device['health']
        result['missing'] = device['missing']
    return result


class DevicesController(routing.Resource):

    actions = {'disable': ('POST', 'disable'), 'enable': ('POST', 'enable')}

    def _allowed_filters(self) -> frozenset[str]:
        allowed = {'type', 'vendor', 'hostname'}
        if base.version_at_least(STATUS_VERSION):
            allowed.add('status')
        return frozenset(allowed)

    @pecan.expose(content_type=base.JSON)
    def get_all(self, **kwargs):
        context = base.authorize('cyborg:device:get_all')
        plain, filters = filters_lib.split(base.query())
        query = validation.check_query(plain, self._allowed_filters())
        devices = hardware.device_list(
            context, query, **filters_lib.paging(filters, _COLUMNS))
        return base.render({COLLECTION: [view(d) for d in devices]})

    @pecan.expose(content_type=base.JSON)
    def get_one(self, uuid, **kwargs):
        context = base.authorize('cyborg:device:get_one')
        validation.check_query(base.query(), frozenset())
        return base.render(view(hardware.device_get(context, uuid)))

    def _set_status(self, rule: str, uuid: str, status: str):
        context = base.authorize(rule)
        validation.check_query(base.query(), frozenset())
        pecan.request.conductor_api.device_set_status(context, uuid, status)
        return base.no_content()

    @pecan.expose(content_type=base.JSON)
    def disable(self, uuid, **kwargs):
        return self._set_status('cyborg:device:disable', uuid,
                                'maintaining')

    @pecan.expose(content_type=base.JSON)
    def enable(self, uuid, **kwargs):
        return self._set_status('cyborg:device:enable', uuid, 'enabled')
