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

"""Binding accelerator requests to attach handles.

:func:`bind` runs in the conductor's ``arq_bind`` call, in one
transaction for the whole batch, and decides there everything the
database can decide; any failure raises a 4xx and changes nothing:

1. the ARQs are locked and every one is checked to move to BindStarted
   (404 for an unknown or foreign ARQ, 409 for a wrong state);
2. each ``device_rp_uuid`` must be a deployable (404) on the requested
   ``hostname`` (the agent's host or its compute node's name; 400);
3. free attach handles of that deployable are claimed for every ARQ
   bound to it (``SKIP LOCKED`` where the database has it; a handle is
   never held by two ARQs: the claim is a compare-and-swap on ``in_use``
   and the ARQ's handle column is unique), or 409 when there are too few
   (handles only locked by a concurrent bind make it start again);
4. each ARQ is written once: one whose handle needs no preparation
   becomes Bound, passing through BindStarted, and its
   ``accelerator-request-bound`` event is queued for Nova in the same
   transaction (leased to this conductor, which sends it as soon as the
   transaction commits);
5. an ARQ whose handle must be prepared by its host's agent (an mdev is
   created) stays BindStarted with the handle claimed: a job of the
   :class:`Binder` asks the agent, then :func:`finish` es it in one
   transaction: Bound and a ``completed`` event, or BindFailing, which
   Nova does not count as resolved, and a ``failed`` event that the
   notifier repeats until Nova unbinds or deletes the ARQ or the bind
   timeout passes (see :mod:`cyborg.domain.arq_states`).

An ARQ unbound or deleted meanwhile stops the job: those paths release
the handle under the ARQ's row lock, so nothing leaks. A conductor that
starts resumes its own unfinished jobs, and every conductor fails any job
older than ``[conductor] bind_timeout`` (BindFailed, one ``failed``
event) and ends the BindFailing ARQs whose time is up (BindFailed), so
no ARQ stays BindStarted or BindFailing.
"""

import collections
import dataclasses
import datetime
import json
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any, Protocol

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.common import exception
from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import models
from cyborg.db import nova_events
from cyborg.domain import arq_states as states
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

ARQS = models.ExtendedAcceleratorRequest.__table__
HANDLES = models.AttachHandle.__table__
DEPLOYABLES = models.Deployable.__table__
DEVICES = models.Device.__table__
SERVICES = models.Service.__table__

