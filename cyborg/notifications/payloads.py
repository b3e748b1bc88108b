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

"""The versioned payloads of Cyborg's notifications, and their schemas.

Modelled on Nova's notification objects (nova/notifications/objects/):
each :class:`Payload` has a name, a ``major.minor`` version and its
fields; what it builds is wrapped in the envelope of
:mod:`cyborg.notifications.envelope`. A new field is a new minor
version; a field renamed, removed or retyped a new major one. Every
payload's JSON Schema (draft 2020-12) is :meth:`Payload.schema`, and
``doc/notification_samples/`` holds one sample per event type that the
tests validate against it and against what the conductor emits.

:data:`EVENTS` is the one list of the event types the conductor emits,
with their payload and priority.
"""

from collections.abc import Mapping
import dataclasses
import datetime
from typing import Any

from oslo_log import log as logging

from cyborg.domain import arq_states
from cyborg.domain import devices as device_rules
from cyborg.domain import taint_rules
from cyborg.domain import taints
from cyborg.notifications import envelope as envelope_mod
from cyborg.notifications import notifier as notifier_mod

LOG = logging.getLogger(__name__)

_STRING = {'type': 'string'}
_NULLABLE_STRING = {'type': ['string', 'null']}
_UUID = {'type': 'string', 'format': 'uuid'}
_NULLABLE_UUID = {'type': ['string', 'null'], 'format': 'uuid'}


