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

:func:`cyborg.db.binding.bind` runs in the conductor's ``arq_bind`` call, in
one transaction for the whole batch, and decides there everything the
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
   created), or whose group asks for its deployable to be programmed
   (:mod:`cyborg.conductor.programming`), stays BindStarted with the
   handle claimed: a job of the :class:`Binder` asks the agent, then
   :func:`cyborg.db.binding.finish`
   ends it in one transaction: Bound and a ``completed`` event, or
   BindFailing, which Nova does not count as resolved, and a ``failed``
   event that the notifier repeats until Nova unbinds or deletes the ARQ
   or the bind timeout passes (see :mod:`cyborg.domain.arq_states`).

An ARQ unbound or deleted meanwhile stops the job: those paths release
the handle under the ARQ's row lock, so nothing leaks. A conductor that
starts resumes its own unfinished jobs, and every conductor fails any job
older than ``[conductor] bind_timeout`` (BindFailed, one ``failed``
event) and ends the BindFailing ARQs whose time is up (BindFailed), so
no ARQ stays BindStarted or BindFailing.
"""

from collections.abc import Callable
from concurrent import futures
import datetime
import threading
import time
from typing import Any
from typing import Protocol

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.conductor import notifications
from cyborg.conductor import programming
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import errors as db_errors
from cyborg.domain import arq_states
from cyborg.domain import bind_errors
from cyborg.notifications import notifier as notifier_mod

LOG = logging.getLogger(__name__)


# Longest failure reason kept in ``bind_error`` (clients see it).
_REASON_LIMIT = 500
#: Seconds a bind job waits before it runs again a transaction that could
#: not reach the database, doubling up to the maximum (within the bind
#: timeout).
DATABASE_RETRY_INTERVAL = 0.5
DATABASE_RETRY_MAX_INTERVAL = 5.0


def failure_reason(error: Exception) -> str:
    """What a user may read of ``error``: an agent's exception without
    the remote traceback oslo.messaging carries, and not too long."""
    if isinstance(error, messaging.RemoteError):
        reason = '%s: %s' % (error.exc_type, error.value)
    else:
        reason = str(error) or type(error).__name__
    # First line only: what follows is a traceback (clients read bind_error).
    reason = reason.strip().splitlines()[0] if reason.strip() else reason
    if len(reason) > _REASON_LIMIT:
        reason = reason[:_REASON_LIMIT - 3] + '...'
    return reason


def _scoped(arqs: list[dict[str, Any]], project_id: str | None
            ) -> list[dict[str, Any]]:
    """The ARQs of ``arqs`` a caller limited to ``project_id`` (None:
    every project) may change."""
    if project_id is None:
        return arqs
    return [arq for arq in arqs if arq['project_id'] == project_id]


def _log_binds(bindings: dict[str, dict[str, str]],
               outcome: binding_db.BindOutcome) -> None:
    """One INFO line per ARQ a bind bound, or left to a job."""
    for uuid in outcome.bound:
        LOG.info('Bound ARQ %s of instance %s to provider %s on %s', uuid,
                 bindings[uuid]['instance_uuid'],
                 bindings[uuid]['device_rp_uuid'], bindings[uuid]['hostname'])
    for uuid in outcome.jobs:
        LOG.info('Binding ARQ %s of instance %s to provider %s on %s: its '
                 'agent prepares the attach handle', uuid,
                 bindings[uuid]['instance_uuid'],
                 bindings[uuid]['device_rp_uuid'], bindings[uuid]['hostname'])


class HandlePreparer(Protocol):
    """Asks a handle's agent to prepare it and to release it."""

    def prepare(self, context, claim: binding_db.Claim) -> None: ...

    def release(self, context, handle: arq_db.PreparedHandle) -> None: ...


