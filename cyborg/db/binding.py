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

"""Binding accelerator requests to attach handles, in the database.

A bind (:func:`bind`) locks the ARQs, claims free handles of the
deployable Nova chose, checks that it satisfies each ARQ's request group,
swaps the ARQs to BindStarted (or straight to Bound) and queues the Nova
events of the outcome (:mod:`cyborg.db.nova_events`): one transaction per
call. A job's end (:func:`finish`) is another; the sweeps
(:func:`unfinished`, :func:`end_failures`) find jobs nobody finishes.
:mod:`cyborg.conductor.binding` runs the jobs and sends the events around
these transactions. Rows are locked and swapped through
:mod:`cyborg.db.arqs`.

The statements are built once per shape (``functools.cache``), as in
:mod:`cyborg.db.arqs`.
"""

import collections
import dataclasses
import datetime
import functools
import json
import types
from typing import Any

from oslo_log import log as logging
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import nova_events
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import CPIDS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import PROFILES
from cyborg.db.models import SERVICES
from cyborg.domain import alternatives
from cyborg.domain import arq_states as states
from cyborg.domain import arqs as arq_rules
from cyborg.domain import bind_errors
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import device_tree
from cyborg.domain import providers

LOG = logging.getLogger(__name__)

# What a bind reads of the ARQs it locks: each column is a descriptor
# the database sends and the driver parses (PyMySQL in Python) with
# every result.
BIND_COLUMNS = ('id', 'uuid', 'state', 'hostname', 'device_rp_uuid',
                'instance_uuid', 'device_profile_group_id', 'group_json',
                'profile_json')


def _group(row) -> dict[str, str] | None:
    """The request group the ARQ ``row`` was created from (its
    ``group_json``; for an ARQ older than that column, its profile's
    group from ``profile_json`` and ``device_profile_group_id``); None
    if it has neither (its profile is gone)."""
    if row.group_json is not None:
        return json.loads(row.group_json)
    if row.profile_json is None:
        return None
    return json.loads(row.profile_json)['groups'][row.device_profile_group_id]


def _program_request(group: dict[str, str] | None) -> dict[str, str]:
    """What an ARQ of ``group`` asks its deployable to be programmed
    with (see :func:`dp_rules.program_request`)."""
    return {} if group is None else dp_rules.program_request(group)


def _preparation():
    """The preparation of a handle's deployable, as a column."""
    return (sa.select(DEPLOYABLES.c.preparation)
            .where(DEPLOYABLES.c.id == HANDLES.c.deployable_id)
            .scalar_subquery().label('preparation'))


def binds_to_start(rows, bindings: dict[str, dict[str, str]], owner: str,
                   now: datetime.datetime
                   ) -> list[tuple[types.SimpleNamespace, dict[str, Any]]]:
    """The locked ARQs to move to BindStarted, with their values.

    Binding an ARQ again to the same host, provider and instance while it
    is binding or bound changes nothing (Nova retries are safe), so it is
    left out. Every transition is checked here, before anything is
    written: a batch with one ARQ in a wrong state changes nothing.
    """
    starts = []
    fields = arq_rules.BIND_FIELDS
    for row in rows:
        wanted = bindings[row.uuid]
        same = all(getattr(row, f) == wanted[f] for f in fields)
        if same and row.state in (states.BIND_STARTED, states.BOUND):
            continue
        arq_db.check_transition(row, states.BIND_STARTED)
        values = {f: wanted[f] for f in fields}
        if wanted.get('project_id'):
            values['project_id'] = wanted['project_id']
        starts.append((row, dict(values, bind_owner=owner, bind_error=None,
                                 bind_started_at=now, attach_handle_id=None,
                                 deployable_id=None)))
    return starts


@dataclasses.dataclass
class Claim:
    """The attach handle a BindStarted ARQ's job has its agent prepare."""

    arq_uuid: str
    handle_uuid: str
    attach_type: str
    attach_info: dict[str, str]
    device_host: str
    driver: str | None
    #: What the agent does (:class:`device_tree.Preparation`).
    preparation: str = device_tree.Preparation.NONE.value
    #: What the ARQ's group asks the deployable to be programmed with
    #: (``bitstream_id``, ``function_id``...); empty: nothing.
    program: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The control path of the handle's device (``cpid_type``,
    #: ``cpid_info``), through which it is programmed.
    controlpath: dict[str, Any] | None = None
    #: The id of the handle's deployable (the region programmed).
    deployable_id: int | None = None


