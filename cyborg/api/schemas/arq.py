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

"""JSON Schema of accelerator request (ARQ) requests.

The body schemas check only the shape of a body; what the values of a
bind PATCH mean (op kinds, paths, the fields a bind needs) is checked by
:func:`cyborg.api.arq_patch.bindings`, which words its errors the way
clients expect.
"""

from cyborg.api.schemas import common

LIST_QUERY = common.query(instance=common.STRING,
                          bind_state=common.STRING)
#: ``?arqs=<uuid>[,<uuid>...]`` or ``?instance=<uuid>``.
DELETE_QUERY = common.query(arqs=common.STRING, instance=common.STRING)

CREATE = {
    'type': 'object',
    'properties': {
        # An empty name is no profile's: 404 from the lookup, as
        # upstream answers (a missing field is still a 400).
        'device_profile_name': {'type': 'string', 'maxLength': 255},
        # Accepted and ignored, as upstream does.
        'device_profile_group_id': {},
        'image_uuid': {},
    },
    'required': ['device_profile_name'],
    'additionalProperties': False,
}

# One JSON-Patch-like operation; ``value`` is required for ``add`` only.
OPS = common.PATCH_OPS

PATCH = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': OPS,
}

# PATCH on a member, /{uuid}: the bare op list, or the collection's
# object (what openstacksdk sends).
PATCH_MEMBER = {
    'if': {'not': {'type': 'object'}},
    'then': OPS,
    'else': PATCH,
}