@dataclasses.dataclass(frozen=True)
class Payload:
    """One versioned payload: ``fields`` maps each field of its data to
    that field's JSON Schema."""

    name: str
    version: str
    fields: Mapping[str, Mapping[str, Any]]
    description: str

    def build(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The enveloped payload of ``values`` (a mapping with at least
        every field; others are left out)."""
        return envelope_mod.envelope(
            self.name, self.version,
            {field: values[field] for field in self.fields})

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the enveloped payload: every field
        present, none other (a consumer of an older minor version would
        ignore those a newer one adds)."""
        return {
            '$schema': 'https://json-schema.org/draft/2020-12/schema',
            'title': '%s %s' % (self.name, self.version),
            'description': self.description,
            'type': 'object',
            'required': [envelope_mod.NAME_KEY, envelope_mod.NAMESPACE_KEY,
                         envelope_mod.VERSION_KEY, envelope_mod.DATA_KEY],
            'additionalProperties': False,
            'properties': {
                envelope_mod.NAME_KEY: {'const': self.name},
                envelope_mod.NAMESPACE_KEY: {
                    'const': envelope_mod.NAMESPACE},
                envelope_mod.VERSION_KEY: {'const': self.version},
                envelope_mod.DATA_KEY: {
                    'type': 'object',
                    'required': list(self.fields),
                    'additionalProperties': False,
                    'properties': {name: dict(field) for name, field
                                   in self.fields.items()},
                },
            },
        }


ARQ = Payload(
    'AcceleratorRequestPayload', '1.0', {
        'uuid': _UUID,
        # The conductor's state, BindFailing included (clients see it
        # as BindStarted).
        'state': {'enum': list(arq_states.ALL)},
        'device_profile_name': _STRING,
        'device_profile_group_id': {'type': 'integer', 'minimum': 0},
        'project_id': _NULLABLE_STRING,
        'instance_uuid': _NULLABLE_UUID,
        'hostname': _NULLABLE_STRING,
        'device_rp_uuid': _NULLABLE_UUID,
        'attach_handle_uuid': _NULLABLE_UUID,
        'attach_handle_type': _NULLABLE_STRING,
        'attach_handle_info': {'type': ['object', 'null']},
        'bind_error': _NULLABLE_STRING,
    },
    'An accelerator request; its attach handle only while Bound.')

DEVICE = Payload(
    'DevicePayload', '1.0', {
        'uuid': _UUID,
        'hostname': _STRING,
        'address': _STRING,
        'type': _STRING,
        'vendor': _STRING,
        'model': _STRING,
        'driver': _NULLABLE_STRING,
        'status': {'enum': list(device_rules.STATUSES)},
        'health': _STRING,
        'health_reason': _NULLABLE_STRING,
    },
    'A device of a host, as its agent reported it.')

DEPLOYABLE = Payload(
    'DeployablePayload', '1.0', {
        'uuid': _UUID,
        'name': _STRING,
        'device_uuid': _UUID,
        'host': _STRING,
        'rp_uuid': _NULLABLE_UUID,
        'driver': _NULLABLE_STRING,
        # The image programmed (or that failed to be).
        'bitstream_id': _STRING,
        'error': _NULLABLE_STRING,
    },
    'A deployable (an FPGA region) and the bitstream image it was '
    'programmed with; error: why the programming failed.')


_TIME = {'type': 'string', 'format': 'date-time'}

# 1.1: mean_gpu_percent, utilization_samples.
EXISTS = Payload(
    'AcceleratorRequestExistsPayload', '1.1', {
        'arq_uuid': _UUID,
        'project_id': _NULLABLE_STRING,
        'instance_uuid': _NULLABLE_UUID,
        'device_profile_name': _NULLABLE_STRING,
        'resource_class': _NULLABLE_STRING,
        'vendor': _NULLABLE_STRING,
        'model': _NULLABLE_STRING,
        'host': _NULLABLE_STRING,
        'audit_period_beginning': _TIME,
        'audit_period_ending': _TIME,
        # Seconds bound within the period: never more than the period.
        'bound_seconds': {'type': 'number', 'minimum': 0,
                          'exclusiveMinimum': 0},
        # The device's latest reading while the ARQ still held it at the
        # end of the period (see cyborg.domain.usage.records), else null.
        'latest_utilization': {
            'type': ['object', 'null'],
            'required': ['metrics', 'reported_at'],
            'properties': {
                'metrics': {'type': 'object',
                            'additionalProperties': {'type': 'number'}},
                'reported_at': {'type': ['string', 'null']},
            },
        },
        # The mean of the device's busy readings (percent) its agent
        # reported while the ARQ held it in the period, null without one;
        # how many readings it is the mean of.
        'mean_gpu_percent': {'type': ['number', 'null'], 'minimum': 0,
                             'maximum': 100},
        'utilization_samples': {'type': 'integer', 'minimum': 0},
    },
    'The usage of one accelerator request during one audit period.')


def _array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {'type': 'array', 'items': dict(items)}


TAINT_RULE = Payload(
    'DeviceTaintRulePayload', '1.0', {
        'uuid': _UUID,
        'name': _NULLABLE_STRING,
        'selector': {'type': 'object'},
        'key': _STRING,
        'value': _STRING,
        'effect': {'enum': list(taints.EFFECTS)},
        'reason': _NULLABLE_STRING,
        # The devices the rule tainted.
        'devices': _array({
            'type': 'object', 'additionalProperties': False,
            'required': ['uuid', 'hostname', 'address'],
            'properties': {'uuid': _UUID, 'hostname': _STRING,
                           'address': _STRING}}),
        # The ARQs bound on them that it marked, each with its instance,
        # project, host and device.
        'arqs': _array({
            'type': 'object', 'additionalProperties': False,
            'required': ['uuid', 'instance_uuid', 'project_id', 'hostname',
                         'device_uuid'],
            'properties': {'uuid': _UUID, 'instance_uuid': _NULLABLE_UUID,
                           'project_id': _NULLABLE_STRING,
                           'hostname': _NULLABLE_STRING,
                           'device_uuid': _UUID}}),
        'instances': _array(_UUID),
        'projects': _array(_STRING),
    },
    'A NoExecute device taint rule, the devices it tainted and the '
    'accelerator requests bound on them that it marked: the instances '
    'and projects to move off those devices (nothing is stopped).')


DEVICE_PROFILE = Payload(
    'DeviceProfilePayload', '1.0', {
        'uuid': _UUID,
        'name': _STRING,
        'description': _NULLABLE_STRING,
        'groups': _array({'type': 'object',
                          'additionalProperties': _STRING}),
        'enabled': {'type': 'boolean'},
        'updated_at': {'type': ['string', 'null'], 'format': 'date-time'},
    },
    'A device profile after an update: its groups apply to accelerator '
    'requests created from then on; a disabled one creates none.')


@dataclasses.dataclass(frozen=True)
class Event:
    payload: Payload
    priority: str


#: Every event type the conductor emits: its payload and priority.
EVENTS: dict[str, Event] = {
    'accelerator_request.create': Event(ARQ, notifier_mod.INFO),
    'accelerator_request.bind.start': Event(ARQ, notifier_mod.INFO),
    'accelerator_request.bind.end': Event(ARQ, notifier_mod.INFO),
    'accelerator_request.bind.error': Event(ARQ, notifier_mod.ERROR),
    'accelerator_request.unbind': Event(ARQ, notifier_mod.INFO),
    'accelerator_request.delete': Event(ARQ, notifier_mod.INFO),
    'device.create': Event(DEVICE, notifier_mod.INFO),
    'device.delete': Event(DEVICE, notifier_mod.INFO),
    'device.health_change': Event(DEVICE, notifier_mod.INFO),
    'device.enable': Event(DEVICE, notifier_mod.INFO),
    'device.disable': Event(DEVICE, notifier_mod.INFO),
    'deployable.program.end': Event(DEPLOYABLE, notifier_mod.INFO),
    'deployable.program.error': Event(DEPLOYABLE, notifier_mod.ERROR),
    'accelerator_request.exists': Event(EXISTS, notifier_mod.INFO),
    'device_taint_rule.no_execute': Event(TAINT_RULE, notifier_mod.INFO),
    'device_profile.update': Event(DEVICE_PROFILE, notifier_mod.INFO),
    'device_profile.enable': Event(DEVICE_PROFILE, notifier_mod.INFO),
    'device_profile.disable': Event(DEVICE_PROFILE, notifier_mod.INFO),
}


def arq_values(arq: Mapping[str, Any]) -> dict[str, Any]:
    """The ARQ payload's values of an ARQ as :mod:`cyborg.db.arqs`
    gives it: the attach handle only while Bound."""
    bound = arq['state'] == arq_states.BOUND
    return {
        'uuid': arq['uuid'], 'state': arq['state'],
        'device_profile_name': arq['device_profile_name'],
        'device_profile_group_id': arq['device_profile_group_id'],
        'project_id': arq['project_id'],
        'instance_uuid': arq['instance_uuid'],
        'hostname': arq['hostname'],
        'device_rp_uuid': arq['device_rp_uuid'],
        'attach_handle_uuid': arq['attach_handle_uuid'] if bound else None,
        'attach_handle_type': arq['attach_handle_type'] if bound else None,
        'attach_handle_info': (arq['attach_handle_info'] or None)
        if bound else None,
        'bind_error': arq['bind_error'],
    }


def device_values(device: Mapping[str, Any]) -> dict[str, Any]:
    """The device payload's values of a device row (or of the values a
    new row is inserted with: enabled, no health reason, unless they
    say otherwise)."""
    values = {field: device.get(field) for field in DEVICE.fields}
    values['status'] = values['status'] or device_rules.ENABLED
    return values


def taint_rule_values(rule: Mapping[str, Any],
                      devices: list[Mapping[str, Any]],
                      arqs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The taint rule payload's values of a rule (as
    :mod:`cyborg.db.taint_rules` gives it), the devices it tainted and
    the ARQs it marked."""
    values = {field: rule.get(field) for field in
              ('uuid', 'name', 'selector', 'key', 'value', 'effect',
               'reason')}
    status = taint_rules.status(devices, arqs)
    values['devices'] = status['devices']
    values['arqs'] = sorted(({field: arq[field] for field in (
        'uuid', 'instance_uuid', 'project_id', 'hostname', 'device_uuid')}
        for arq in arqs), key=lambda arq: arq['uuid'])
    values['instances'] = status['instances']
    values['projects'] = status['projects']
    return values


def profile_values(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The device profile payload's values of a profile (as
    :mod:`cyborg.db.device_profiles` gives it)."""
    updated_at = profile.get('updated_at')
    if isinstance(updated_at, datetime.datetime):
        if updated_at.tzinfo is None:  # stored times are UTC
            updated_at = updated_at.replace(tzinfo=datetime.timezone.utc)
        updated_at = updated_at.isoformat()
    return {'uuid': profile['uuid'], 'name': profile['name'],
            'description': profile['description'],
            'groups': profile['groups'],
            'enabled': bool(profile['enabled']),
            'updated_at': updated_at}


def emit(notifier: notifier_mod.Notifier, context, event_type: str,
         values: Mapping[str, Any]) -> bool:
    """Send ``event_type`` with its payload built of ``values`` (see
    :meth:`Payload.build`); whether it was handed to the transport.
    Never raises: the payload is built only when notifications are on,
    and a payload that cannot be built is logged like a failed send."""
    if not notifier.enabled:
        return False
    event = EVENTS[event_type]
    try:
        payload = event.payload.build(values)
    except Exception:
        LOG.exception('Could not build the %s notification', event_type)
        return False
    return notifier.emit(context, event_type, payload, event.priority)