@dataclasses.dataclass
class Lease:
    """Who sends the events a transaction queues, and until when others
    must leave them alone (see :mod:`cyborg.db.nova_events`)."""
    owner: str
    seconds: float

    def until(self, now: datetime.datetime) -> datetime.datetime:
        return now + datetime.timedelta(seconds=self.seconds)


@dataclasses.dataclass
class BindOutcome:
    """What a binding transaction leaves to do once committed: jobs to
    run, events to send, prepared handles to release; and the ARQs it
    made Bound, and those it failed."""
    jobs: list[str] = dataclasses.field(default_factory=list)
    bound: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    released: list[arq_db.PreparedHandle] = dataclasses.field(
        default_factory=list)
    #: The ARQs bound and left to jobs as the transaction left them
    #: (:func:`cyborg.db.arqs.describe`), when asked for.
    described: list[dict[str, Any]] = dataclasses.field(
        default_factory=list)


class _Events:
    """The Nova events of one transaction, inserted together."""

    def __init__(self, connection, lease: Lease | None,
                 repeat_until: datetime.datetime | None = None):
        self._connection = connection
        self._lease = lease
        self._repeat_until = repeat_until
        self._queued: list[tuple[str, str, str]] = []

    def add(self, row, state: str) -> None:
        if row.instance_uuid:
            self._queued.append((row.uuid, row.instance_uuid,
                                 states.EVENT_STATUS[state]))

    def insert(self) -> list[dict[str, Any]]:
        """Insert the events added, repeated until ``repeat_until`` if
        given (see :mod:`cyborg.db.nova_events`)."""
        if not self._queued:
            return []
        now = timeutils.utcnow()
        owner, until = ((self._lease.owner, self._lease.until(now))
                        if self._lease else (None, None))
        return nova_events.enqueue_many(self._connection, self._queued, now,
                                        owner, until,
                                        repeat_until=self._repeat_until)


def _fail(connection, row, target: str, reason: str, events: _Events,
          outcome: BindOutcome) -> None:
    """``target`` (BindFailing or BindFailed) with ``reason``; releases
    any claimed handle."""
    outcome.released += arq_db.release_handles(connection, [row])
    arq_db.swap(connection, row, target,
                dict(bind_error=reason, attach_handle_id=None,
                     deployable_id=None))
    events.add(row, target)
    outcome.failed.append(row.uuid)
    LOG.warning('Bind of ARQ %s failed: %s', row.uuid, reason)


# The hot statements of binding, built once (see the module docstring).

# A resource provider's deployable and the names of the host it may be
# bound on: its device's host, and that agent's compute node provider
# (Nova binds to the node name, which may differ from the host name).
_DEPLOYABLE_HOSTS = (
    sa.select(DEPLOYABLES.c.id, DEVICES.c.hostname, SERVICES.c.rp_name)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .outerjoin(SERVICES, sa.and_(SERVICES.c.host == DEVICES.c.hostname,
                                 SERVICES.c.binary
                                 == constants.BINARY_AGENT)))
_DEPLOYABLE_ON_HOST = (
    _DEPLOYABLE_HOSTS.with_only_columns(DEPLOYABLES.c.id)
    .where(DEPLOYABLES.c.rp_uuid == sa.bindparam('rp_uuid'),
           sa.or_(DEVICES.c.hostname == sa.bindparam('hostname'),
                  SERVICES.c.rp_name == sa.bindparam('hostname'))))
