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

"""/v2/attributes: key/value pairs of deployables."""

from oslo_utils import uuidutils
import pecan

from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.schemas import attribute as schema
from cyborg.common import exception
from cyborg.db import hardware
from cyborg.policies import attribute as policy

COLLECTION = 'attributes'


def view(attribute: dict) -> dict:
    return {
        'uuid': attribute['uuid'],
        'deployable_id': attribute['deployable_id'],
        'key': attribute['key'], 'value': attribute['value'],
        'links': [base.link(COLLECTION, attribute['uuid'])],
        'created_at': base.timestamp(attribute['created_at']),
        'updated_at': base.timestamp(attribute['updated_at']),
    }


def _creation_values(body) -> dict:
    values = dict(body.get('attribute', body))
    values['deployable_id'] = int(values['deployable_id'])
    values['value'] = validation.check_text_size(str(values['value']),
                                                 'value')
    if 'uuid' in values:
        if not uuidutils.is_uuid_like(values['uuid']):
            raise exception.InvalidUUID(uuid=values['uuid'])
        values['uuid'] = validation.canonical_uuid(values['uuid'])
    return values


class AttributesController(routing.Resource):

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL, query=schema.LIST_QUERY)
    def get_all(self, *, context, query):
        deployable_id = query.get('deployable_id')
        if deployable_id is not None:
            deployable_id = validation.parse_integer(
                deployable_id, 'deployable_id', minimum=1)
        attributes = hardware.attribute_list(context, deployable_id,
                                             query.get('key'))
        return base.render({COLLECTION: [view(a) for a in attributes]})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, uuid, *, context, query):
        validation.check_uuid(uuid)
        return base.render(view(hardware.attribute_get(context, uuid)))

    @pecan.expose('json')
    @base.endpoint(policy.CREATE, body=schema.CREATE)
    def post(self, *, context, query, body):
        values = _creation_values(body)
        attribute = pecan.request.conductor_api.attribute_create(context,
                                                                 values)
        return base.render(view(attribute), status=201)

    @pecan.expose('json')
    @base.endpoint(policy.DELETE)
    def delete(self, uuid=None, *, context, query):
        if uuid is None:
            raise exception.Invalid(reason='DELETE needs an attribute uuid '
                                           'in the path')
        pecan.request.conductor_api.attribute_delete(context, uuid)
        return base.no_content()
