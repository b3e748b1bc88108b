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

"""The conductor's RPC endpoint: every write to the database goes here."""

import dataclasses
import functools
from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils

from cyborg.common import constants
from cyborg.common import exception
from cyborg.conductor import alternatives
from cyborg.conductor import binding
from cyborg.conductor import inventory
from cyborg.conductor import notifications
from cyborg.conductor import partitions as partitions_mod
from cyborg.conductor import programming
from cyborg.conductor import quotas as quotas_mod
from cyborg.conductor import restore
from cyborg.conductor import sync_worker
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import errors as db_errors
from cyborg.db import hardware
from cyborg.db import services as services_db
from cyborg.db import taint_rules as taint_rules_db
from cyborg.domain import arqs as arq_rules
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import devices as device_rules
from cyborg.domain import providers
from cyborg.domain import taint_rules
from cyborg.notifications import notifier as notifier_mod

LOG = logging.getLogger(__name__)

# Failures that are answers (404, 409...), not conductor errors: returned
# to the caller without oslo.messaging logging a traceback.
_expected_answers = messaging.expected_exceptions(exception.CyborgException)

def _expected(fn):
    """An RPC endpoint method whose CyborgExceptions are answers, and
    whose database errors become CyborgExceptions (409 or 503, see
    :func:`cyborg.db.errors.answer`), so that they cross RPC as answers
    the API can give instead of a RemoteError (500)."""
    @functools.wraps(fn)
    def wrapper(self, context, *args, **kwargs):
        try:
            return fn(self, context, *args, **kwargs)
        except db_errors.DATABASE_ERRORS as e:
            answer = db_errors.answer(e)
            if db_errors.is_conflict(e):
                LOG.warning('%s: %s', fn.__name__, e)
            elif db_errors.is_unavailable(e):
                LOG.error('%s failed, the database is unavailable: %s',
                          fn.__name__, e)
            else:
                LOG.exception('%s failed with a database error',
                              fn.__name__)
            raise answer from e
    return _expected_answers(wrapper)

@dataclasses.dataclass(frozen=True)
class ARQLimits:
    """How many ARQs one creation may make and one project may hold
    (None: unlimited)."""

    per_request: int | None = None
    per_project: int | None = None

    @classmethod
    def from_conf(cls, conf) -> 'ARQLimits':
        return cls(conf.api.max_arqs_per_request,
                   conf.api.max_arqs_per_project)