def _shape_of_handles_deployable(dialect: str) -> list:
    """The resource class and the traits (comma-separated: trait names
    hold no comma) of a handle's deployable, from its attributes
    (:mod:`cyborg.domain.providers`), as two columns: what a bind checks
    comes with the handles it claims, at no extra statement."""
    def of_deployable(column):
        return sa.select(column).where(
            ATTRIBUTES.c.deployable_id == HANDLES.c.deployable_id)
    traits = ATTRIBUTES.c.value
    aggregated = (sa.func.string_agg(traits, ',')
                  if dialect == 'postgresql' else sa.func.group_concat(traits))
    return [
        of_deployable(ATTRIBUTES.c.value)
        .where(ATTRIBUTES.c.key == providers.RESOURCE_CLASS_KEY)
        .scalar_subquery().label('resource_class'),
        of_deployable(aggregated)
        .where(ATTRIBUTES.c.key.startswith(providers.TRAIT_KEY_PREFIX,
                                           autoescape=True))
        .scalar_subquery().label('traits')]


# MySQL/MariaDB claim handles unordered. InnoDB reads (and locks, until
# the transaction ends) every free handle of the deployable to sort them
# before the LIMIT, so a concurrent bind to that deployable would skip
# them all and, its retries spent, answer 409 with handles free; an
# unordered scan stops at the handles it takes.
_UNORDERED_CLAIM_DIALECTS = ('mysql', 'mariadb')


@functools.cache
def _free_handles(dialect: str):
    """Free handles of that deployable if it is on that host, with the
    provider's shape (:func:`_shape_of_handles_deployable`). Only
    attach_handles is in FROM, so only handles are locked (MariaDB has
    no FOR UPDATE OF; a locked deployable row would hide every handle;
    the subqueries of the column list lock nothing)."""
    query = (
        sa.select(HANDLES.c.id, HANDLES.c.uuid, HANDLES.c.attach_type,
                  HANDLES.c.attach_info, HANDLES.c.deployable_id,
                  _preparation(), *_shape_of_handles_deployable(dialect))
        # The deployable (by provider and host) is a subquery, not a
        # join: see the docstring.
        .where(HANDLES.c.deployable_id.in_(_DEPLOYABLE_ON_HOST),
               HANDLES.c.in_use == sa.false())
        # No more than the binds need: the rest stay free, unlocked, for
        # a concurrent bind to the same deployable.
        .limit(sa.bindparam('count'))
        # Handles a concurrent bind has locked are skipped, not waited
        # for: two binds take different handles instead of queueing.
        .with_for_update(skip_locked=True))
    if dialect in _UNORDERED_CLAIM_DIALECTS:
        return query
    # Lowest ids first: a deployable's handles are claimed in a stable
    # order.
    return query.order_by(HANDLES.c.id)


# A deployable's attributes, among them the resource class and traits of
# its provider.
_DEPLOYABLE_ATTRIBUTES = (
    sa.select(ATTRIBUTES.c.key, ATTRIBUTES.c.value)
    .where(ATTRIBUTES.c.deployable_id == sa.bindparam('deployable_id')))
# The handles free as last committed, locked or not (by a concurrent
# bind that may yet give them back).
_FREE_COUNT = (
    sa.select(sa.func.count()).select_from(HANDLES)
    .where(HANDLES.c.deployable_id == sa.bindparam('deployable_id'),
           HANDLES.c.in_use == sa.false()))
_TAKE_HANDLES = (
    db_api.by_primary_key(sa.update(HANDLES))
    .where(HANDLES.c.id.in_(sa.bindparam('ids', expanding=True)),
           HANDLES.c.in_use == sa.false())
    .values(in_use=True, updated_at=sa.bindparam('now')))


def _check_satisfies(connection, deployable_id: int, rp_uuid: str,
                     rows) -> None:
    """:func:`check_fits` for the deployable ``deployable_id`` (of
    provider ``rp_uuid``), whose attributes are read: where the claim
    found too few handles to bring its shape."""
    if not rows:
        return
    attributes = dict(connection.execute(
        _DEPLOYABLE_ATTRIBUTES, {'deployable_id': deployable_id}).all())
    check_fits(rp_uuid, rows,
               attributes.get(providers.RESOURCE_CLASS_KEY),
               providers.traits_of(attributes))


