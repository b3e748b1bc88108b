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

"""The envelope of a versioned notification payload.

The shape of Nova's versioned notifications (a serialized
oslo.versionedobjects object), with the ``cyborg_object.`` prefix::

    {"cyborg_object.name": "AcceleratorRequestPayload",
     "cyborg_object.namespace": "cyborg",
     "cyborg_object.version": "1.0",
     "cyborg_object.data": {...}}

A consumer dispatches on the name and checks the major version: a minor
version only adds fields.
"""

from typing import Any

#: The prefix of the envelope's keys.
PREFIX = 'cyborg_object.'
#: The namespace every Cyborg payload is in.
NAMESPACE = 'cyborg'

NAME_KEY = PREFIX + 'name'
NAMESPACE_KEY = PREFIX + 'namespace'
VERSION_KEY = PREFIX + 'version'
DATA_KEY = PREFIX + 'data'


def envelope(name: str, version: str, data: dict[str, Any]
             ) -> dict[str, Any]:
    """The payload ``name`` at ``version`` ("major.minor") carrying
    ``data``."""
    return {NAME_KEY: name, NAMESPACE_KEY: NAMESPACE, VERSION_KEY: version,
            DATA_KEY: data}
