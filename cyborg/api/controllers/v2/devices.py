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

"""/v2/devices: list and show devices; disable and enable them; set or
pin a partitioned GPU's profile (2.10)."""

import pecan

from cyborg.api import filters as filters_lib
from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.schemas import device as schema
from cyborg.common import exception
from cyborg.db import hardware
from cyborg.db import models
from cyborg.db import taints as taints_db
from cyborg.domain import arq_states
from cyborg.domain import devices
from cyborg.domain import partitions as partition_rules
from cyborg.domain import utilization
from cyborg.policies import device as policy

COLLECTION = 'devices'
# Sort keys: every column but the utilization document.
_COLUMNS = frozenset(c.name for c in models.Device.__table__.columns
                     ) - {'utilization'}


def view(device: dict, taints: dict | None = None) -> dict:
    """A device as the request's version shows it; ``deployables``
    (from 2.7) only when ``device`` was read with its allocations (see
    :func:`_shows_allocations`); ``taints`` from 2.8 (``taints``: the
    devices' taints by device id, see :func:`_taints`); ``partitions``
    from 2.10 (null: the device is not partitioned)."""
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
    if base.version_at_least(microversion.DEVICE_STATUS):
        result['status'] = device['status']
    if base.version_at_least(microversion.DEVICE_HEALTH):
        result['health'] = device['health']
        result['missing'] = device['missing']
    if base.version_at_least(microversion.DEVICE_UTILIZATION):
        result['utilization'] = utilization.from_stored(
            device.get('utilization'))
    if base.version_at_least(microversion.DEVICE_ALLOCATIONS):
        result['health_reason'] = device['health_reason']
        result['health_since'] = base.timestamp(device['health_since'])
        if 'deployables' in device:
            result['deployables'] = [_deployable_view(deployable)
                                     for deployable in device['deployables']]
    if base.version_at_least(microversion.DEVICE_TAINTS):
        result['taints'] = [_taint_view(taint) for taint
                            in (taints or {}).get(device['id'], ())]
    if base.version_at_least(microversion.DEVICE_PARTITIONS):
        result['partitions'] = partition_rules.from_stored(
            device.get('partitions'))
    return result


def _taint_view(taint) -> dict:
    return {'key': taint.key, 'value': taint.value,
            'effect': taint.effect.value, 'source': taint.source.value,
            'reason': taint.reason or None,
            'added_at': base.timestamp(taint.added_at)}


def _taints(context, devices: list[dict]) -> dict | None:
    """The taints of ``devices`` by device id, when the request's version
    shows them (one query; none below 2.8)."""
    if not base.version_at_least(microversion.DEVICE_TAINTS):
        return None
    return taints_db.effective_taints(context,
                                      [device['id'] for device in devices])


def _deployable_view(deployable: dict) -> dict:
    return {
        'uuid': deployable['uuid'], 'name': deployable['name'],
        'parent_uuid': deployable['parent_uuid'],
        'num_accelerators': deployable['num_accelerators'],
        'allocations': [
            {'arq_uuid': arq['uuid'], 'state': arq_states.shown(arq['state']),
             'instance_uuid': arq['instance_uuid'],
             'project_id': arq['project_id']}
            for arq in deployable['allocations']],
    }


def _shows_allocations(context) -> bool:
    """Whether the request shows who holds the devices: from 2.7, to
    admins only (they name other projects and their instances)."""
    return (context.is_admin
            and base.version_at_least(microversion.DEVICE_ALLOCATIONS))


def _list_query(*_path: str) -> dict:
    """The list's query schema for the request's version."""
    if base.version_at_least(microversion.DEVICE_STATUS):
        return schema.LIST_QUERY_2_3
    return schema.LIST_QUERY


class DevicesController(routing.Resource):

    actions = {'disable': ('POST', 'disable'), 'enable': ('POST', 'enable'),
               'partitions': ('PUT', 'set_partitions')}

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL, query=_list_query)
    def get_all(self, *, context, query):
        filters = query.pop('filters')
        rows = hardware.device_list(
            context, query, allocations=_shows_allocations(context),
            **filters_lib.paging(filters, _COLUMNS))
        taints = _taints(context, rows)
        return base.render({COLLECTION: [view(d, taints) for d in rows]})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, uuid, *, context, query):
        device = hardware.device_get(
            context, uuid, allocations=_shows_allocations(context))
        return base.render(view(device, _taints(context, [device])))

    @pecan.expose('json')
    @base.endpoint(policy.DISABLE)
    def disable(self, uuid, *, context, query):
        return _set_status(context, uuid, devices.MAINTAINING)

    @pecan.expose('json')
    @base.endpoint(policy.ENABLE)
    def enable(self, uuid, *, context, query):
        return _set_status(context, uuid, devices.ENABLED)


    @pecan.expose('json')
    @base.endpoint(policy.SET_PARTITIONS, body=schema.PARTITIONS)
    def set_partitions(self, uuid, *, context, query, body):
        """Have a partitioned GPU serve ``profile`` (pinned or not):
        accepted (202) once its agent has set it; its ``partitions``
        show it from the report that follows."""
        if not base.version_at_least(microversion.DEVICE_PARTITIONS):
            raise exception.MicroversionTooLow(
                version=microversion.as_string(
                    microversion.DEVICE_PARTITIONS))
        if body['profile'] is None and body['pinned']:
            raise exception.Invalid(
                reason='pinned needs a profile: a null profile leaves the '
                'choice to the driver\'s policy')
        pecan.request.conductor_api.device_set_partitions(
            context, uuid, body['profile'], body['pinned'])
        return base.no_content(202)


def _set_status(context, uuid: str, status: str) -> str:
    pecan.request.conductor_api.device_set_status(context, uuid, status)
    return base.no_content()