class ConductorManager:
    """Handles conductor RPC requests.

    Writes that change a host's providers record a sync request in their
    transaction and hand the host to ``syncer`` (see
    :mod:`cyborg.conductor.sync_worker`): the caller never waits for
    Placement. Without a ``syncer`` (no Placement) the hosts stay
    pending. ``notifier`` sends the versioned notifications of ARQ
    creations, device status changes and inventory changes (none by
    default).
    """

    target = messaging.Target(version=constants.CONDUCTOR_RPC_API_VERSION)

    def __init__(self, host: str,
                 syncer: sync_worker.SyncWorker | None = None,
                 binder: binding.Binder | None = None,
                 arq_limits: ARQLimits = ARQLimits(),
                 programmer: programming.RegionProgrammer | None = None,
                 notifier: notifier_mod.Notifier | None = None,
                 usage_period: int | None = None,
                 prober: alternatives.Prober | None = None,
                 quotas: quotas_mod.UnifiedLimits | None = None,
                 partitions: partitions_mod.Partitions | None = None,
                 switch_guard: partitions_mod.SwitchGuard | None = None):
        self.host = host
        # Devices' partition profiles, set through their agents (None:
        # refused, as by a service without agents).
        self._partitions = partitions
        # Agents' switches of partition profile (None: no Placement to
        # ask, every switch refused).
        self._switch_guard = switch_guard or partitions_mod.SwitchGuard(None)
        # No Placement (none given): every group answers its first
        # alternative.
        self._prober = prober or alternatives.Prober(None)
        # Per-project limits checked at ARQ creation (None: [quota]
        # driver = noop).
        self._quotas = quotas
        # The usage audit's period when usage records are sent: reports'
        # busy readings then count in their ARQs' mean utilization.
        self._usage_period = usage_period
        self._notifier = notifier or notifications.disabled()
        self._programmer = programmer
        self._binder = binder
        self._arq_limits = arq_limits
        self._syncer = syncer

    # Device profiles

    @_expected
    def device_profile_create(self, context, values: dict[str, Any]
                              ) -> dict[str, Any]:
        profile = profiles_db.device_profile_create(context, values)
        LOG.info('Created device profile %(name)s (%(uuid)s)', profile)
        return _jsonable(profile)

    @_expected
    def device_profile_delete(self, context, idents: list[list[str]]
                              ) -> None:
        profiles_db.device_profile_delete(context, [tuple(i) for i in idents])
        LOG.info('Deleted device profiles %s',
                 ', '.join(value for _key, value in idents))

    @_expected
    def device_profile_update(self, context, uuid: str,
                              values: dict[str, Any]) -> dict[str, Any]:
        """Change a profile's description, groups or ``enabled`` (see
        :func:`cyborg.db.device_profiles.device_profile_update`); one
        notification per kind of change."""
        before, after = profiles_db.device_profile_update(context, uuid,
                                                          values)
        changed = dp_rules.changes(before, after)
        if changed:
            LOG.info('Updated device profile %(name)s (%(uuid)s): '
                     '%(fields)s', dict(after, fields=', '.join(
                         sorted(changed))))
        for event in dp_rules.update_events(changed):
            notifications.emit_profile(self._notifier, context,
                                       'device_profile.' + event, after)
        return _jsonable(after)

    def alternatives_probe(self, context,
                           candidates: list[list[dict[str, Any]]]
                           ) -> list[int]:
        """For each list of plain request groups (the ordered
        alternatives of a device profile group, as Nova would read them),
        the index of the first Placement can satisfy now; 0 when none can
        (API 1.7). Reads only."""
        return self._prober.first_satisfiable(candidates)

    # Device taint rules

    @_expected
    def taint_rule_create(self, context, values: dict[str, Any]
                          ) -> dict[str, Any]:
        """Create a device taint rule and apply it (API 1.5): a taint on
        every device it selects, a Placement sync of their hosts after
        the answer and, for NoExecute, the ARQs bound on them marked and
        announced (``device_taint_rule.no_execute``). A dry run (effect
        None) writes the rule alone. Raises Invalid for an invalid
        selector or taint."""
        try:
            taint_rules.check_selector(values.get('selector'))
            taint_rules.rule_taint(values['key'], values['effect'],
                                   values.get('value'), values.get('reason'))
        except (KeyError, TypeError, ValueError) as e:
            raise exception.Invalid(reason='invalid taint rule: %s' % e)
        applied = taint_rules_db.rule_create(context, values)
        rule = applied.rule
        LOG.info('Created device taint rule %s (%s, %s): %d device(s) on '
                 '%d host(s) tainted, %d ARQ(s) marked', rule['uuid'],
                 rule['key'], rule['effect'], len(applied.devices),
                 len(applied.hosts), len(applied.marked))
        if taint_rules.marks_arqs(rule['effect']):
            notifications.emit_taint_rule(
                self._notifier, context,
                notifications.TAINT_RULE_NO_EXECUTE, rule, applied.devices,
                applied.marked)
        for host in applied.hosts:
            self._sync_later(host)
        return _jsonable(rule)

    @_expected
    def taint_rule_delete(self, context, uuid: str) -> None:
        """Delete a device taint rule, its taints and the marks of its
        NoExecute taint (API 1.5); its hosts are synced after the
        answer. Raises TaintRuleNotFound."""
        rule, hosts = taint_rules_db.rule_delete(context, uuid)
        LOG.info('Deleted device taint rule %s (%s, %s): taints removed '
                 'on %d host(s)', uuid, rule['key'], rule['effect'],
                 len(hosts))
        for host in hosts:
            self._sync_later(host)

    # Services and inventory

    @_expected
    def service_heartbeat(self, context, host: str, binary: str) -> None:
        services_db.service_heartbeat(context, host, binary,
                                      timeutils.utcnow())

    @_expected
    def report_inventory(self, context, host: str, rp_name: str,
                         devices: list[dict[str, Any]] | None, digest: str,
                         failed_drivers: list[str],
                         utilization: dict[str, Any] | None = None
                         ) -> dict[str, bool]:
        """Apply an agent's report; Placement follows after the answer.

        An unchanged report that left nothing pending costs one read;
        a changed ``utilization`` (RPC 1.2) one write more. ``synced``:
        whether the host's providers were all in Placement when this
        answered. ``devices`` None (RPC 1.3): the agent's tree is the one
        of ``digest``; the answer has ``resend: True`` when that is not
        the host's applied tree (then nothing was done).
        """
        outcome = inventory.apply(context, host, rp_name, devices, digest,
                                  failed_drivers, utilization,
                                  self._notifier, self._usage_period)
        if outcome.resend:
            return {'changed': False, 'synced': False, 'resend': True}
        synced = not outcome.sync_pending or self._sync_later(host)
        return {'changed': outcome.changed, 'synced': synced}

    @_expected
    def bound_devices(self, context, host: str) -> list[str]:
        """The addresses of ``host``'s devices its agent must not reset
        (see :func:`cyborg.db.hardware.bound_device_addresses`)."""
        return hardware.bound_device_addresses(context, host)

    @_expected
    def prepared_handles(self, context, host: str) -> list[dict[str, Any]]:
        """The prepared handles of ``host`` for its agent's restore at
        start (see :func:`cyborg.conductor.restore.prepared_handles`)."""
        programmer = self._programmer or programming.refusing_programmer()
        return restore.prepared_handles(context, host, programmer.resolver)

    @_expected
    def handles_restored(self, context, host: str,
                         outcome: dict[str, Any]) -> None:
        """Record what ``host``'s agent restored at start (see
        :func:`cyborg.conductor.restore.record`)."""
        restore.record(context, host, outcome)

    def _sync_later(self, host: str) -> bool:
        """Hand ``host`` to the sync worker (its request is committed);
        whether its sync is done already (a synchronous executor)."""
        if self._syncer is None:
            return False
        future = self._syncer.request(host)
        return future.done() and future.result()

    def sync_host(self, context, host: str) -> bool:
        """Sync one host's providers now; False if anything is left."""
        return self._syncer is not None and self._syncer.sync_host(
            context, host)

    def sync_pending_hosts(self, context) -> None:
        """Retry every host whose providers are not yet in Placement."""
        if self._syncer is not None:
            self._syncer.sync_pending_hosts(context)

    def sync_adopted_hosts(self, context) -> None:
        """Sync every host with a provider taken over from upstream that
        waits for its allocations to go ([conductor] adoption_interval)."""
        if self._syncer is not None:
            self._syncer.sync_adopted_hosts(context)

    # Accelerator requests

    @_expected
    def arq_create(self, context, device_profile_name: str
                   ) -> list[dict[str, Any]]:
        created = arq_db.arq_create(
            context, device_profile_name, context.project_id,
            self._arq_limits.per_request, self._arq_limits.per_project,
            self._quotas.check if self._quotas is not None else None)
        LOG.info('Created %d ARQs for device profile %s', len(created),
                 device_profile_name)
        notifications.emit_arqs(self._notifier, context,
                                notifications.ARQ_CREATE, created)
        return [_jsonable(arq) for arq in created]

    @_expected
    def arq_bind(self, context, bindings: dict[str, dict[str, str]]) -> None:
        """Bind (all or none start); handles to prepare finish in jobs."""
        self._binder.bind(context, bindings,
                          arq_rules.project_scope(context))

    @_expected
    def arq_unbind(self, context, uuids: list[str]) -> None:
        self._binder.unbind(context, uuids,
                            arq_rules.project_scope(context))

    @_expected
    def arq_delete(self, context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None) -> None:
        self._binder.delete(context, uuids, instance_uuid,
                            arq_rules.project_scope(context))

    def sweep_binds(self, context) -> None:
        """Fail binds (of any conductor) older than the bind timeout."""
        if self._binder is not None:
            self._binder.sweep(context)

    # Programming

    @_expected
    def deployable_program(self, context, deployable_uuid: str,
                           image_uuid: str) -> None:
        """Program a deployable (an FPGA region) with a Glance image and
        record it (API 1.1); returns once done.

        Raises DeployableNotFound, DeployableInUse (an ARQ binds, is
        bound to or failing on it), BitstreamNotFound,
        InvalidBitstreamMetadata, BitstreamIncompatible (built for
        another region type), DeployableNotProgrammable (no control path,
        or its driver cannot program), ProgramFailed (the agent or driver
        failed, or Glance could not be read) or NoBitstreamSource (no
        ``[glance]``).
        """
        if self._programmer is None:
            raise exception.NoBitstreamSource()
        try:
            self._programmer.program_deployable(context, deployable_uuid,
                                                image_uuid)
        except (exception.GlanceUnavailable, exception.GlanceRequestFailed,
                exception.BitstreamChecksumMismatch,
                exception.GlanceNotConfigured) as e:
            raise exception.ProgramFailed(reason=str(e)) from e
        LOG.info('Deployable %s programmed with bitstream %s through the '
                 'API', deployable_uuid, image_uuid)

    # Devices and attributes

    @_expected
    def device_set_status(self, context, uuid: str, status: str) -> None:
        """Enable or disable a device; Placement follows after the
        answer."""
        before = hardware.device_set_status(context, uuid, status)
        if before['status'] != status:
            LOG.info('Device %s on %s is now %s', uuid, before['hostname'],
                     status)
            notifications.emit_devices(
                self._notifier, context,
                notifications.DEVICE_ENABLE if status == device_rules.ENABLED
                else notifications.DEVICE_DISABLE,
                [dict(before, status=status)])
            self._sync_later(before['hostname'])

    @_expected
    def device_set_partitions(self, context, uuid: str, profile: str | None,
                              pinned: bool) -> None:
        """Set or pin a device's partition profile through its agent
        (API 1.8; see :class:`cyborg.conductor.partitions.Partitions`)."""
        if self._partitions is None:
            raise exception.ServiceUnavailable(
                reason='this conductor sets no partition profiles')
        self._partitions.set(context, uuid, profile, pinned)

    @_expected
    def partition_switch(self, context, host: str, address: str,
                         deployable: str) -> dict[str, Any]:
        """Whether ``host``'s empty device at ``address`` may serve
        ``deployable`` (API 1.10; see
        :class:`cyborg.conductor.partitions.SwitchGuard`)."""
        return self._switch_guard.may_serve(context, host, address,
                                            deployable).to_wire()

    @_expected
    def attribute_create(self, context, values: dict[str, Any]
                         ) -> dict[str, Any]:
        attribute = hardware.attribute_create(context, values)
        self._attribute_changed(context, attribute)
        return _jsonable(attribute)

    @_expected
    def attribute_delete(self, context, uuid: str) -> None:
        self._attribute_changed(context,
                                hardware.attribute_delete(context, uuid))

    def _attribute_changed(self, context, attribute: dict[str, Any]) -> None:
        """Sync the attribute's host if it shapes Placement (its sync
        request is committed with the attribute)."""
        if not providers.shapes_placement(attribute['key']):
            return
        host = hardware.deployable_host(context, attribute['deployable_id'])
        if host is not None:
            self._sync_later(host)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """Datetimes as ISO strings, so the result crosses any transport."""
    return {key: value.isoformat() if hasattr(value, 'isoformat') else value
            for key, value in values.items()}
