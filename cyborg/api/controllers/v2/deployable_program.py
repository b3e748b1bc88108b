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

"""What a ``PATCH /v2/deployables/{uuid}/program`` asks for.

:data:`cyborg.api.schemas.deployable.PROGRAM` has checked that the body
is a list of ``{op, path, value}`` objects; :func:`image_uuid` checks the
rest with upstream's wording, and turns into 400s what upstream answers
500 for (an empty value, a value that is not a list of objects).

As upstream, only the first op is read and its path is not interpreted
beyond upstream's checks: clients send ``/program`` (the API reference,
python-cyborgclient) or ``/bitstream_id`` (upstream's own tests).
"""

import re
from typing import Any

from cyborg.api import validation
from cyborg.common import exception

OPS = ('add', 'replace', 'remove')
# Paths upstream's JSON patch type refuses to change.
INTERNAL_PATHS = frozenset(['/created_at', '/id', '/links', '/updated_at',
                            '/uuid', '/name', '/num_accelerators'])
_PATH = re.compile(r'(/[\w-]+)+')


def image_uuid(ops: list[dict[str, Any]]) -> str:
    """The Glance image the body asks the deployable to be programmed
    with, in canonical form; :class:`~cyborg.common.exception.Invalid`
    (400) when the body asks for nothing valid."""
    for op in ops:
        _check_op(op)
    first = ops[0]
    if first['op'] == 'remove':
        raise exception.Invalid(reason="'remove' cannot program a "
                                       "deployable; use 'replace'")
    value = first['value']
    if (not isinstance(value, list) or not value
            or not isinstance(value[0], dict)):
        raise exception.Invalid(reason='The value of the program operation '
                                       'must be a list of one object, '
                                       '[{"image_uuid": "<Glance image '
                                       'uuid>"}]')
    if 'image_uuid' not in value[0]:
        raise exception.Invalid(reason='The program operation needs '
                                       '"image_uuid", the Glance image of '
                                       'the bitstream')
    uuid = value[0]['image_uuid']
    if not isinstance(uuid, str):
        raise exception.InvalidUUID(uuid=uuid)
    return validation.check_uuid(uuid)


def _check_op(op: dict[str, Any]) -> None:
    """Upstream's checks of one op, in its order and wording."""
    path = op['path']
    if _PATH.fullmatch(path) is None:
        raise exception.Invalid(reason="Invalid patch path '%s'" % path)
    if op['op'] not in OPS:
        raise exception.Invalid(reason="Invalid patch op '%s'; expected one "
                                       "of %s" % (op['op'], ', '.join(OPS)))
    if path in INTERNAL_PATHS:
        raise exception.Invalid(reason="'%s' is an internal attribute and "
                                       "can not be updated" % path)
    if op['op'] in ('add', 'replace') and 'value' not in op:
        raise exception.Invalid(reason="'add' and 'replace' operations need "
                                       "a value")
