"""Binding accelerator requests to attach handles.

A bind is a job recorded in the ARQ row itself: ``arq_bind_start`` moves
the ARQs to BindStarted with the conductor's name and the time, and the
job then, for each ARQ:

1. claims a free attach handle of the deployable whose resource provider
   Nova allocated, in the same transaction that records the handle on the
   ARQ (``SKIP LOCKED`` where the database has it; a handle is never held
   by two ARQs: the claim is a compare-and-swap on ``in_use`` and the
   ARQ's handle column is unique);
2. asks the device's agent to prepare the handle when it needs it (an
   mdev is created);
3. moves the ARQ to Bound, or BindFailed with a reason, and queues the
   ``accelerator-request-bound`` event for Nova in that same transaction.

An ARQ unbound or deleted meanwhile stops the job: those paths release
the handle under the ARQ's row lock, so nothing leaks. A conductor that
starts resumes its own unfinished jobs, and every conductor fails any job
older than ``[conductor] bind_timeout``, so no ARQ stays BindStarted.
"""

import dataclasses
import datetime
import json
from collections.abc import Callable
from concurrent import futures

from oslo_db import exception as db_exc
from oslo_log import log as logging
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.common import arq_states as states
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import models

LOG = logging.getLogger(__name__)

ARQS = models.ExtendedAcceleratorRequest.__table__
HANDLES = models.AttachHandle.__table__
DEPLOYABLES = models.Deployable.__table__
DEVICES = models.Device.__table__

CLAIM_ATTEMPTS = 5


@dataclasses.dataclass
class Claim:
    arq_uuid: str
    handle_uuid: str
    attach_type: str
    attach_info: dict[str, str]
    device_host: str
    driver: str | None


def _fail(session, row, reason: str) -> None:
    """BindFailed with ``reason``; releases any claimed handle."""
    arq_db._release_handle(session, row)
    arq_db._swap(session, row, states.BIND_FAILED,
                 dict(bind_error=reason, attach_handle_id=None,
                      deployable_id=None))
    _enqueue(session, row, states.BIND_FAILED)
    LOG.warning('Bind of ARQ %s failed: %s', row.uuid, reason)


def _enqueue(session, row, state: str) -> None:
    from cyborg.db import nova_events
    if row.instance_uuid:
        nova_events.enqueue(session.connection(), arq_uuid=row.uuid,
                            instance_uuid=row.instance_uuid,
                            status=states.EVENT_STATUS[state],
                            now=timeutils.utcnow())


def _lock_binding(session, uuid: str):
    row = session.execute(sa.select(ARQS).where(ARQS.c.uuid == uuid)
                          .with_for_update()).first()
    if row is None or row.state != states.BIND_STARTED:
        return None
    return row


def _claim_of(session, row, handle_id: int) -> Claim:
    handle = session.execute(
        sa.select(HANDLES.c.uuid, HANDLES.c.attach_type,
                  HANDLES.c.attach_info, DEVICES.c.hostname,
                  DEVICES.c.driver)
        .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(HANDLES.c.id == handle_id)).first()
    return Claim(row.uuid, handle.uuid, handle.attach_type,
                 json.loads(handle.attach_info), handle.hostname,
                 handle.driver)


@db_api.writer
def claim_handle(context, uuid: str) -> Claim | None:
    """Claim a handle for a binding ARQ; None if the bind is over."""
    session = context.session
    row = _lock_binding(session, uuid)
    if row is None:
        return None
    if row.attach_handle_id is not None:  # a resumed job
        return _claim_of(session, row, row.attach_handle_id)
    deployable = session.execute(
        sa.select(DEPLOYABLES.c.id, DEVICES.c.status, DEVICES.c.health,
                  DEVICES.c.missing)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEPLOYABLES.c.rp_uuid == row.device_rp_uuid)).first()
    if deployable is None:
        _fail(session, row, 'No deployable has resource provider %s'
              % row.device_rp_uuid)
        return None
    for _attempt in range(CLAIM_ATTEMPTS):
        handle = session.execute(
            sa.select(HANDLES.c.id)
            .where(HANDLES.c.deployable_id == deployable.id,
                   HANDLES.c.in_use == sa.false())
            .order_by(HANDLES.c.id).limit(1)
            .with_for_update(skip_locked=True)).first()
        if handle is None:
            break
        taken = session.execute(
            sa.update(HANDLES).where(HANDLES.c.id == handle.id,
                                     HANDLES.c.in_use == sa.false())
            .values(in_use=True, updated_at=timeutils.utcnow())).rowcount
        if taken:
            session.execute(sa.update(ARQS).where(ARQS.c.id == row.id).values(
                attach_handle_id=handle.id, deployable_id=deployable.id))
            return _claim_of(session, row, handle.id)
    _fail(session, row, 'No free attach handle on the device of resource '
                        'provider %s' % row.device_rp_uuid)
    return None