@dataclasses.dataclass
class Claim:
    arq_uuid: str
    handle_uuid: str
    attach_type: str
    attach_info: dict[str, str]
    device_host: str
    driver: str | None


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
    run, events to send, prepared handles to release."""
    jobs: list[str] = dataclasses.field(default_factory=list)
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    released: list[arq_db.PreparedHandle] = dataclasses.field(
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
    LOG.warning('Bind of ARQ %s failed: %s', row.uuid, reason)


# The hot statements, built once (see cyborg.db.arqs).

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
# Free handles of that deployable if it is on that host. Only
# attach_handles is in FROM, so only handles are locked (MariaDB has no
# FOR UPDATE OF; a locked deployable row would hide every handle).
_FREE_HANDLES = (
    sa.select(HANDLES.c.id, HANDLES.c.uuid, HANDLES.c.attach_type,
              HANDLES.c.attach_info, HANDLES.c.deployable_id)
    .where(HANDLES.c.deployable_id.in_(_DEPLOYABLE_ON_HOST),
           HANDLES.c.in_use == sa.false())
    .order_by(HANDLES.c.id).limit(sa.bindparam('count'))
    .with_for_update(skip_locked=True))
# MySQL/MariaDB: the same, unordered. InnoDB reads (and locks, until the
# transaction ends) every free handle of the deployable to sort them
# before the LIMIT, so a concurrent bind to that deployable would skip
# them all and, its retries spent, answer 409 with handles free; an
# unordered scan stops at the handles it takes.
_FREE_HANDLES_UNORDERED = _FREE_HANDLES.order_by(None)
_UNORDERED_CLAIM_DIALECTS = ('mysql', 'mariadb')
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


def _too_few(connection, rp_uuid: str, hostname: str, count: int,
             found: int) -> Exception:
    """Why only ``found`` of ``count`` handles of ``rp_uuid`` on
    ``hostname`` could be claimed, as the exception to raise: no such
    deployable (404), one on another host (400), too few free handles
    (409), or handles locked by a concurrent bind (start again)."""
    deployable = connection.execute(
        _DEPLOYABLE_HOSTS.where(DEPLOYABLES.c.rp_uuid == rp_uuid)).first()
    if deployable is None:
        return exception.DeployableNotFound(rp_uuid=rp_uuid)
    if hostname not in (deployable.hostname, deployable.rp_name):
        return exception.DeployableNotOnHost(
            rp_uuid=rp_uuid, host=deployable.hostname, hostname=hostname)
    unlocked = connection.execute(
        _FREE_COUNT, {'deployable_id': deployable.id}).scalar()
    too_few = exception.NoFreeAttachHandles(
        rp_uuid=rp_uuid, free=min(unlocked, found), wanted=count)
    if unlocked >= count:
        return db_api.RetryRequest('attach handles of %s locked by a '
                                   'concurrent bind' % rp_uuid, too_few)
    return too_few


def _claim_free(connection, rp_uuid: str, hostname: str,
                count: int) -> list:
    """Claim ``count`` free handles of the deployable of resource
    provider ``rp_uuid`` on host ``hostname``; the handles (with their
    ``deployable_id``).

    Handles locked by another binding transaction are skipped, not
    waited for. Too few raises what :func:`_too_few` finds; so does an
    UPDATE that finds a handle taken (only SQLite, which has no row locks
    and serialises writers instead): the transaction starts again.
    """
    query = (_FREE_HANDLES_UNORDERED
             if connection.dialect.name in _UNORDERED_CLAIM_DIALECTS
             else _FREE_HANDLES)
    free = list(connection.execute(query, {
        'rp_uuid': rp_uuid, 'hostname': hostname, 'count': count}))
    if len(free) < count:
        raise _too_few(connection, rp_uuid, hostname, count, len(free))
    taken = connection.execute(_TAKE_HANDLES, {
        'ids': [h.id for h in free], 'now': timeutils.utcnow()}).rowcount
    if taken != len(free):
        raise db_api.RetryRequest(
            'attach handles claimed concurrently',
            exception.NoFreeAttachHandles(rp_uuid=rp_uuid, free=taken,
                                          wanted=count))
    return free


def _bind_to_deployable(connection, starts, rp_uuid: str, hostname: str,
                        events: _Events, outcome: BindOutcome) -> None:
    """Start the binds ``starts`` ((row, BindStarted values) pairs) to
    ``rp_uuid``'s deployable on ``hostname``: one UPDATE per ARQ, to its
    outcome.

    An ARQ whose handle needs no preparation is Bound at once, passing
    through BindStarted in this transaction; one whose handle must be
    prepared stays BindStarted for a job. A provider that is no
    deployable on that host, or too few free handles, raises.
    """
    handles = _claim_free(connection, rp_uuid, hostname, len(starts))
    for (row, values), handle in zip(starts, handles, strict=True):
        held = dict(values, attach_handle_id=handle.id,
                    deployable_id=handle.deployable_id)
        if device_tree.needs_preparation(handle.attach_type):
            arq_db.swap(connection, row, states.BIND_STARTED, held)
            outcome.jobs.append(row.uuid)
        else:
            arq_db.swap(connection, row, states.BOUND, held,
                        via=states.BIND_STARTED)
            events.add(row, states.BOUND)


@db_api.retrying_writer
def bind(context, bindings: dict[str, dict[str, str]],
         project_id: str | None, owner: str,
         lease: Lease | None = None) -> BindOutcome:
    """Bind ARQs, all or none: a check that fails raises its 4xx and
    changes nothing (see the module docstring).

    ``bindings`` maps ARQ uuid to {hostname, device_rp_uuid,
    instance_uuid[, project_id]}. Returns the ARQs left to a job and the
    events queued (leased per ``lease``; unleased without one).
    """
    connection = context.connection
    rows = arq_db.lock(connection, list(bindings), project_id,
                       arq_db.BIND_COLUMNS)
    by_target = collections.defaultdict(list)
    for row, values in arq_db.binds_to_start(rows, bindings, owner,
                                             timeutils.utcnow()):
        by_target[values['device_rp_uuid'],
                  values['hostname']].append((row, values))
    events = _Events(connection, lease)
    outcome = BindOutcome()
    for (rp_uuid, hostname), group in by_target.items():
        _bind_to_deployable(connection, group, rp_uuid, hostname, events,
                            outcome)
    outcome.events = events.insert()
    return outcome


def _lock_binding(connection, uuid: str):
    rows = arq_db.lock_rows(connection, None, uuid=uuid)
    if not rows or rows[0].state != states.BIND_STARTED:
        return None
    return rows[0]


@db_api.main_context_manager.reader.connection
def job_claim(context, uuid: str) -> Claim | None:
    """The handle a BindStarted ARQ's job prepares; None if none."""
    row = context.connection.execute(
        sa.select(ARQS.c.uuid, HANDLES.c.uuid.label('handle_uuid'),
                  HANDLES.c.attach_type, HANDLES.c.attach_info,
                  DEVICES.c.hostname, DEVICES.c.driver)
        .join(HANDLES, HANDLES.c.id == ARQS.c.attach_handle_id)
        .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(ARQS.c.uuid == uuid,
               ARQS.c.state == states.BIND_STARTED)).first()
    if row is None:
        return None
    return Claim(row.uuid, row.handle_uuid, row.attach_type,
                 json.loads(row.attach_info), row.hostname, row.driver)


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
        failure = 'The bind job found no claimed attach handle'
    if failure is None:
        events = _Events(connection, lease)
        arq_db.swap(connection, row, states.BOUND, {})
        events.add(row, states.BOUND)
    else:
        report_until = (row.bind_started_at
                        + datetime.timedelta(seconds=bind_timeout)
                        if bind_timeout is not None else None)
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