def check_fits(rp_uuid: str, rows, resource_class: str | None,
               traits) -> None:
    """DeployableMismatch (400) unless a provider ``rp_uuid`` of
    ``resource_class`` with ``traits`` (those of its deployable's
    attributes) satisfies the request group of every ARQ of ``rows``
    (:func:`dp_rules.unmet`). Nova binds only to a provider Placement
    chose for the group; an admin or a script binding to another would
    give the guest the wrong device."""
    traits = providers.provider_traits(traits)
    for row in rows:
        group = _group(row)
        reasons = ([] if group is None
                   else alternatives.match(group, resource_class, traits)[1])
        if reasons:
            raise exception.DeployableMismatch(
                rp_uuid=rp_uuid, group=row.device_profile_group_id,
                uuid=row.uuid,
                reasons='; '.join('it ' + reason for reason in reasons))


def _too_few(connection, rp_uuid: str, hostname: str, count: int,
             found: int, rows=()) -> Exception:
    """Why only ``found`` of ``count`` handles of ``rp_uuid`` on
    ``hostname`` could be claimed for the ARQs ``rows``, as the
    exception to raise: no such deployable (404), one on another host
    (400), one that does not satisfy their groups (400, raised), too few
    free handles (409), or handles locked by a concurrent bind (start
    again)."""
    deployable = connection.execute(
        _DEPLOYABLE_HOSTS.where(DEPLOYABLES.c.rp_uuid == rp_uuid)).first()
    if deployable is None:
        return exception.DeployableNotFound(rp_uuid=rp_uuid)
    if hostname not in (deployable.hostname, deployable.rp_name):
        return exception.DeployableNotOnHost(
            rp_uuid=rp_uuid, host=deployable.hostname, hostname=hostname)
    _check_satisfies(connection, deployable.id, rp_uuid, rows)
    # Free as last committed, locked or not: what SKIP LOCKED hid.
    unlocked = connection.execute(
        _FREE_COUNT, {'deployable_id': deployable.id}).scalar()
    too_few = exception.NoFreeAttachHandles(
        rp_uuid=rp_uuid, free=min(unlocked, found), wanted=count)
    # Enough handles, but a concurrent bind holds some: its transaction
    # may yet give them back, so this one starts again (the 409 only if
    # the retries are spent).
    if unlocked >= count:
        return db_api.RetryRequest('attach handles of %s locked by a '
                                   'concurrent bind' % rp_uuid, too_few)
    return too_few


def _claim_free(connection, rp_uuid: str, hostname: str, count: int,
                rows=()) -> list:
    """Claim ``count`` free handles of the deployable of resource
    provider ``rp_uuid`` on host ``hostname``, if it satisfies the
    request groups of the ARQs ``rows`` (:func:`check_fits`); the
    handles (with their ``deployable_id``).

    Handles locked by another binding transaction are skipped, not
    waited for. Too few raises what :func:`_too_few` finds; so does an
    UPDATE that finds a handle taken (only SQLite, which has no row locks
    and serialises writers instead): the transaction starts again.
    """
    query = _free_handles(connection.dialect.name)
    free = list(connection.execute(query, {
        'rp_uuid': rp_uuid, 'hostname': hostname, 'count': count}))
    if len(free) < count:
        # Only this path pays the statements that tell why.
        raise _too_few(connection, rp_uuid, hostname, count, len(free),
                       rows)
    if rows:
        # The deployable's shape came with its handles: a provider that
        # fits costs no statement.
        check_fits(rp_uuid, rows, free[0].resource_class,
                   free[0].traits.split(',') if free[0].traits else ())
    # ``in_use = false`` again in the UPDATE: the compare-and-swap that
    # catches the claim SQLite cannot lock (see the docstring).
    taken = connection.execute(_TAKE_HANDLES, {
        'ids': [h.id for h in free], 'now': timeutils.utcnow()}).rowcount
    if taken != len(free):
        raise db_api.RetryRequest(
            'attach handles claimed concurrently',
            exception.NoFreeAttachHandles(rp_uuid=rp_uuid, free=taken,
                                          wanted=count))
    return free