@db_api.writer
def finish(context, uuid: str, failure: str | None = None) -> None:
    """Bound (or BindFailed with ``failure``) and the event for Nova."""
    session = context.session
    row = _lock_binding(session, uuid)
    if row is None:
        return  # unbound or deleted meanwhile; they released the handle
    if failure is not None:
        _fail(session, row, failure)
        return
    arq_db._swap(session, row, states.BOUND, {})
    _enqueue(session, row, states.BOUND)


@db_api.main_context_manager.reader.connection
def unfinished(context, owner: str | None = None,
               older_than: datetime.datetime | None = None) -> list[str]:
    """BindStarted ARQs of ``owner`` or started before ``older_than``."""
    query = sa.select(ARQS.c.uuid).where(
        ARQS.c.state == states.BIND_STARTED)
    if owner is not None:
        query = query.where(ARQS.c.bind_owner == owner)
    if older_than is not None:
        query = query.where(ARQS.c.bind_started_at < older_than)
    return [row.uuid for row in context.connection.execute(query)]


@db_api.writer
def fail_stale(context, uuid: str, timeout: int) -> None:
    row = _lock_binding(context.session, uuid)
    if row is not None:
        _fail(context.session, row,
              'The bind did not finish within %d seconds' % timeout)


@db_api.main_context_manager.reader.connection
def stale_deleting(context, older_than: datetime.datetime) -> list[str]:
    return [row.uuid for row in context.connection.execute(
        sa.select(ARQS.c.uuid).where(ARQS.c.state == states.DELETING,
                                     ARQS.c.updated_at < older_than))]


class Binder:
    """Runs bind jobs on a thread pool of this conductor."""

    def __init__(self, owner: str, workers: int, bind_timeout: int,
                 prepare: Callable[[object, Claim], None],
                 on_resolved: Callable[[], None]):
        self.owner = owner
        self._timeout = bind_timeout
        self._prepare = prepare
        self._on_resolved = on_resolved
        self._executor = futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='bind-job')

    def submit(self, context, uuids: list[str]) -> None:
        for uuid in uuids:
            self._executor.submit(self._run_logged, context, uuid)

    def _run_logged(self, context, uuid: str) -> None:
        try:
            self.run(context, uuid)
        except Exception:
            LOG.exception('Bind job of ARQ %s failed unexpectedly; the '
                          'sweeper fails it after %ds', uuid, self._timeout)

    def run(self, context, uuid: str) -> None:
        try:
            claim = claim_handle(context, uuid)
        except db_exc.DBDuplicateEntry:
            claim = claim_handle(context, uuid)  # lost a race: retry once
        if claim is not None:
            failure = None
            try:
                self._prepare(context, claim)
            except Exception as e:
                failure = 'Preparing attach handle %s failed: %s' % (
                    claim.handle_uuid, e)
            finish(context, uuid, failure)
        self._on_resolved()

    def resume(self, context) -> None:
        """Restart this conductor's unfinished jobs (after a restart)."""
        own = unfinished(context, owner=self.owner)
        if own:
            LOG.info('Resuming %d unfinished bind jobs', len(own))
            self.submit(context, own)

    def sweep(self, context) -> None:
        """Fail every job, of any conductor, older than the bind timeout;
        remove ARQs stuck in Deleting."""
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self._timeout)
        for uuid in unfinished(context, older_than=cutoff):
            fail_stale(context, uuid, self._timeout)
        stale = stale_deleting(context, cutoff)
        arq_db.arq_purge(context, stale)
        self._on_resolved()

    def stop(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