@db_api.main_context_manager.reader.connection
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


# Longest failure reason kept in ``bind_error`` (clients see it).
_REASON_LIMIT = 500


def failure_reason(error: Exception) -> str:
    """What a user may read of ``error``: an agent's exception without
    the remote traceback oslo.messaging carries, and not too long."""
    if isinstance(error, messaging.RemoteError):
        reason = '%s: %s' % (error.exc_type, error.value)
    else:
        reason = str(error) or type(error).__name__
    reason = reason.strip().splitlines()[0] if reason.strip() else reason
    if len(reason) > _REASON_LIMIT:
        reason = reason[:_REASON_LIMIT - 3] + '...'
    return reason


class HandlePreparer(Protocol):
    """Asks a handle's agent to prepare it and to release it."""

    def prepare(self, context, claim: Claim) -> None: ...

    def release(self, context, handle: arq_db.PreparedHandle) -> None: ...


class Binder:
    """Binds, unbinds and deletes ARQs; runs the jobs of handles to
    prepare, and the releases of prepared handles, on a thread pool.

    ``deliver`` receives the events each transaction queued, once it has
    committed (the conductor's notifier sends them).
    """

    def __init__(self, owner: str, workers: int, bind_timeout: int,
                 agents: HandlePreparer,
                 deliver: Callable[[list[dict[str, Any]]], None],
                 lease: Lease | None = None):
        self.owner = owner
        self._timeout = bind_timeout
        self._agents = agents
        self._deliver = deliver
        self._lease = lease
        self._executor = futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='bind-job')
        # What runs or waits on the executor: a job's ARQ uuid, None for
        # a release. A future leaves it once done.
        self._work: dict[futures.Future, str | None] = {}
        self._work_lock = threading.Lock()

    def bind(self, context, bindings: dict[str, dict[str, str]],
             project_id: str | None) -> None:
        """Bind now what needs no preparation; submit jobs for the rest."""
        outcome = bind(context, bindings, project_id, self.owner,
                       self._lease)
        self._deliver(outcome.events)
        if outcome.jobs:
            self.submit(cyborg_context.get_admin_context(), outcome.jobs)

    def unbind(self, context, uuids: list[str],
               project_id: str | None) -> None:
        """Unbind ARQs; their prepared handles are released after."""
        self._release_later(arq_db.arq_unbind(context, uuids, project_id))

    def delete(self, context, uuids: list[str] | None,
               instance_uuid: str | None, project_id: str | None) -> None:
        """Delete ARQs; their prepared handles are released after."""
        self._release_later(arq_db.arq_delete(context, uuids, instance_uuid,
                                              project_id))

    def _release_later(self, handles: list[arq_db.PreparedHandle]) -> None:
        if handles:
            self._track(self._executor.submit(
                self._release_logged, cyborg_context.get_admin_context(),
                handles), None)

    def _track(self, future: futures.Future, uuid: str | None) -> None:
        with self._work_lock:
            self._work[future] = uuid
        # Called at once when the future is done already.
        future.add_done_callback(self._forget)

    def _forget(self, future: futures.Future) -> None:
        with self._work_lock:
            self._work.pop(future, None)

    def _release_logged(self, context, handles) -> None:
        try:
            self.release(context, handles)
        except Exception:
            LOG.exception('Releasing %d attach handles failed; the sweeper '
                          'tries again after %ds', len(handles),
                          self._timeout)

    def release(self, context,
                handles: list[arq_db.PreparedHandle]) -> None:
        """Ask the agents to undo the handles' preparation; free those
        released. A handle whose agent fails stays in use for the
        sweeper to try again."""
        released = []
        for handle in handles:
            try:
                self._agents.release(context, handle)
            except Exception as e:
                LOG.warning('Releasing attach handle %s on %s failed (%s); '
                            'it stays in use and is tried again after %ds',
                            handle.uuid, handle.host, e, self._timeout)
            else:
                released.append(handle.id)
        arq_db.free_prepared(context, released)

    def submit(self, context, uuids: list[str]) -> None:
        for uuid in uuids:
            self._track(self._executor.submit(self._run_logged, context,
                                              uuid), uuid)

    def _run_logged(self, context, uuid: str) -> None:
        try:
            self.run(context, uuid)
        except Exception:
            LOG.exception('Bind job of ARQ %s failed unexpectedly; the '
                          'sweeper fails it after %ds', uuid, self._timeout)

    def run(self, context, uuid: str) -> None:
        """Prepare the claimed handle of a BindStarted ARQ and finish."""
        claim = job_claim(context, uuid)
        failure = None
        if claim is not None:
            try:
                self._agents.prepare(context, claim)
            except Exception as e:
                failure = 'Preparing attach handle %s failed: %s' % (
                    claim.handle_uuid, failure_reason(e))
        outcome = finish(context, uuid, failure, self._lease,
                         bind_timeout=self._timeout)
        self._deliver(outcome.events)
        self.release(context, outcome.released)

    def resume(self, context) -> None:
        """Restart this conductor's unfinished jobs (after a restart)."""
        own = unfinished(context, owner=self.owner)
        if own:
            LOG.info('Resuming %d unfinished bind jobs', len(own))
            self.submit(context, own)

    def sweep(self, context) -> None:
        """Fail every job, of any conductor, older than the bind timeout,
        and end the BindFailing ARQs Nova did not act on in that time;
        release again the prepared handles whose release failed."""
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self._timeout)
        for uuid in unfinished(context, older_than=cutoff):
            outcome = finish(
                context, uuid, 'The bind did not finish within %d seconds'
                % self._timeout, self._lease)
            self._deliver(outcome.events)
            self.release(context, outcome.released)
        ended = end_failures(context, cutoff)
        if ended:
            LOG.warning('Nova did not act on the failed binds of %d ARQs '
                        'within %ds; they are BindFailed now: %s',
                        len(ended), self._timeout, ', '.join(ended))
        self._release_later(arq_db.claim_unreleased(context, cutoff,
                                                    timeutils.utcnow()))

    def stop(self, cancel: bool = True,
             timeout: float | None = None) -> list[str]:
        """Take no more work and wait up to ``timeout`` seconds (None: no
        limit) for the running jobs and releases; the queued ones are
        cancelled unless ``cancel`` is false.

        Answers the ARQs whose jobs were cancelled or still run: they are
        handed back, BindStarted, for this conductor to resume when it
        starts again (or a sweeper to fail after the bind timeout). A
        release left over is retried by the sweeper.
        """
        with self._work_lock:
            # Taken before the shutdown: a cancelled future leaves _work.
            work = dict(self._work)
        self._executor.shutdown(wait=timeout is None, cancel_futures=cancel)
        futures.wait(work, timeout=timeout)
        handed_back = sorted(
            uuid for future, uuid in work.items()
            if uuid is not None and (future.cancelled() or not future.done()))
        if handed_back:
            LOG.warning('Handing back %d unfinished bind jobs (ARQs %s): '
                        'they stay BindStarted and are resumed when this '
                        'conductor starts again', len(handed_back),
                        ', '.join(handed_back))
        return handed_back
