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

"""SQLAlchemy models of every cyborg table.

State-like columns (device type and status, ARQ state, handle type) are
plain strings validated in code, not database enums: enum types cannot be
widened portably across SQLite, PostgreSQL and MySQL.
"""

from oslo_db.sqlalchemy import models
from oslo_utils import timeutils
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import mysql

from cyborg.domain import device_tree
from cyborg.domain import devices

TABLE_ARGS = {'mysql_engine': 'InnoDB', 'mysql_charset': 'utf8mb4'}

# The type of every date/time column: microseconds kept on every database.
# MySQL/MariaDB's plain DATETIME drops the fraction of a second (leases,
# retry backoff and bind timeouts would lose up to a second), so there it
# is DATETIME(6); SQLite and PostgreSQL keep microseconds already.
DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql',
                                      'mariadb')


class TimestampMixin:
    """oslo.db's ``TimestampMixin`` with the precise :data:`DateTime`."""

    created_at = sa.Column(DateTime, default=lambda: timeutils.utcnow())
    updated_at = sa.Column(DateTime, onupdate=lambda: timeutils.utcnow())


class Base(TimestampMixin, models.ModelBase, orm.DeclarativeBase):
    """Base of every model: id primary key plus created/updated timestamps."""


class Service(Base):
    """A running cyborg service and its heartbeat."""

    __tablename__ = 'services'
    __table_args__ = (
        sa.UniqueConstraint('host', 'binary',
                            name='uniq_services0host0binary'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    host = sa.Column(sa.String(255), nullable=False)
    binary = sa.Column(sa.String(255), nullable=False)
    last_seen_up = sa.Column(DateTime, nullable=True)
    # Agents only: digest of the last device tree applied, the compute
    # node resource provider, and two counters: every change that
    # Placement must see bumps ``sync_requested``; a complete sync records
    # the value it started from in ``sync_done``. The host is pending
    # while requested > done, whatever order concurrent syncs end in.
    report_hash = sa.Column(sa.String(64), nullable=True)
    rp_name = sa.Column(sa.String(255), nullable=True)
    compute_rp_uuid = sa.Column(sa.String(36), nullable=True)
    sync_requested = sa.Column(sa.Integer, nullable=False, default=0,
                               server_default='0')
    sync_done = sa.Column(sa.Integer, nullable=False, default=0,
                          server_default='0')
    # Syncs that recorded a write to the host's providers: one that finds
    # it moved since it started overlapped another (see
    # cyborg.db.providers.save_sync).
    sync_epoch = sa.Column(sa.Integer, nullable=False, default=0,
                           server_default='0')


class Device(Base):
    """A physical accelerator card on one host."""

    __tablename__ = 'devices'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_devices0uuid'),
        sa.UniqueConstraint('hostname', 'address',
                            name='uniq_devices0hostname0address'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    type = sa.Column(sa.String(30), nullable=False)
    vendor = sa.Column(sa.String(255), nullable=False)
    model = sa.Column(sa.String(255), nullable=False)
    std_board_info = sa.Column(sa.Text, nullable=True)
    vendor_board_info = sa.Column(sa.Text, nullable=True)
    hostname = sa.Column(sa.String(255), nullable=False)
    address = sa.Column(sa.String(255), nullable=False)
    status = sa.Column(sa.String(32), nullable=False,
                       default=devices.ENABLED, server_default=devices.ENABLED)
    health = sa.Column(sa.String(32), nullable=False,
                       default=device_tree.Health.HEALTHY.value,
                       server_default=device_tree.Health.HEALTHY.value)
    # The driver that reported the device, and whether the device vanished
    # from its reports while an accelerator request still held it.
    driver = sa.Column(sa.String(100), nullable=True)
    missing = sa.Column(sa.Boolean, nullable=False, default=False,
                        server_default=sa.false())
    # The latest utilization its agent reported, as JSON: {"metrics":
    # {name: value}, "reported_at": ISO time of the latest report that
    # carried them}; NULL when none was reported.
    utilization = sa.Column(sa.Text, nullable=True)
    # Why the device has its health (a short text; NULL: not recorded) and
    # since when (the time the health last changed; NULL: not recorded,
    # e.g. for a device older than this column).
    health_reason = sa.Column(sa.String(255), nullable=True)
    health_since = sa.Column(DateTime, nullable=True)
    # The device's partitions as its agent last reported them, as JSON
    # (cyborg.domain.partitions); NULL: the device is not partitioned.
    partitions = sa.Column(sa.Text, nullable=True)


class Deployable(Base):
    """A schedulable unit of a device; one Placement resource provider."""

    __tablename__ = 'deployables'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_deployables0uuid'),
        sa.UniqueConstraint('device_id', 'name',
                            name='uniq_deployables0device_id0name'),
        sa.Index('deployables_rp_uuid_idx', 'rp_uuid'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    parent_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'),
                          nullable=True)
    root_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'),
                        nullable=True)
    name = sa.Column(sa.String(255), nullable=False)
    num_accelerators = sa.Column(sa.Integer, nullable=False)
    device_id = sa.Column(sa.Integer, sa.ForeignKey('devices.id'),
                          nullable=False)
    rp_uuid = sa.Column(sa.String(36), nullable=True)
    driver_name = sa.Column(sa.String(100), nullable=True)
    bitstream_id = sa.Column(sa.String(36), nullable=True)
    # What the agent does to a handle before Nova attaches it
    # (cyborg.domain.device_tree.Preparation); 'none': nothing.
    preparation = sa.Column(sa.String(32), nullable=False, default='none',
                            server_default='none')
    # Gone from its device's reports but kept because an attach handle of
    # it is in use; removed by the first report after its release.
    retained = sa.Column(sa.Boolean, nullable=False, default=False,
                         server_default=sa.false())


class Attribute(Base):
    """A key/value pair describing a deployable (rc, traits, ...)."""

    __tablename__ = 'attributes'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_attributes0uuid'),
        sa.UniqueConstraint('deployable_id', 'key',
                            name='uniq_attributes0deployable_id0key'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    deployable_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'),
                              nullable=False)
    key = sa.Column(sa.String(255), nullable=False)
    value = sa.Column(sa.Text, nullable=False)


class ControlpathID(Base):
    """How the host controls a device (e.g. its PCI physical function)."""

    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_controlpath_ids0uuid'),
        sa.UniqueConstraint('device_id', 'cpid_info',
                            name='uniq_controlpath_ids0device_id0cpid_info'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    device_id = sa.Column(sa.Integer, sa.ForeignKey('devices.id'),
                          nullable=False)
    cpid_type = sa.Column(sa.String(32), nullable=False)
    cpid_info = sa.Column(sa.String(255), nullable=False)


class AttachHandle(Base):
    """What Nova attaches to an instance: a PCI function or an mdev."""

    __tablename__ = 'attach_handles'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_attach_handles0uuid'),
        sa.UniqueConstraint('deployable_id', 'attach_info',
                            name='uniq_attach_handles0deployable_id0info'),
        sa.Index('attach_handles_cpid_id_idx', 'cpid_id'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    deployable_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'),
                              nullable=False)
    cpid_id = sa.Column(sa.Integer, sa.ForeignKey('controlpath_ids.id'),
                        nullable=False)
    in_use = sa.Column(sa.Boolean, nullable=False, default=False,
                       server_default=sa.false())
    attach_type = sa.Column(sa.String(32), nullable=False)
    attach_info = sa.Column(sa.String(255), nullable=False)


class DeviceProfile(Base):
    """A named set of accelerator request groups."""

    __tablename__ = 'device_profiles'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_device_profiles0uuid'),
        sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    profile_json = sa.Column(sa.Text, nullable=False)
    description = sa.Column(sa.Text, nullable=True)
    # A disabled profile creates no new ARQs (its existing ones stay).
    enabled = sa.Column(sa.Boolean, nullable=False, default=True,
                        server_default=sa.true())


class ExtendedAcceleratorRequest(Base):
    """An accelerator request (ARQ) and its binding."""

    __tablename__ = 'extended_accelerator_requests'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_extArqs0uuid'),
        sa.UniqueConstraint('attach_handle_id',
                            name='uniq_extArqs0attach_handle_id'),
        sa.Index('extArqs_project_id_idx', 'project_id'),
        sa.Index('extArqs_instance_uuid_idx', 'instance_uuid'),
        sa.Index('extArqs_device_profile_id_idx', 'device_profile_id'),
        sa.Index('extArqs_device_rp_uuid_idx', 'device_rp_uuid'),
        sa.Index('extArqs_state_idx', 'state'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    project_id = sa.Column(sa.String(255), nullable=True)
    state = sa.Column(sa.String(32), nullable=False)
    device_profile_id = sa.Column(sa.Integer,
                                  sa.ForeignKey('device_profiles.id'),
                                  nullable=False)
    device_profile_group_id = sa.Column(sa.Integer, nullable=False,
                                        default=0, server_default='0')
    hostname = sa.Column(sa.String(255), nullable=True)
    device_rp_uuid = sa.Column(sa.String(36), nullable=True)
    instance_uuid = sa.Column(sa.String(36), nullable=True)
    attach_handle_id = sa.Column(sa.Integer,
                                 sa.ForeignKey('attach_handles.id'),
                                 nullable=True)
    deployable_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'),
                              nullable=True)
    bind_owner = sa.Column(sa.String(255), nullable=True)
    bind_started_at = sa.Column(DateTime, nullable=True)
    bind_error = sa.Column(sa.Text, nullable=True)
    # When it became Bound (NULL unless Bound): the start of its open
    # binding interval (see cyborg.db.usage).
    bound_at = sa.Column(DateTime, nullable=True)
    # Marked by a NoExecute taint of its device (NULL: not marked): when,
    # and which taint ("<key>" of the taint that marked it).
    taint_marked_at = sa.Column(DateTime, nullable=True)
    taint_marked_by = sa.Column(sa.String(255), nullable=True)
    # What it counts in per-project limits, from its group when it was
    # created (JSON {resource class: amount}: one unit of one class of
    # its group, see cyborg.domain.quotas), whatever later changes of
    # its profile. NULL: created before quotas (counted from its
    # profile).
    resources = sa.Column(sa.Text, nullable=True)
    # The alternative of its group its bind matched (0-based; NULL: a
    # group without alternatives, or not bound yet).
    alternative = sa.Column(sa.Integer, nullable=True)
    # The request group it was created from (JSON, as in its profile then):
    # what it binds against, whatever later updates of the profile.
    # NULL: created by a conductor older than this column (its profile's
    # group is read instead).
    group_json = sa.Column(sa.Text, nullable=True)


class PlacementProvider(Base):
    """A resource provider cyborg created in Placement, as last written.

    Lets the conductor send Placement only differences, and remember
    providers to remove after their deployables are gone.
    """

    __tablename__ = 'placement_providers'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_placement_providers0uuid'),
        sa.Index('placement_providers_host_idx', 'host'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    host = sa.Column(sa.String(255), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    parent_uuid = sa.Column(sa.String(36), nullable=False)
    generation = sa.Column(sa.Integer, nullable=True)
    inventory_hash = sa.Column(sa.String(64), nullable=True)
    traits_hash = sa.Column(sa.String(64), nullable=True)
    # Taken over from an upstream Cyborg import: its name, parent and
    # traits may still be upstream's until it holds no allocation.
    adopted = sa.Column(sa.Boolean, nullable=False, default=False,
                        server_default=sa.false())


class NovaEvent(Base):
    """Outbox of ``accelerator-request-bound`` events for Nova.

    Written in the transaction that resolves the ARQ's bind, so an outcome
    is never lost; delivered (with retries) by the conductors' notifier,
    which leases rows through ``claimed_by``/``claimed_until``.
    """

    __tablename__ = 'nova_events'
    __table_args__ = (
        sa.Index('nova_events_pending_idx', 'sent_at', 'next_attempt_at'),
        sa.Index('nova_events_arq_idx', 'arq_uuid'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    arq_uuid = sa.Column(sa.String(36), nullable=False)
    instance_uuid = sa.Column(sa.String(36), nullable=False)
    status = sa.Column(sa.String(16), nullable=False)
    attempts = sa.Column(sa.Integer, nullable=False, default=0,
                         server_default='0')
    next_attempt_at = sa.Column(DateTime, nullable=False)
    claimed_by = sa.Column(sa.String(255), nullable=True)
    claimed_until = sa.Column(DateTime, nullable=True)
    sent_at = sa.Column(DateTime, nullable=True)
    last_error = sa.Column(sa.Text, nullable=True)
    # Until when the event is sent again after Nova took or refused it
    # (a failure Nova has not acted on yet); NULL: sent once.
    repeat_until = sa.Column(DateTime, nullable=True)


class UpstreamImport(Base):
    """One import of an upstream OpenStack Cyborg database
    (``cyborg-manage upstream-import``)."""

    __tablename__ = 'upstream_imports'
    __table_args__ = (TABLE_ARGS,)

    id = sa.Column(sa.Integer, primary_key=True)
    source_revision = sa.Column(sa.String(64), nullable=False)
    started_at = sa.Column(DateTime, nullable=False)
    finished_at = sa.Column(DateTime, nullable=True)
    # JSON: rows copied per table, ARQs per state, what was skipped.
    counts = sa.Column(sa.Text, nullable=True)


class ARQUsage(Base):
    """A binding interval that ended: an ARQ was Bound from ``bound_at``
    until ``unbound_at``, to what the other columns name.

    Written in the transaction that moves the ARQ out of Bound (unbind,
    delete) and kept after the ARQ is deleted: the usage records of the
    periods it overlaps are computed from it (:mod:`cyborg.db.usage`).
    An ARQ still bound has its open interval in its own row
    (``bound_at``).
    """

    __tablename__ = 'arq_usage'
    __table_args__ = (
        sa.Index('arq_usage_unbound_at_idx', 'unbound_at'),
        sa.Index('arq_usage_arq_uuid_idx', 'arq_uuid'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    arq_uuid = sa.Column(sa.String(36), nullable=False)
    project_id = sa.Column(sa.String(255), nullable=True)
    instance_uuid = sa.Column(sa.String(36), nullable=True)
    device_profile_name = sa.Column(sa.String(255), nullable=True)
    resource_class = sa.Column(sa.String(255), nullable=True)
    vendor = sa.Column(sa.String(255), nullable=True)
    model = sa.Column(sa.String(255), nullable=True)
    host = sa.Column(sa.String(255), nullable=True)
    device_uuid = sa.Column(sa.String(36), nullable=True)
    bound_at = sa.Column(DateTime, nullable=False)
    unbound_at = sa.Column(DateTime, nullable=False)


class UsageAudit(Base):
    """An audit period whose usage records were created.

    The unique ``period_start`` makes the creation happen once, whatever
    the number of conductors auditing at once.
    """

    __tablename__ = 'usage_audits'
    __table_args__ = (
        sa.UniqueConstraint('period_start',
                            name='uniq_usage_audits0period_start'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    period_start = sa.Column(DateTime, nullable=False)
    period_end = sa.Column(DateTime, nullable=False)
    # The conductor that audited it, and how many records it created.
    audited_by = sa.Column(sa.String(255), nullable=True)
    records = sa.Column(sa.Integer, nullable=False, default=0,
                        server_default='0')


class UsageRecord(Base):
    """Outbox of ``accelerator_request.exists`` notifications: one
    usage record of one ARQ for one audit period.

    Created with its audit (:class:`UsageAudit`), sent by a conductor
    that leases it (``claimed_by``/``claimed_until``) until ``sent_at``
    is set; a conductor that dies leaves a lease that expires, and the
    record is sent by the next one.
    """

    __tablename__ = 'usage_records'
    __table_args__ = (
        sa.UniqueConstraint('arq_uuid', 'period_start',
                            name='uniq_usage_records0arq_uuid0period_start'),
        sa.Index('usage_records_unsent_idx', 'sent_at', 'claimed_until'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    arq_uuid = sa.Column(sa.String(36), nullable=False)
    period_start = sa.Column(DateTime, nullable=False)
    period_end = sa.Column(DateTime, nullable=False)
    # The record, as sent (JSON; see cyborg.domain.usage.records).
    payload = sa.Column(sa.Text, nullable=False)
    claimed_by = sa.Column(sa.String(255), nullable=True)
    claimed_until = sa.Column(DateTime, nullable=True)
    sent_at = sa.Column(DateTime, nullable=True)
    attempts = sa.Column(sa.Integer, nullable=False, default=0,
                         server_default='0')


class DeviceTaintRule(Base):
    """An operator's taint rule: a selector of devices and the taint it
    puts on each device it selects (:mod:`cyborg.domain.taints`)."""

    __tablename__ = 'device_taint_rules'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_device_taint_rules0uuid'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=True)
    description = sa.Column(sa.Text, nullable=True)
    # JSON: host, driver, vendor, model, address glob, attribute.
    selector = sa.Column(sa.Text, nullable=False)
    key = sa.Column(sa.String(63), nullable=False)
    value = sa.Column(sa.String(255), nullable=False, default='',
                      server_default='')
    effect = sa.Column(sa.String(16), nullable=False)
    reason = sa.Column(sa.String(255), nullable=True)


class DeviceTaint(Base):
    """A taint on a device: from its driver or from a taint rule.

    ``origin`` is ``driver`` for a driver taint and the rule's uuid for
    an admin one, so that one rule and the driver each hold a key of a
    device at most once (a unique constraint cannot hold a NULL rule).
    """

    __tablename__ = 'device_taints'
    __table_args__ = (
        sa.UniqueConstraint('device_id', 'key', 'origin',
                            name='uniq_device_taints0device_id0key0origin'),
        sa.Index('device_taints_key_idx', 'key'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    device_id = sa.Column(sa.Integer, sa.ForeignKey('devices.id'),
                          nullable=False)
    key = sa.Column(sa.String(63), nullable=False)
    value = sa.Column(sa.String(255), nullable=False, default='',
                      server_default='')
    effect = sa.Column(sa.String(16), nullable=False)
    source = sa.Column(sa.String(16), nullable=False)
    origin = sa.Column(sa.String(36), nullable=False)
    rule_id = sa.Column(sa.Integer, sa.ForeignKey('device_taint_rules.id'),
                        nullable=True)
    reason = sa.Column(sa.String(255), nullable=True)


class ARQUtilization(Base):
    """The utilization readings of the device an ARQ was bound to,
    summed per audit period: the mean of its usage record.

    Added to when a report changes a device's reading, for each ARQ
    bound on the device at the time.
    """

    __tablename__ = 'arq_utilization'
    __table_args__ = (
        sa.UniqueConstraint('arq_uuid', 'period_start',
                            name='uniq_arq_utilization0arq_uuid0period_start'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    arq_uuid = sa.Column(sa.String(36), nullable=False)
    period_start = sa.Column(DateTime, nullable=False)
    busy_sum = sa.Column(sa.Float, nullable=False, default=0.0,
                         server_default='0')
    samples = sa.Column(sa.Integer, nullable=False, default=0,
                        server_default='0')


# The tables, for the SQLAlchemy Core statements of the DB API modules:
# named here once, imported by name where they are used.
SERVICES = Service.__table__
DEVICES = Device.__table__
DEPLOYABLES = Deployable.__table__
ATTRIBUTES = Attribute.__table__
CPIDS = ControlpathID.__table__
class QuotaLock(Base):
    """A project whose accelerator requests are limited: an ARQ creation
    locks its row while it counts and checks the project's usage, so
    that concurrent creations are checked one after the other."""

    __tablename__ = 'quota_locks'
    __table_args__ = (
        sa.UniqueConstraint('project_id', name='uniq_quota_locks0project_id'),
        TABLE_ARGS,
    )

    id = sa.Column(sa.Integer, primary_key=True)
    project_id = sa.Column(sa.String(255), nullable=False)


HANDLES = AttachHandle.__table__
PROFILES = DeviceProfile.__table__
ARQS = ExtendedAcceleratorRequest.__table__
PROVIDERS = PlacementProvider.__table__
EVENTS = NovaEvent.__table__
UPSTREAM_IMPORTS = UpstreamImport.__table__
ARQ_USAGE = ARQUsage.__table__
USAGE_AUDITS = UsageAudit.__table__
USAGE_RECORDS = UsageRecord.__table__
TAINT_RULES = DeviceTaintRule.__table__
TAINTS = DeviceTaint.__table__
ARQ_UTILIZATION = ARQUtilization.__table__
QUOTA_LOCKS = QuotaLock.__table__
