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

"""Implicit device profiles: ``class:<RC>`` for each resource class the
service reports, one group asking for one accelerator of that class.

A flavor may then name ``accel:device_profile=class:PGPU`` without an
administrator writing a profile first. The names cannot be created
(a profile name holds no ``:``), changed or deleted through the API.
An implicit profile is computed when read; the first accelerator
request of one stores it as a row (ARQs reference their profile's row),
with the same uuid and groups, still read-only.
"""

from typing import Any
import uuid as uuid_lib

from cyborg.common import exception
from cyborg.domain import device_profile as dp_rules

PREFIX = 'class:'
# uuid5 namespace of implicit profiles: a profile's uuid is the same
# in every process and before and after it is stored.
_NAMESPACE = uuid_lib.UUID('2d6f4b8e-3c1a-5e7f-9b2d-4a6c8e0f1b3d')


def is_implicit(name: str | None) -> bool:
    return name is not None and name.startswith(PREFIX)


def name_of(resource_class: str) -> str:
    return PREFIX + resource_class


def resource_class_of(name: str) -> str:
    return name[len(PREFIX):]


def uuid_of(name: str) -> str:
    return str(uuid_lib.uuid5(_NAMESPACE, name))


def profile(resource_class: str) -> dict[str, Any]:
    """The implicit profile of ``resource_class``, as the database layer
    gives a stored profile."""
    name = name_of(resource_class)
    return {'uuid': uuid_of(name), 'name': name,
            'description': 'One accelerator of resource class %s '
                           '(implicit, read-only)' % resource_class,
            'groups': [{dp_rules.RESOURCES + ':' + resource_class: '1'}],
            'enabled': True, 'created_at': None, 'updated_at': None}


def check_writable(name: str) -> None:
    """403 when ``name`` is an implicit profile's."""
    if is_implicit(name):
        raise exception.Forbidden(
            reason='Device profile %s is implicit and read-only: it cannot '
                   'be updated or deleted' % name)
