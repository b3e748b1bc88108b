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

"""What a bind or unbind PATCH of accelerator requests asks for.

:data:`cyborg.api.schemas.arq.PATCH` (or ``PATCH_MEMBER``) has checked
the body's shape; :func:`requested` checks the rest and words its errors
as upstream does (``Couldn't apply patch. Reason: ...``), which clients
match on.
"""

from typing import Any
from typing import NamedTuple

from oslo_utils import uuidutils

from cyborg.api import microversion
from cyborg.api import validation
from cyborg.common import exception
from cyborg.domain import arqs as arq_rules
from cyborg.domain import device_profile as dp_rules

_UUID_FIELDS = frozenset(['device_rp_uuid', 'instance_uuid'])
_PROJECT_ID_PATH = '/project_id'
_PATHS = frozenset(['/' + field for field in arq_rules.BIND_FIELDS])
_MAX_LENGTH = 255


class Request(NamedTuple):
    """The ARQs a PATCH binds (uuid -> bind fields) or unbinds (uuids);
    one of the two is empty."""
    bind: dict[str, dict[str, str]]
    unbind: list[str]


def patch_error(reason: str) -> exception.Invalid:
    return exception.Invalid(reason="Couldn't apply patch. Reason: %s"
                                    % reason)


def requested(body: Any, member: str | None, *, version: tuple[int, int],
              is_admin: bool, max_items: int,
              update_rule: str) -> Request:
    """The bindings ``body`` asks for (400 when it is no valid patch).

    ``member`` is the uuid of ``PATCH /{uuid}``, None on the collection;
    ``version`` the request's microversion; ``is_admin`` whether the
    caller may set ``/project_id`` (PolicyNotAuthorized naming
    ``update_rule`` otherwise); at most ``max_items`` ARQs.
    """
    bindings = {}
    for uuid, ops in _patches(body, member, max_items).items():
        bindings[uuid] = _binding(ops, version, is_admin, update_rule)
    unbinds = [uuid for uuid, binding in bindings.items() if binding is None]
    if unbinds and len(unbinds) != len(bindings):
        raise patch_error('A request must either bind or unbind all of its '
                          'ARQs')
    if unbinds:
        return Request(bind={}, unbind=unbinds)
    return Request(bind=bindings, unbind=[])


def _patches(body: Any, member: str | None,
             max_items: int) -> dict[str, list[dict]]:
    """ARQ uuid -> ops, from the collection or the member form.

    ``PATCH /{uuid}`` takes the bare op list, or the collection's object
    with that one uuid as its only key (what openstacksdk sends).
    """
    if member is not None:
        member = validation.check_uuid(member)
        if not isinstance(body, dict):
            return {member: body}
    dp_rules.check_limit('ARQs in the patch', len(body), max_items,
                         '[api] max_items_per_request')
    patches: dict[str, list[dict]] = {}
    for key, ops in body.items():
        uuid = validation.check_uuid(key)
        if uuid in patches:
            raise patch_error('ARQ %s given more than once' % uuid)
        patches[uuid] = ops
    if member is not None and list(patches) != [member]:
        raise patch_error('the body may only patch ARQ %s' % member)
    return patches


def _check_path(path: str, version: tuple[int, int], is_admin: bool,
                update_rule: str) -> None:
    if path == _PROJECT_ID_PATH:
        if version < microversion.ARQ_BIND_PROJECT_ID:
            raise exception.MicroversionTooLow(
                version=microversion.as_string(
                    microversion.ARQ_BIND_PROJECT_ID))
        if not is_admin:
            raise exception.PolicyNotAuthorized(action=update_rule)
    elif path not in _PATHS:
        raise patch_error('Invalid path in patch %s' % path)


def _valid_value(field: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if field in _UUID_FIELDS:
        return uuidutils.is_uuid_like(value)
    return 0 < len(value) <= _MAX_LENGTH


def _values(ops: list[dict]) -> dict[str, Any]:
    """path (without its slash) -> value of add ops."""
    values: dict[str, Any] = {}
    for op in ops:
        if 'value' not in op:
            raise patch_error('Missing value for %s' % op['path'])
        field = op['path'][1:]
        if field in values:
            raise patch_error('Duplicate path in patch %s' % op['path'])
        values[field] = op['value']
    return values


def _binding(ops: list[dict], version: tuple[int, int], is_admin: bool,
             update_rule: str) -> dict[str, str] | None:
    """What one ARQ's ops ask for: its bind fields, or None to unbind."""
    kinds = {op['op'] for op in ops}
    if kinds not in ({'add'}, {'remove'}):
        raise patch_error('Every op must be add or remove')
    for op in ops:
        _check_path(op['path'], version, is_admin, update_rule)
    if kinds == {'remove'}:
        return None
    values = _values(ops)
    absent = [field for field in arq_rules.BIND_FIELDS
              if values.get(field) is None]
    if absent:
        raise patch_error('Fields absent in patch %s' % ','.join(absent))
    bad = [field for field in arq_rules.BIND_FIELDS
           if not _valid_value(field, values[field])]
    project_id = values.get('project_id')
    if project_id is not None and not (isinstance(project_id, str)
                                       and len(project_id) <= _MAX_LENGTH):
        bad.append('project_id')
    if bad:
        raise patch_error('Invalid values in patch for %s' % ','.join(bad))
    binding = {field: values[field] for field in arq_rules.BIND_FIELDS}
    for field in _UUID_FIELDS:
        binding[field] = validation.canonical_uuid(binding[field])
    if project_id:
        binding['project_id'] = project_id
    return binding