def _matched_alternative(group: dict[str, Any], handle) -> int | None:
    """The alternative of ``group`` the deployable of ``handle`` (a row
    of :func:`_free_handles`, with its shape) satisfies; check_fits made
    sure it satisfies one."""
    traits = handle.traits.split(',') if handle.traits else ()
    return alternatives.match(group, handle.resource_class,
                              providers.provider_traits(traits))[0]


def _bind_to_deployable(connection, starts, rp_uuid: str, hostname: str,
                        events: _Events, outcome: BindOutcome) -> None:
    """Start the binds ``starts`` ((row, BindStarted values) pairs) to
    ``rp_uuid``'s deployable on ``hostname``: one UPDATE per ARQ, to its
    outcome.

    An ARQ whose handle needs no preparation is Bound at once, passing
    through BindStarted in this transaction; one whose handle must be
    prepared stays BindStarted for a job. A provider that is no
    deployable on that host, one that does not satisfy an ARQ's request
    group, or too few free handles, raises.
    """
    handles = _claim_free(connection, rp_uuid, hostname, len(starts),
                          [row for row, _values in starts])
    # _claim_free returned exactly one handle per ARQ (or raised).
    for (row, values), handle in zip(starts, handles, strict=True):
        group = _group(row)
        held = dict(values, attach_handle_id=handle.id,
                    deployable_id=handle.deployable_id)
        if group is not None and dp_rules.has_alternatives(group):
            held['alternative'] = _matched_alternative(group, handle)
        if (device_tree.needs_preparation(handle.preparation)
                or _program_request(group)):
            arq_db.swap(connection, row, states.BIND_STARTED, held)
            outcome.jobs.append(row.uuid)
        else:
            # bound_at: the start of its binding interval (usage).
            arq_db.swap(connection, row, states.BOUND,
                        dict(held, bound_at=timeutils.utcnow()),
                        via=states.BIND_STARTED)
            events.add(row, states.BOUND)
            outcome.bound.append(row.uuid)


@db_api.retrying_writer
def bind(context, bindings: dict[str, dict[str, str]],
         project_id: str | None, owner: str,
         lease: Lease | None = None, describe: bool = False) -> BindOutcome:
    """Bind ARQs, all or none: a check that fails raises its 4xx and
    changes nothing (see the module docstring).

    ``bindings`` maps ARQ uuid to {hostname, device_rp_uuid,
    instance_uuid[, project_id]}. Returns the ARQs left to a job and the
    events queued (leased per ``lease``; unleased without one), and with
    ``describe`` the ARQs whose bind started, as bound or left to a job.
    """
    connection = context.connection
    rows = arq_db.lock(connection, list(bindings), project_id,
                       BIND_COLUMNS)
    by_target = collections.defaultdict(list)
    for row, values in binds_to_start(rows, bindings, owner,
                                      timeutils.utcnow()):
        by_target[values['device_rp_uuid'],
                  values['hostname']].append((row, values))
    events = _Events(connection, lease)
    outcome = BindOutcome()
    # One claim (one SELECT, one UPDATE) per deployable, for all the ARQs
    # bound to it.
    for (rp_uuid, hostname), group in by_target.items():
        _bind_to_deployable(connection, group, rp_uuid, hostname, events,
                            outcome)
    outcome.events = events.insert()
    if describe:
        outcome.described = arq_db.describe(connection,
                                            outcome.bound + outcome.jobs)
    return outcome


def _lock_binding(connection, uuid: str):
    rows = arq_db.lock_rows(connection, None, uuid=uuid)
    if not rows or rows[0].state != states.BIND_STARTED:
        return None
    return rows[0]


