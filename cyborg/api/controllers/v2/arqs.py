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

"""/v2/accelerator_requests: create, list, show, bind, unbind and delete
accelerator requests (ARQs).

Reads go to the database directly, scoped to the caller's project unless
the caller is an admin; every write goes to the conductor, and only after
the whole request has been validated. Binding, unbinding and deleting the
ARQs of an instance belong to Nova, so they need a service token (a token
whose roles include one of ``[keystone_authtoken] service_token_roles``).
"""

from typing import Any

from oslo_config import cfg
from oslo_utils import uuidutils
import pecan

from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.schemas import arq as schema
from cyborg.api import validation
from cyborg.domain import arq_states as states
from cyborg.common import constants
from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.domain import device_profile as dp_rules

COLLECTION = 'accelerator_requests'
PROJECT_ID_VERSION = (2, 1)
BIND_ERROR_VERSION = (2, 5)
UPDATE_RULE = 'cyborg:arq:update'
RESOLVED = 'resolved'

BIND_FIELDS = ('hostname', 'device_rp_uuid', 'instance_uuid')
_UUID_FIELDS = frozenset(['device_rp_uuid', 'instance_uuid'])
_PROJECT_ID_PATH = '/project_id'
_PATHS = frozenset(['/' + field for field in BIND_FIELDS])
_MAX_LENGTH = 255


def view(arq: dict[str, Any]) -> dict[str, Any]:
    """An ARQ as the API shows it: its state as clients know it
    (:func:`states.shown`), attach handles only once Bound, and from 2.5
    why a bind failed (``bind_error``, null unless it failed; also while
    a failure is still being reported to Nova as ``BindStarted``)."""
    bound = arq['state'] == states.BOUND
    info = (arq['attach_handle_info'] or {}) if bound else {}
    result = {
        'uuid': arq['uuid'],
        'state': states.shown(arq['state']),
        'device_profile_name': arq['device_profile_name'],
        'device_profile_group_id': arq['device_profile_group_id'],
        'hostname': arq['hostname'],
        'device_rp_uuid': arq['device_rp_uuid'],
        'instance_uuid': arq['instance_uuid'],
        'project_id': arq['project_id'],
        'attach_handle_type': (arq['attach_handle_type'] or '') if bound
        else '',
        'attach_handle_uuid': arq['attach_handle_uuid'] if bound else None,
        'attach_handle_info': {str(key): str(value)
                               for key, value in info.items()},
        'links': [base.link(COLLECTION, arq['uuid'])],
        'created_at': base.timestamp(arq['created_at']),
        'updated_at': base.timestamp(arq['updated_at']),
    }
    if base.version_at_least(BIND_ERROR_VERSION):
        result['bind_error'] = (arq['bind_error'] if arq['state']
                                in states.FAILED else None)
    return result


def _scope(context) -> str | None:
    """The project whose ARQs the caller sees; None (all) for admins."""
    return None if context.is_admin else context.project_id


def _conf() -> cfg.ConfigOpts:
    """The configuration the application was built with."""
    conf = getattr(pecan.request, 'conf', None)
    if conf is None:
        conf = pecan.request.authorizer.enforcer.conf
    return conf


def service_token_roles() -> list[str]:
    """``[keystone_authtoken] service_token_roles``, or its default when
    keystonemiddleware's options are not registered (noauth mode)."""
    try:
        roles = _conf().keystone_authtoken.service_token_roles
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return list(constants.DEFAULT_SERVICE_TOKEN_ROLES)
    return list(roles or ())


def has_service_token(context) -> bool:
    """Whether the request carries a service token of a service role."""
    wanted = {role.lower() for role in service_token_roles()}
    return any(role.lower() in wanted
               for role in context.service_roles or ())


def _require_service_token(context) -> None:
    if not has_service_token(context):
        raise exception.ServiceTokenRequired()


def _lookup(context, uuids: list[str]) -> list[dict[str, Any]]:
    """The caller-visible ARQs ``uuids`` name, in that order; 404 for the
    first one that is missing or belongs to another project."""
    found = {arq['uuid']: arq
             for arq in arq_db.arq_list(context, _scope(context),
                                        uuids=uuids)}
    for uuid in uuids:
        if uuid not in found:
            raise exception.ARQNotFound(uuid=uuid)
    return [found[uuid] for uuid in uuids]


