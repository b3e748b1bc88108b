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

"""The conductor's versioned notifications (not Nova's external events,
which :mod:`cyborg.conductor.notifier` sends).

Each write emits its events once its transaction committed, with the one
:class:`cyborg.notifications.notifier.Notifier` that
:func:`cyborg.conductor.service.create` builds. When notifications are
off nothing here runs past :attr:`Notifier.enabled`: no read, no
payload. When on, the bind, unbind and deletion describe the ARQs they
change (profile name, attach handle) with one more statement in their
own transaction (:func:`cyborg.db.arqs.describe`); a job's end and a
refused bind read them afterwards. The send happens on the notifier's
thread; neither ever fails the operation.
"""

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from oslo_log import log as logging

from cyborg import context as cyborg_context
from cyborg.db import arqs as arq_db
from cyborg.notifications import notifier as notifier_mod
from cyborg.notifications import payloads

LOG = logging.getLogger(__name__)

ARQ_CREATE = 'accelerator_request.create'
ARQ_BIND_START = 'accelerator_request.bind.start'
ARQ_BIND_END = 'accelerator_request.bind.end'
ARQ_BIND_ERROR = 'accelerator_request.bind.error'
ARQ_UNBIND = 'accelerator_request.unbind'
ARQ_DELETE = 'accelerator_request.delete'
DEVICE_CREATE = 'device.create'
DEVICE_DELETE = 'device.delete'
DEVICE_HEALTH_CHANGE = 'device.health_change'
DEVICE_ENABLE = 'device.enable'
DEVICE_DISABLE = 'device.disable'
PROGRAM_END = 'deployable.program.end'
PROGRAM_ERROR = 'deployable.program.error'
PROFILE_UPDATE = 'device_profile.update'
PROFILE_ENABLE = 'device_profile.enable'
PROFILE_DISABLE = 'device_profile.disable'
TAINT_RULE_NO_EXECUTE = 'device_taint_rule.no_execute'
# Sent by the usage audit (cyborg.conductor.usage_audit).
ARQ_EXISTS = 'accelerator_request.exists'


def disabled() -> notifier_mod.Notifier:
    """A notifier that sends nothing (collaborators built without one)."""
    return notifier_mod.Notifier(None)


def read_arqs(uuids: list[str] | None = None,
              instance_uuid: str | None = None) -> list[dict[str, Any]]:
    """The ARQs (of any project) to describe; none if the database
    cannot say (a notification never fails the operation)."""
    try:
        return arq_db.arq_list(cyborg_context.get_admin_context(), None,
                               instance_uuid=instance_uuid, uuids=uuids)
    except Exception:
        LOG.exception('Could not read ARQs %s for their notifications',
                      uuids if uuids is not None else
                      'of instance %s' % instance_uuid)
        return []


def emit_arqs(notifier: notifier_mod.Notifier, context, event_type: str,
              arqs: Iterable[Mapping[str, Any]], **overrides: Any) -> None:
    """``event_type`` for each of ``arqs`` (as :mod:`cyborg.db.arqs`
    gives them), with ``overrides`` of their values (``state``,
    ``bind_error``)."""
    if not notifier.enabled:
        return
    for arq in arqs:
        try:
            values = payloads.arq_values(dict(arq, **overrides))
        except Exception:
            LOG.exception('Could not build the %s notification', event_type)
            continue
        payloads.emit(notifier, context, event_type, values)


def emit_devices(notifier: notifier_mod.Notifier, context, event_type: str,
                 devices: Iterable[Mapping[str, Any]]) -> None:
    """``event_type`` for each of ``devices`` (row mappings, or the
    values of rows inserted)."""
    if not notifier.enabled:
        return
    for device in devices:
        payloads.emit(notifier, context, event_type,
                      payloads.device_values(device))


def emit_taint_rule(notifier: notifier_mod.Notifier, context,
                    event_type: str, rule: Mapping[str, Any],
                    devices: list[Mapping[str, Any]],
                    arqs: list[Mapping[str, Any]]) -> None:
    """``event_type`` for a taint rule, the devices it tainted and the
    ARQs it marked (as :mod:`cyborg.db.taint_rules` gives them)."""
    if not notifier.enabled:
        return
    try:
        values = payloads.taint_rule_values(rule, devices, arqs)
    except Exception:
        LOG.exception('Could not build the %s notification', event_type)
        return
    payloads.emit(notifier, context, event_type, values)


def emit_profile(notifier: notifier_mod.Notifier, context, event_type: str,
                 profile: Mapping[str, Any]) -> None:
    """``event_type`` for a device profile (as
    :mod:`cyborg.db.device_profiles` gives it)."""
    if not notifier.enabled:
        return
    payloads.emit(notifier, context, event_type,
                  payloads.profile_values(profile))
