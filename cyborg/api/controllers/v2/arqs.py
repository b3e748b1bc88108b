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
ARQs of an instance belong to Nova: besides ``cyborg:arq:update`` or
``cyborg:arq:delete`` they need the policy rule ``arq_instance_binding``,
by default a service token (a token whose roles include one of
``[keystone_authtoken] service_token_roles``).
"""

from collections.abc import Callable
from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils
import pecan

from cyborg.api import microversion
from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.controllers.v2 import arq_patch
from cyborg.api.schemas import arq as schema
from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.db import taints as taints_db
from cyborg.domain import arq_states as states
from cyborg.domain import arqs as arq_rules
from cyborg.domain import device_health
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import restore
from cyborg.policies import arq as policy

LOG = logging.getLogger(__name__)

COLLECTION = 'accelerator_requests'
RESOLVED = 'resolved'
#: Nova's operations: refused without a service token by default.
_SERVICE_TOKEN = (policy.INSTANCE_BINDING, exception.ServiceTokenRequired)


def view(arq: dict[str, Any],
         health: dict[int, device_health.DeviceHealth] | None = None
         ) -> dict[str, Any]:
    """An ARQ as the API shows it: its state as clients know it
    (:func:`states.shown`), attach handles only once Bound, from 2.5
    why a bind failed (``bind_error``, null unless it failed; also while
    a failure is still being reported to Nova as ``BindStarted``, and
    for a Bound ARQ whose handle its agent could not restore), and
    from 2.8 the health of its device (``device_health``, from
    ``health``: by deployable id, see :func:`_device_health`; null
    without a device), from 2.9 the ordered alternative of its group its
    bind matched (``alternative``)."""
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
    if base.version_at_least(microversion.ARQ_BIND_ERROR):
        result['bind_error'] = restore.shown_bind_error(arq['state'],
                                                        arq['bind_error'])
    if base.version_at_least(microversion.DEVICE_TAINTS):
        graded = (health or {}).get(arq.get('deployable_id'))
        result['device_health'] = None if graded is None else {
            'status': graded.status, 'reason': graded.reason,
            'since': base.timestamp(graded.since)}
    if base.version_at_least(microversion.PROFILE_UPDATES):
        # Which ordered alternative of its group its bind matched (null
        # for a group without alternatives, or while not bound).
        result['alternative'] = arq.get('alternative')
    return result


def _device_health(context, arqs: list[dict[str, Any]]
                   ) -> dict[int, device_health.DeviceHealth] | None:
    """The health of the devices ``arqs`` hold, by deployable id, when
    the request's version shows it (two queries; none below 2.8)."""
    if not base.version_at_least(microversion.DEVICE_TAINTS):
        return None
    states_of = taints_db.device_states(
        context, {arq['deployable_id'] for arq in arqs
                  if arq.get('deployable_id') is not None})
    now = timeutils.utcnow()
    timeout = pecan.request.conf.taints.health_unknown_after
    return {deployable_id: device_health.grade(state, now, timeout)
            for deployable_id, state in states_of.items()}