def _check_items(what: str, count: int) -> None:
    """400 when one request names more than [api] max_items_per_request
    ARQs."""
    dp_rules.check_limit(what, count, _conf().api.max_items_per_request,
                         '[api] max_items_per_request')


def _uuid_list(value: str) -> list[str]:
    """A comma-separated list of ARQ uuids, canonical and de-duplicated."""
    items = value.split(',')
    _check_items('ARQ uuids in the request', len(items))
    uuids = [validation.check_uuid(item) for item in items]
    return list(dict.fromkeys(uuids))


def _patch_error(reason: str) -> exception.Invalid:
    return exception.Invalid(reason="Couldn't apply patch. Reason: %s"
                                    % reason)


def _patches(body: Any, member: str | None) -> dict[str, list[dict]]:
    """ARQ uuid -> ops, from the collection or the member form.

    ``PATCH /{uuid}`` takes the bare op list, or the collection's object
    with that one uuid as its only key (what openstacksdk sends).
    """
    if member is not None:
        member = validation.check_uuid(member)
        if not isinstance(body, dict):
            validation.validate(schema.OPS, body)
            return {member: body}
    validation.validate(schema.PATCH, body)
    _check_items('ARQs in the patch', len(body))
    patches: dict[str, list[dict]] = {}
    for key, ops in body.items():
        uuid = validation.check_uuid(key)
        if uuid in patches:
            raise _patch_error('ARQ %s given more than once' % uuid)
        patches[uuid] = ops
    if member is not None and list(patches) != [member]:
        raise _patch_error('the body may only patch ARQ %s' % member)
    return patches


def _check_path(path: str, context) -> None:
    if path == _PROJECT_ID_PATH:
        if not base.version_at_least(PROJECT_ID_VERSION):
            raise exception.MicroversionTooLow(
                version='%d.%d' % PROJECT_ID_VERSION)
        if not context.is_admin:
            raise exception.PolicyNotAuthorized(action=UPDATE_RULE)
    elif path not in _PATHS:
        raise _patch_error('Invalid path in patch %s' % path)