class Binder:
    """Binds, unbinds and deletes ARQs; runs the jobs of handles to
    prepare, and the releases of prepared handles, on a thread pool.

    ``deliver`` receives the events each transaction queued, once it has
    committed (the conductor's notifier sends them); ``programmer``
    programs the regions ARQs ask to be programmed (by default with no
    source of bitstreams: such binds fail); ``notifier`` sends the
    versioned notifications of binds, unbinds and deletions (none by
    default), emitted before the Nova events of the same transaction are
    delivered, so that a listener normally hears of a bind's end before
    Nova acts on it. ``abandoned_timeout``: seconds after its creation
    an ARQ never bound is deleted by the sweep (0: never).
    """

    def __init__(self, owner: str, workers: int, bind_timeout: int,
                 agents: HandlePreparer,
                 deliver: Callable[[list[dict[str, Any]]], None],
                 lease: binding_db.Lease | None = None,
                 programmer: programming.RegionProgrammer | None = None,
                 notifier: notifier_mod.Notifier | None = None,
                 abandoned_timeout: int = 0):
        self.owner = owner
        self._abandoned_timeout = abandoned_timeout
        self._notifier = notifier or notifications.disabled()
        self._programmer = programmer or programming.refusing_programmer()
        self._timeout = bind_timeout
        self._agents = agents
        self._deliver = deliver
        self._lease = lease
        self._executor = futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='bind-job')
        # What runs or waits on the executor: a job's ARQ uuid, None for
        # a release, and when it was submitted. A future leaves it once
        # done.
        self._work: dict[futures.Future, tuple[str | None, float]] = {}
        self._work_lock = threading.Lock()
        # Set by stop(): a job waiting for the database gives up.
        self._stopping = threading.Event()

    def bind(self, context, bindings: dict[str, dict[str, str]],
             project_id: str | None) -> None:
        """Bind now what needs no preparation; submit jobs for the rest."""
        started = time.monotonic()
        try:
            # Described in the transaction when notifications are on.
            outcome = binding_db.bind(context, bindings, project_id,
                                      self.owner, self._lease,
                                      describe=self._notifier.enabled)
        except exception.CyborgException as e:
            if self._notifier.enabled:
                self._notify_refused(context, list(bindings), project_id, e)
            raise
        if self._notifier.enabled:
            # Before the jobs start: a job's end never precedes its start.
            self._notify_started(context, outcome)
        # Only after binding_db.bind committed: Nova must never hear of a bind
        # that rolled back.
        self._deliver(outcome.events)
        _log_binds(bindings, outcome)
        for _uuid in outcome.bound:
            metrics.bind_job('bound', time.monotonic() - started)
        if outcome.jobs:
            # A context of its own: the jobs run on after this call has
            # answered.
            self.submit(cyborg_context.get_admin_context(), outcome.jobs)

    def _notify_refused(self, context, uuids: list[str],
                        project_id: str | None,
                        error: exception.CyborgException) -> None:
        """bind.error for the caller's ARQs of a bind refused at once
        (they are as they were; ``bind_error``: the refusal)."""
        notifications.emit_arqs(
            self._notifier, context, notifications.ARQ_BIND_ERROR,
            _scoped(notifications.read_arqs(uuids=uuids), project_id),
            bind_error=str(error))

    def _notify_started(self, context,
                        outcome: binding_db.BindOutcome) -> None:
        """bind.start for every ARQ whose bind started, then bind.end for
        those bound at once."""
        arqs = outcome.described
        notifications.emit_arqs(self._notifier, context,
                                notifications.ARQ_BIND_START, arqs,
                                state=arq_states.BIND_STARTED)
        notifications.emit_arqs(
            self._notifier, context, notifications.ARQ_BIND_END,
            [arq for arq in arqs if arq['state'] == arq_states.BOUND])

    def _notify_finished(self, context,
                         outcome: binding_db.BindOutcome) -> None:
        """bind.end or bind.error for the ARQs a job (or the sweeper)
        finished."""
        if not (outcome.bound or outcome.failed):
            return
        for arq in notifications.read_arqs(
                uuids=outcome.bound + outcome.failed):
            notifications.emit_arqs(
                self._notifier, context,
                notifications.ARQ_BIND_END if arq['uuid'] in outcome.bound
                else notifications.ARQ_BIND_ERROR, [arq])

    def _changing(self) -> list[dict[str, Any]] | None:
        """A list for the ARQs an unbind or deletion changes, described
        in its transaction before the change (their binding is gone
        after); None (nothing described) when notifications are off."""
        return [] if self._notifier.enabled else None

    def unbind(self, context, uuids: list[str],
               project_id: str | None) -> None:
        """Unbind ARQs; their prepared handles are released after."""
        # An unbound ARQ is left as it is (Nova repeats unbinds).
        changing = self._changing()
        handles = arq_db.arq_unbind(context, uuids, project_id, changing)
        notifications.emit_arqs(self._notifier, context,
                                notifications.ARQ_UNBIND, changing or (),
                                state=arq_states.UNBOUND)
        LOG.info('Unbound ARQs %s (%d prepared attach handles to release)',
                 ', '.join(uuids), len(handles))
        # On the pool: the unbind answers without waiting for the agents, and a
        # failed release is retried by the sweeper.
        self._release_later(handles)

    def delete(self, context, uuids: list[str] | None,
               instance_uuid: str | None, project_id: str | None) -> None:
        """Delete ARQs; their prepared handles are released after."""
        changing = self._changing()
        handles = arq_db.arq_delete(context, uuids, instance_uuid,
                                    project_id, changing)
        notifications.emit_arqs(self._notifier, context,
                                notifications.ARQ_DELETE, changing or (),
                                state=arq_states.DELETING)
        LOG.info('Deleted %s (%d prepared attach handles to release)',
                 'ARQs ' + ', '.join(uuids) if uuids is not None
                 else 'the ARQs of instance %s' % instance_uuid,
                 len(handles))
        self._release_later(handles)

    def _release_later(self, handles: list[arq_db.PreparedHandle]) -> None:
        if handles:
            self._track(self._executor.submit(
                self._release_logged, cyborg_context.get_admin_context(),
                handles), None)

    def _track(self, future: futures.Future, uuid: str | None,
               started: float | None = None) -> None:
        with self._work_lock:
            self._work[future] = (uuid, started or time.monotonic())
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
        # Freed only once the agent undid the preparation, so a handle is never
        # claimed again while still prepared.
        arq_db.free_prepared(context, released)

    def submit(self, context, uuids: list[str]) -> None:
        for uuid in uuids:
            started = time.monotonic()
            self._track(self._executor.submit(self._run_logged, context,
                                              uuid, started), uuid, started)

    def _run_logged(self, context, uuid: str, started: float) -> None:
        try:
            outcome = self.run(context, uuid, started)
            if outcome in ('bound', 'failed'):
                metrics.bind_job(outcome, time.monotonic() - started)
        except Exception:
            LOG.exception('Bind job of ARQ %s failed unexpectedly; the '
                          'sweeper fails it after %ds', uuid, self._timeout)

    def _work_on(self, context, claim: binding_db.Claim) -> str | None:
        """Program the claim's deployable if asked, then prepare its
        handle; the failure, if any, as the ARQ's bind error."""
        try:
            self._programmer.program_for_arq(context, claim)
        except Exception as e:
            return bind_errors.programming_failed(claim.handle_uuid,
                                                  failure_reason(e))
        try:
            self._agents.prepare(context, claim)
        except Exception as e:
            return bind_errors.preparing_failed(claim.handle_uuid,
                                                failure_reason(e))
        return None

    def run(self, context, uuid: str,
            started: float | None = None) -> str | None:
        """Program and prepare what a BindStarted ARQ claimed, and
        finish; the outcome, ``bound`` or ``failed`` (None: the ARQ was
        unbound or deleted meanwhile). ``started``: when the job was
        submitted (``time.monotonic()``), now by default."""
        deadline = (started or time.monotonic()) + self._timeout
        claim = self._until_database_answers(
            uuid, deadline, binding_db.job_claim, context, uuid)
        failure = None
        # No claim: no handle to prepare; finish then fails the ARQ (or
        # does nothing if it was unbound or deleted meanwhile).
        if claim is not None:
            failure = self._work_on(context, claim)
        outcome = self._until_database_answers(
            uuid, deadline, binding_db.finish, context, uuid, failure,
            self._lease, bind_timeout=self._timeout)
        if self._notifier.enabled:
            self._notify_finished(context, outcome)
        self._deliver(outcome.events)
        if outcome.bound and claim is not None:
            LOG.info('Bound ARQ %s: attach handle %s prepared on %s',
                     uuid, claim.handle_uuid, claim.device_host)
        # On failure, the handle this job prepared: released once finish has
        # committed the ARQ's end, so no ARQ still holds it.
        self.release(context, outcome.released)
        if outcome.bound:
            return 'bound'
        return 'failed' if outcome.events else None

    def _until_database_answers(self, uuid: str, deadline: float, fn,
                                *args, **kwargs):
        """``fn(*args, **kwargs)``, a transaction of the job of ARQ
        ``uuid``, run again while the database cannot be reached, until
        ``deadline`` (the job's bind timeout) or this binder stops.

        Without it a job that met a database outage was left to the
        sweeper, and Nova heard of its ARQ only after the bind timeout
        (300 s by default) although the database was back within
        seconds. Each transaction is one logical step of the job (its
        claim, its end), so running it again is safe."""
        delay = DATABASE_RETRY_INTERVAL
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                # Stopping: the job is handed back as it is (resumed at
                # the next start, or failed by a sweeper).
                if (not db_errors.is_unavailable(e)
                        or time.monotonic() + delay > deadline
                        or self._stopping.wait(0)):
                    raise
                LOG.warning('Bind job of ARQ %s cannot reach the database '
                            '(%s); next try in %.1fs', uuid,
                            type(e).__name__, delay)
            self._stopping.wait(delay)
            delay = min(delay * 2, DATABASE_RETRY_MAX_INTERVAL)

    def resume(self, context) -> None:
        """Restart this conductor's unfinished jobs (after a restart)."""
        own = binding_db.unfinished(context, owner=self.owner)
        if own:
            LOG.info('Resuming %d unfinished bind jobs', len(own))
            self.submit(context, own)

    def sweep(self, context) -> None:
        """Fail every job, of any conductor, older than the bind timeout,
        and end the BindFailing ARQs Nova did not act on in that time;
        release again the prepared handles whose release failed; delete
        the abandoned ARQs (:meth:`delete_abandoned`)."""
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self._timeout)
        for uuid in binding_db.unfinished(context, older_than=cutoff):
            outcome = binding_db.finish(
                context, uuid, bind_errors.timed_out(self._timeout),
                self._lease)
            if outcome.events:
                # A job of any conductor: it ran at least this long.
                metrics.bind_job('failed', self._timeout)
            if self._notifier.enabled:
                self._notify_finished(context, outcome)
            self._deliver(outcome.events)
            self.release(context, outcome.released)
        ended = binding_db.end_failures(context, cutoff)
        if ended:
            LOG.warning('Nova did not act on the failed binds of %d ARQs '
                        'within %ds; they are BindFailed now: %s',
                        len(ended), self._timeout, ', '.join(ended))
        # claim_unreleased marks the handles as of now, so that the other
        # conductors' sweepers leave them alone while this one retries.
        self._release_later(arq_db.claim_unreleased(context, cutoff,
                                                    timeutils.utcnow()))
        self.delete_abandoned(context)

    def delete_abandoned(self, context) -> list[str]:
        """Delete the ARQs never bound within ``abandoned_timeout`` of
        their creation (none when it is 0); their uuids."""
        if not self._abandoned_timeout:
            return []
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self._abandoned_timeout)
        changing = self._changing()
        uuids = arq_db.delete_abandoned(context, cutoff, changing)
        if uuids:
            notifications.emit_arqs(self._notifier, context,
                                    notifications.ARQ_DELETE, changing or (),
                                    state=arq_states.DELETING)
            LOG.warning('Deleted %d ARQs never bound within %ds of their '
                        'creation (the answer to their creation was lost, '
                        'or their creator gave up): %s', len(uuids),
                        self._abandoned_timeout, ', '.join(uuids))
        return uuids

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
        self._stopping.set()
        with self._work_lock:
            # Taken before the shutdown: a cancelled future leaves _work.
            work = dict(self._work)
        self._executor.shutdown(wait=timeout is None, cancel_futures=cancel)
        futures.wait(work, timeout=timeout)
        handed = {uuid: started for future, (uuid, started) in work.items()
                  if uuid is not None
                  and (future.cancelled() or not future.done())}
        now = time.monotonic()
        for started in handed.values():
            metrics.bind_job('handed_back', now - started)
        handed_back = sorted(handed)
        if handed_back:
            LOG.warning('Handing back %d unfinished bind jobs (ARQs %s): '
                        'they stay BindStarted and are resumed when this '
                        'conductor starts again', len(handed_back),
                        ', '.join(handed_back))
        return handed_back
