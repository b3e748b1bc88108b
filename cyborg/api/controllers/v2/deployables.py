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

"""/v2/deployables: list and show deployables; program one."""

import json

import pecan

from cyborg.api import filters as filters_lib
from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.controllers.v2 import deployable_program
from cyborg.api.schemas import deployable as schema
from cyborg.common import exception
from cyborg.db import hardware
from cyborg.db import models
from cyborg.policies import deployable as policy

COLLECTION = 'deployables'
# Sort keys. ``preparation`` is not shown (showing it, or sorting by it,
# would take a new microversion).
_COLUMNS = frozenset(c.name for c in models.Deployable.__table__.columns
                     ) - {'preparation'}


def view(deployable: dict) -> dict:
    uuid = deployable['uuid']
    return {
        'uuid': uuid, 'parent_id': deployable['parent_id'],
        'root_id': deployable['root_id'], 'name': deployable['name'],
        'num_accelerators': deployable['num_accelerators'],
        'device_id': deployable['device_id'],
        'attributes_list': json.dumps(deployable['attributes_list']),
        'rp_uuid': deployable['rp_uuid'],
        'driver_name': deployable['driver_name'],
        'bitstream_id': deployable['bitstream_id'],
        'links': [base.link(COLLECTION, uuid),
                  {'href': '%s/%s/%s' % (pecan.request.base_url, COLLECTION,
                                         uuid), 'rel': 'bookmark'}],
        'created_at': base.timestamp(deployable['created_at']),
        'updated_at': base.timestamp(deployable['updated_at']),
    }


class DeployablesController(routing.Resource):

    actions = {'program': ('PATCH', 'program')}
    # openstacksdk's Deployable.patch appends the uuid once more:
    # PATCH /v2/deployables/{uuid}/program/{uuid}.
    repeated_id_actions = frozenset(['program'])

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL, query=schema.LIST_QUERY)
    def get_all(self, *, context, query):
        filters = query['filters']
        deployables = hardware.deployable_list(
            context, name=filters.get('name'),
            **filters_lib.paging(filters, _COLUMNS))
        return base.render({COLLECTION: [view(d) for d in deployables]})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, uuid, *, context, query):
        validation.check_uuid(uuid)
        return base.render(view(hardware.deployable_get(context, uuid)))

    @pecan.expose('json')
    @base.endpoint(policy.PROGRAM, body=schema.PROGRAM)
    def program(self, uuid, *, context, query, body):
        """Program the deployable with a bitstream image from Glance.

        Synchronous, as upstream: answers once the device runs the image,
        with the deployable, whose ``bitstream_id`` is the image (upstream
        leaves it unchanged).
        """
        uuid = validation.check_uuid(uuid)
        image_uuid = deployable_program.image_uuid(body)
        hardware.deployable_get(context, uuid)
        # Downloading and programming a bitstream takes far longer than
        # the other writes [api] conductor_timeout is sized for.
        conductor = pecan.request.conductor_api.with_timeout(
            pecan.request.conf.api.program_timeout)
        try:
            conductor.deployable_program(context, uuid, image_uuid)
        except exception.BitstreamNotFound as e:
            # The image is a value of the body, not the resource: 400.
            raise exception.Invalid(reason=e.message)
        return base.render(view(hardware.deployable_get(context, uuid)))