def _valid_value(field: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if field in _UUID_FIELDS:
        return uuidutils.is_uuid_like(value)
    return 0 < len(value) <= _MAX_LENGTH


def _binding(ops: list[dict], context) -> dict[str, str] | None:
    """What one ARQ's ops ask for: its bind fields, or None to unbind."""
    kinds = {op['op'] for op in ops}
    if kinds not in ({'add'}, {'remove'}):
        raise _patch_error('Every op must be add or remove')
    for op in ops:
        _check_path(op['path'], context)
    if kinds == {'remove'}:
        return None
    values: dict[str, Any] = {}
    for op in ops:
        if 'value' not in op:
            raise _patch_error('Missing value for %s' % op['path'])
        field = op['path'][1:]
        if field in values:
            raise _patch_error('Duplicate path in patch %s' % op['path'])
        values[field] = op['value']
    absent = [field for field in BIND_FIELDS if values.get(field) is None]
    if absent:
        raise _patch_error('Fields absent in patch %s' % ','.join(absent))
    bad = [field for field in BIND_FIELDS
           if not _valid_value(field, values[field])]
    project_id = values.get('project_id')
    if project_id is not None and not (isinstance(project_id, str)
                                       and len(project_id) <= _MAX_LENGTH):
        bad.append('project_id')
    if bad:
        raise _patch_error('Invalid values in patch for %s' % ','.join(bad))
    binding = {field: values[field] for field in BIND_FIELDS}
    for field in _UUID_FIELDS:
        binding[field] = validation.canonical_uuid(binding[field])
    if project_id:
        binding['project_id'] = project_id
    return binding


class ARQsController(routing.Resource):

    _ALLOWED_LIST_QUERY = frozenset(['instance', 'bind_state'])
    _ALLOWED_DELETE_QUERY = frozenset(['arqs', 'instance'])

    @pecan.expose(content_type=base.JSON)
    def get_all(self, **kwargs):
        context = base.authorize('cyborg:arq:get_all')
        query = validation.check_query(base.query(), self._ALLOWED_LIST_QUERY)
        instance = query.get('instance')
        if instance is not None:
            instance = validation.check_uuid(instance)
        bind_state = query.get('bind_state')
        if bind_state is not None and bind_state != RESOLVED:
            raise exception.Invalid(reason='Invalid bind_state %r; the only '
                                           'value allowed is "%s"'
                                           % (bind_state, RESOLVED))
        arqs = arq_db.arq_list(context, _scope(context),
                               instance_uuid=instance)
        if bind_state is not None:
            resolved = [arq for arq in arqs
                        if states.resolved(arq['state'])]
            if instance is not None and len(resolved) != len(arqs):
                # Nova waits until every ARQ of the instance is resolved.
                return base.render({'error_message': 'null'}, status=423)
            arqs = resolved
        return base.render({'arqs': [view(arq) for arq in arqs]})

    @pecan.expose(content_type=base.JSON)
    def get_one(self, uuid, **kwargs):
        context = base.authorize('cyborg:arq:get_one')
        validation.check_query(base.query(), frozenset())
        uuid = validation.check_uuid(uuid)
        return base.render(view(arq_db.arq_get(context, uuid,
                                               _scope(context))))

    @pecan.expose(content_type=base.JSON)
    def post(self, **kwargs):
        context = base.authorize('cyborg:arq:create')
        validation.check_query(base.query(), frozenset())
        body = validation.parse_json_body(pecan.request)
        validation.validate(schema.CREATE, body)
        arqs = pecan.request.conductor_api.arq_create(
            context, body['device_profile_name'])
        return base.render({'arqs': [view(arq) for arq in arqs]},
                           status=201)

    @pecan.expose(content_type=base.JSON)
    def patch(self, *args, **kwargs):
        """Bind or unbind ARQs: ``{uuid: [ops]}``, or ``[ops]`` on
        ``/{uuid}``. All the ARQs of a request are bound, or all unbound.
        """
        context = base.authorize(UPDATE_RULE)
        _require_service_token(context)
        validation.check_query(base.query(), frozenset())
        body = validation.parse_json_body(pecan.request)
        patches = _patches(body, args[0] if args else None)
        bindings = {uuid: _binding(ops, context)
                    for uuid, ops in patches.items()}
        unbinds = [uuid for uuid, binding in bindings.items()
                   if binding is None]
        if unbinds and len(unbinds) != len(bindings):
            raise _patch_error('A request must either bind or unbind all '
                               'of its ARQs')
        # The conductor answers 404 for ARQs the caller cannot see.
        conductor = pecan.request.conductor_api
        if unbinds:
            conductor.arq_unbind(context, unbinds)
        else:
            conductor.arq_bind(context, bindings)
        return base.no_content(202)

    @pecan.expose(content_type=base.JSON)
    def delete(self, *args, **kwargs):
        """Delete ``?arqs=<uuid>[,<uuid>...]`` (or ``/{uuid}``) or every
        ARQ of ``?instance=<uuid>``."""
        context = base.authorize('cyborg:arq:delete')
        query = validation.check_query(base.query(),
                                       self._ALLOWED_DELETE_QUERY)
        # Only arqs and instance are allowed, and the path form is arqs.
        if len(query) + len(args) != 1:
            raise exception.Invalid(reason='Provide either an ARQ uuid list '
                                           'or an instance UUID')
        if args:
            query = {'arqs': args[0]}
        conductor = pecan.request.conductor_api
        if 'instance' in query:
            _require_service_token(context)
            instance = validation.check_uuid(query['instance'])
            conductor.arq_delete(context, instance_uuid=instance)
            return base.no_content()
        uuids = _uuid_list(query['arqs'])
        arqs = _lookup(context, uuids)
        if not has_service_token(context):
            for arq in arqs:
                if arq['instance_uuid']:
                    raise exception.ARQBoundToInstance(
                        uuid=arq['uuid'], instance=arq['instance_uuid'])
        conductor.arq_delete(context, uuids=uuids)
        return base.no_content()