def _views(context, arqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    health = _device_health(context, arqs)
    return [view(arq, health) for arq in arqs]


def _max_items() -> int:
    return pecan.request.conf.api.max_items_per_request


def _lookup(context, uuids: list[str]) -> list[dict[str, Any]]:
    """The caller-visible ARQs ``uuids`` name, in that order; 404 for the
    first one that is missing or belongs to another project."""
    scope = arq_rules.project_scope(context)
    found = {arq['uuid']: arq
             for arq in arq_db.arq_list(context, scope, uuids=uuids)}
    for uuid in uuids:
        if uuid not in found:
            raise exception.ARQNotFound(uuid=uuid)
    return [found[uuid] for uuid in uuids]


def _uuid_list(value: str) -> list[str]:
    """A comma-separated list of ARQ uuids, canonical and de-duplicated."""
    items = value.split(',')
    dp_rules.check_limit('ARQ uuids in the request', len(items),
                         _max_items(), '[api] max_items_per_request')
    uuids = [validation.check_uuid(item) for item in items]
    return list(dict.fromkeys(uuids))


def _unless_done(write: Callable[[], None], done: Callable[[], bool],
                 what: str, subjects: list[str]) -> None:
    """Have the conductor do ``write``; when it does not answer in time,
    succeed all the same if ``done()`` reads the write done. ``what``
    and ``subjects`` (uuids) name the write in the log, only then.

    A conductor may do a write and its answer be lost: RabbitMQ went away
    in between, or, after a broker outage, oslo.messaging on the
    conductor drops its answers to a reply queue it gave up on for a
    while (``cyborg.common.patches``: 5 s). Nova must not fail a build, or
    keep a device, for a write that was done. A write not seen done still
    answers 503 (a conductor still at it may finish it later, as before).
    """
    try:
        write()
    except messaging.MessagingTimeout:
        named = '%s %s' % (what, ', '.join(subjects))
        try:
            finished = done()
        except Exception:
            # The database is away too: the 503 of the timeout stands.
            LOG.debug('Cannot read whether the %s was done', named,
                      exc_info=True)
            finished = False
        if not finished:
            raise
        LOG.info('The conductor did not answer the %s in time, but it is '
                 'done: answered as done', named)


def _patch_schema(*path: str) -> dict:
    """A member's PATCH also takes the bare op list."""
    return schema.PATCH_MEMBER if path else schema.PATCH


class ARQsController(routing.Resource):

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL, query=schema.LIST_QUERY)
    def get_all(self, *, context, query):
        instance = query.get('instance')
        if instance is not None:
            instance = validation.check_uuid(instance)
        bind_state = query.get('bind_state')
        if bind_state is not None and bind_state != RESOLVED:
            raise exception.Invalid(reason='Invalid bind_state %r; the only '
                                           'value allowed is "%s"'
                                           % (bind_state, RESOLVED))
        arqs = arq_db.arq_list(context, arq_rules.project_scope(context),
                               instance_uuid=instance)
        if bind_state is not None:
            resolved = [arq for arq in arqs
                        if states.resolved(arq['state'])]
            if instance is not None and len(resolved) != len(arqs):
                # Nova waits until every ARQ of the instance is resolved.
                return base.render({'error_message': 'null'}, status=423)
            arqs = resolved
        return base.render({'arqs': _views(context, arqs)})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, uuid, *, context, query):
        uuid = validation.check_uuid(uuid)
        arq = arq_db.arq_get(context, uuid, arq_rules.project_scope(context))
        return base.render(_views(context, [arq])[0])

    @pecan.expose('json')
    @base.endpoint(policy.CREATE, body=schema.CREATE)
    def post(self, *, context, query, body):
        arqs = pecan.request.conductor_api.arq_create(
            context, body['device_profile_name'])
        return base.render({'arqs': [view(arq) for arq in arqs]},
                           status=201)

    @pecan.expose('json')
    @base.endpoint(policy.UPDATE, _SERVICE_TOKEN, body=_patch_schema)
    def patch(self, *args, context, query, body):
        """Bind or unbind ARQs: ``{uuid: [ops]}``, or ``[ops]`` on
        ``/{uuid}``. All the ARQs of a request are bound, or all unbound.
        """
        request = arq_patch.requested(
            body, args[0] if args else None,
            version=pecan.request.version, is_admin=context.is_admin,
            max_items=_max_items(), update_rule=policy.UPDATE)
        # The conductor answers 404 for ARQs the caller cannot see.
        conductor = pecan.request.conductor_api
        scope = arq_rules.project_scope(context)
        if request.unbind:
            _unless_done(
                lambda: conductor.arq_unbind(context, request.unbind),
                lambda: arq_rules.unbind_done(arq_db.arq_list(
                    context, scope, uuids=request.unbind), request.unbind),
                'unbind of ARQs', request.unbind)
        else:
            _unless_done(
                lambda: conductor.arq_bind(context, request.bind),
                lambda: arq_rules.bind_done(arq_db.arq_list(
                    context, scope, uuids=list(request.bind)), request.bind),
                'bind of ARQs', list(request.bind))
        return base.no_content(202)

    @pecan.expose('json')
    @base.endpoint(policy.DELETE, query=schema.DELETE_QUERY)
    def delete(self, *args, context, query):
        """Delete ``?arqs=<uuid>[,<uuid>...]`` (or ``/{uuid}``) or every
        ARQ of ``?instance=<uuid>``."""
        # Only arqs and instance are allowed, and the path form is arqs.
        if len(query) + len(args) != 1:
            raise exception.Invalid(reason='Provide either an ARQ uuid list '
                                           'or an instance UUID')
        if args:
            query = {'arqs': args[0]}
        conductor = pecan.request.conductor_api
        scope = arq_rules.project_scope(context)
        if 'instance' in query:
            base.authorize(*_SERVICE_TOKEN)
            instance = validation.check_uuid(query['instance'])
            _unless_done(
                lambda: conductor.arq_delete(context, instance_uuid=instance),
                lambda: not arq_db.arq_list(context, scope,
                                            instance_uuid=instance),
                'deletion of the ARQs of instance', [instance])
            return base.no_content()
        uuids = _uuid_list(query['arqs'])
        arqs = _lookup(context, uuids)
        if not base.allowed(policy.INSTANCE_BINDING):
            for arq in arqs:
                if arq['instance_uuid']:
                    raise exception.ARQBoundToInstance(
                        uuid=arq['uuid'], instance=arq['instance_uuid'])
        _unless_done(
            lambda: conductor.arq_delete(context, uuids=uuids),
            lambda: not arq_db.arq_list(context, scope, uuids=uuids),
            'deletion of ARQs', uuids)
        return base.no_content()