@db_api.connection_reader
def job_claim(context, uuid: str) -> Claim | None:
    """The handle a BindStarted ARQ's job prepares; None if none."""
    row = context.connection.execute(
        sa.select(ARQS.c.uuid, HANDLES.c.uuid.label('handle_uuid'),
                  HANDLES.c.attach_type, HANDLES.c.attach_info,
                  DEVICES.c.hostname, DEVICES.c.driver,
                  DEPLOYABLES.c.preparation, PROFILES.c.profile_json,
                  ARQS.c.device_profile_group_id, ARQS.c.group_json,
                  CPIDS.c.cpid_type,
                  CPIDS.c.cpid_info, HANDLES.c.deployable_id)
        .join(HANDLES, HANDLES.c.id == ARQS.c.attach_handle_id)
        .outerjoin(PROFILES, PROFILES.c.id == ARQS.c.device_profile_id)
        .join(CPIDS, CPIDS.c.id == HANDLES.c.cpid_id)
        .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(ARQS.c.uuid == uuid,
               ARQS.c.state == states.BIND_STARTED)).first()
    if row is None:
        return None
    return Claim(row.uuid, row.handle_uuid, row.attach_type,
                 json.loads(row.attach_info), row.hostname, row.driver,
                 row.preparation, _program_request(_group(row)),
                 {'cpid_type': row.cpid_type,
                  'cpid_info': json.loads(row.cpid_info)},
                 row.deployable_id)


@db_api.connection_writer
def finish(context, uuid: str, failure: str | None = None,
           lease: Lease | None = None,
           bind_timeout: int | None = None) -> BindOutcome:
    """Bound, or on ``failure`` failed; the event queued for Nova and,
    on failure, the prepared handle to release.

    A failure within ``bind_timeout`` seconds of the bind's start makes
    the ARQ BindFailing, its ``failed`` event repeated until then; later
    (or without ``bind_timeout``: the sweeper) BindFailed, one event. A
    BindStarted ARQ without a handle (nothing to prepare) fails.
    """
    connection = context.connection
    outcome = BindOutcome()
    row = _lock_binding(connection, uuid)
    if row is None:
        return outcome  # unbound or deleted meanwhile: handle released
    if failure is None and row.attach_handle_id is None:
        failure = bind_errors.NO_HANDLE_ERROR
    if failure is None:
        events = _Events(connection, lease)
        arq_db.swap(connection, row, states.BOUND,
                    {'bound_at': timeutils.utcnow()})
        events.add(row, states.BOUND)
        outcome.bound.append(row.uuid)
    else:
        report_until = (row.bind_started_at
                        + datetime.timedelta(seconds=bind_timeout)
                        if bind_timeout is not None else None)
        # Nova may not wait for the event yet: repeat it until the bind
        # times out (see cyborg.domain.arq_states, BindFailing).
        if report_until is not None and report_until > timeutils.utcnow():
            events = _Events(connection, lease, repeat_until=report_until)
            target = states.BIND_FAILING
        else:
            events = _Events(connection, lease)
            target = states.BIND_FAILED
        _fail(connection, row, target, failure, events, outcome)
    outcome.events = events.insert()
    return outcome


def _in_state(state: str, owner: str | None = None,
              older_than: datetime.datetime | None = None):
    """uuids of ARQs in ``state`` (of bind ``owner``, started before
    ``older_than``)."""
    query = sa.select(ARQS.c.uuid).where(ARQS.c.state == state)
    if owner is not None:
        query = query.where(ARQS.c.bind_owner == owner)
    if older_than is not None:
        query = query.where(ARQS.c.bind_started_at < older_than)
    return query


@db_api.connection_reader
def unfinished(context, owner: str | None = None,
               older_than: datetime.datetime | None = None) -> list[str]:
    """BindStarted ARQs of ``owner`` or started before ``older_than``."""
    return [row.uuid for row in context.connection.execute(
        _in_state(states.BIND_STARTED, owner, older_than))]


@db_api.connection_writer
def end_failures(context, older_than: datetime.datetime) -> list[str]:
    """BindFailing ARQs whose bind started before ``older_than`` become
    BindFailed: Nova did not act on their failure in time. Their uuids.
    """
    connection = context.connection
    uuids = [row.uuid for row in connection.execute(
        _in_state(states.BIND_FAILING, older_than=older_than))]
    if not uuids:
        return []
    ended = []
    for row in arq_db.lock_rows(connection, None, uuids=uuids):
        if row.state == states.BIND_FAILING:  # not unbound meanwhile
            arq_db.swap(connection, row, states.BIND_FAILED, {})
            ended.append(row.uuid)
    return ended
