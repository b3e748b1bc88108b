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

"""Every change cyborg makes to a library's internals, in one place.

A patch here reaches into what a library does not promise to keep: a
private attribute, a module global another module of the library reads.
Each one therefore

* says why it exists and what it was measured or written against;
* checks, before it applies, that the library still has the shape it was
  written for (the attribute exists, holds the kind of value expected, and
  the library's code still reads it), rather than trusting a version
  range: a new release that keeps the shape keeps the patch;
* has a test in ``tests/unit/common/test_patches.py`` that fails as soon as an
  installed library no longer has that shape, so an upgrade fails there
  instead of silently in production.

When the check fails at run time, what is safe decides what happens:

* :func:`install_pecan_argspec_cache`, :func:`parsed_json_request`,
  :func:`skip_redundant_rollbacks` and :func:`relax_amqp_idle_polling`
  only save CPU or a round trip; cyborg works the same without them.
  :func:`shorten_obsolete_reply_queue_memory` shortens a recovery after a
  RabbitMQ outage; without it the recovery takes a minute more.
  :func:`share_transaction_scopes` closes a rare race of threads that
  share a context; without it that race stays as oslo.db has it. They
  log a WARNING and leave the library as it is.
* :func:`mutable_config_snapshot` makes a reload with an invalid value
  undoable; without it the reload could not be undone, so it raises
  :class:`PatchError` before anything changed and the reload is refused.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import inspect
import threading
from typing import TYPE_CHECKING
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging
from oslo_messaging._drivers import amqpdriver

# pecan, webob and SQLAlchemy are imported by the patches of theirs, not
# with this module: every service imports it for the oslo.messaging
# patches, and the agent, which uses neither a database nor pecan, would
# otherwise import them at start (about 0.5 s of CPU).
if TYPE_CHECKING:
    import pecan
    from sqlalchemy import engine as sa_engine

LOG = logging.getLogger(__name__)

# Seconds an idle RabbitMQ consumer (RPC server listener, reply waiter)
# first sleeps after a message; see relax_amqp_idle_polling.
IDLE_POLL_INTERVAL = 0.5


class PatchError(RuntimeError):
    """A library no longer has the shape a patch was written for."""


def _reads(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function``'s own code reads the global ``name``."""
    code = getattr(function, '__code__', None)
    return code is not None and name in code.co_names


def _skipped(patch: str, problem: str) -> bool:
    LOG.warning('Library patch %s not applied: %s', patch, problem)
    return False


# pecan: memoized controller signatures ---------------------------------------

@functools.lru_cache(maxsize=1024)
def _argspec_of(function):
    from pecan import util as pecan_util
    return pecan_util.getargspec(function)


def getargspec(method):
    """``pecan.util.getargspec``, cached per underlying function.

    A bound method and its function have the same argspec (``self``
    included), so bound methods share their function's entry.
    """
    return _argspec_of(getattr(method, '__func__', method))


def pecan_argspec_readers() -> tuple[tuple[Any, Callable[..., Any]], ...]:
    """The pecan functions that look ``getargspec`` up in their module
    on every request (pecan 1.4 to 1.8), with their modules."""
    from pecan import core as pecan_core
    from pecan import routing as pecan_routing
    return ((pecan_core, pecan_core.PecanBase.invoke_controller),
            (pecan_routing, pecan_routing.find_object))


def pecan_argspec_problem() -> str | None:
    """What keeps :func:`install_pecan_argspec_cache` from applying;
    None: nothing."""
    from pecan import util as pecan_util
    params = list(inspect.signature(pecan_util.getargspec).parameters)
    if params != ['method']:
        return 'pecan.util.getargspec takes %s, not (method)' % params
    for module, reader in pecan_argspec_readers():
        if getattr(module, 'getargspec', None) not in (
                pecan_util.getargspec, getargspec):
            return ('%s.getargspec is no longer pecan.util.getargspec'
                    % module.__name__)
        if not _reads(reader, 'getargspec'):
            return '%s.%s no longer calls getargspec' % (
                module.__name__, reader.__qualname__)
    return None


def install_pecan_argspec_cache() -> bool:
    """Make pecan's routing and dispatch use :func:`getargspec`; whether
    it did.

    Pecan inspects the signature of the routing hook and of the controller
    on every request, and each inspection builds a new namedtuple class:
    about a fifth of the API's CPU time on small requests. Signatures of
    cyborg's controllers never change at run time, so a cached inspection
    gives the same answer. Process-wide.
    """
    problem = pecan_argspec_problem()
    if problem is not None:
        return _skipped('pecan getargspec cache', problem)
    for module, _reader in pecan_argspec_readers():
        module.getargspec = getargspec
    return True


# pecan: a JSON body parsed once --------------------------------------------

def pecan_json_problem() -> str | None:
    """What keeps :func:`parsed_json_request` from applying; None:
    nothing."""
    from pecan import core as pecan_core
    from webob import request as webob_request
    if not isinstance(getattr(webob_request.BaseRequest, 'json', None),
                      property):
        return 'webob.BaseRequest.json is no longer a property'
    if not _reads(pecan_core.PecanBase.find_controller, 'json'):
        return ('pecan.core.PecanBase.find_controller no longer reads '
                'Request.json')
    return None


def parsed_json_request(
        parsed: Callable[[dict], tuple[bool, Any]]) -> type[pecan.Request]:
    """A pecan request class whose ``json`` is the document the pipeline
    parsed already, where ``parsed(environ)`` answers ``(True,
    document)``; webob's parse of the body otherwise. Plain
    ``pecan.Request`` where pecan no longer has that shape.

    Pecan reads the JSON body of every POST and PATCH for the
    controller's keyword arguments (``Request.json`` in
    ``find_controller``), which cyborg's handlers drop: without this,
    a body would be decoded and parsed a second time per request. The
    class is handed to pecan as its ``request_cls``.
    """
    import pecan
    problem = pecan_json_problem()
    if problem is not None:
        _skipped('pecan parsed JSON body', problem)
        return pecan.Request

    class Request(pecan.Request):
        @property
        def json(self):
            seen, document = parsed(self.environ)
            return document if seen else self.json_body

    return Request


# oslo.messaging: fewer idle wake-ups of AMQP consumers -----------------------

#: The oslo.messaging code that starts its polls at
#: ``ACK_REQUEUE_EVERY_SECONDS_MIN`` (oslo.messaging 14.1 to 18.3).
AMQP_IDLE_POLL_READERS = (
    amqpdriver.AMQPListener.__init__,
    amqpdriver.ReplyWaiter.poll,
)


def amqp_idle_polling_problem() -> str | None:
    """What keeps :func:`relax_amqp_idle_polling` from applying; None:
    nothing."""
    value = getattr(amqpdriver, 'ACK_REQUEUE_EVERY_SECONDS_MIN', None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ('oslo_messaging._drivers.amqpdriver.'
                'ACK_REQUEUE_EVERY_SECONDS_MIN is %r, not a number' % value)
    for reader in AMQP_IDLE_POLL_READERS:
        if not _reads(reader, 'ACK_REQUEUE_EVERY_SECONDS_MIN'):
            return '%s no longer reads ACK_REQUEUE_EVERY_SECONDS_MIN' % (
                reader.__qualname__)
    return None


def relax_amqp_idle_polling(interval: float = IDLE_POLL_INTERVAL) -> bool:
    """Make oslo.messaging's AMQP consumers wake up less when idle;
    whether the patch applies.

    After each message, the rabbit driver's RPC listeners and reply
    waiters poll with a timeout that starts at
    ``amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN`` (1 ms) and doubles up to
    5 s; each timeout runs the driver's whole consume/ensure/retry path.
    The short first timeouts only serve acknowledgements queued from
    other threads, which RPC does not use: RPC requests and replies are
    acknowledged in the consumer's own callback. A message still ends
    the wait the moment it arrives, so latency is unchanged; only the
    idle wake-ups (about a fifth of the API's and conductor's CPU under
    load) go. Process-wide; never lowers the library's value.
    """
    problem = amqp_idle_polling_problem()
    if problem is not None:
        return _skipped('AMQP idle polling', problem)
    if amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN < interval:
        amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN = interval
    return True


# oslo.messaging: a reply queue found missing is not dropped for a minute ----

#: Seconds an RPC server drops its replies to a reply queue it gave up
#: sending to (see shorten_obsolete_reply_queue_memory).
OBSOLETE_REPLY_QUEUE_SECONDS = 5


def obsolete_reply_queue_problem() -> str | None:
    """What keeps :func:`shorten_obsolete_reply_queue_memory` from
    applying; None: nothing."""
    cache = getattr(amqpdriver, 'ObsoleteReplyQueuesCache', None)
    ttl = getattr(cache, 'TTL', None)
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool):
        return ('oslo_messaging._drivers.amqpdriver.ObsoleteReplyQueuesCache'
                '.TTL is %r, not a number' % (ttl,))
    if not _reads(cache.__init__, 'TTL'):
        return 'ObsoleteReplyQueuesCache.__init__ no longer reads TTL'
    return None


def shorten_obsolete_reply_queue_memory(
        seconds: float = OBSOLETE_REPLY_QUEUE_SECONDS) -> bool:
    """Make an RPC server drop its replies to a reply queue it gave up
    on for ``seconds`` (oslo.messaging: 60) rather than a minute; whether
    the patch applies.

    A server that could not send a reply for
    ``kombu_missing_consumer_retry_timeout`` (60 s) remembers the reply
    queue as gone and drops every later reply to it, for the cache's
    TTL, without trying. After a RabbitMQ outage of a minute or more, the
    reply to a call received just before it is given up while the broker
    is still away, and the caller (an API process, which declares its
    reply queue again within ``rabbit_interval_max`` of the broker's
    return) then got no answer from that conductor for a minute although
    the conductor did every write: measured with
    ``tools/bench/outages.py``, one conductor of two answered nothing for
    60-63 s after the broker came back. The memory only saves a pooled
    connection's wait for replies to a caller that is really gone: a
    dead caller sends no more calls, so only the replies it was owed are
    tried again, each once more at most every ``seconds``.
    Process-wide; never lengthens the library's value.
    """
    problem = obsolete_reply_queue_problem()
    if problem is not None:
        return _skipped('obsolete reply queue memory', problem)
    cache = amqpdriver.ObsoleteReplyQueuesCache
    if cache.TTL > seconds:
        cache.TTL = seconds
    return True


# SQLAlchemy: no ROLLBACK where no statement ran ------------------------------

def pool_rollback_readers() -> tuple[Callable[..., Any], ...]:
    """The SQLAlchemy code that rolls a connection back through its
    dialect when it returns to the pool (SQLAlchemy 2.0 to 2.1)."""
    from sqlalchemy.pool import base as sa_pool
    return (sa_pool._ConnectionFairy._reset,)


def redundant_rollback_problem(engine: sa_engine.Engine) -> str | None:
    """What keeps :func:`skip_redundant_rollbacks` from applying to
    ``engine``; None: nothing."""
    dialect = engine.dialect
    for name in ('do_commit', 'do_rollback'):
        method = getattr(dialect, name, None)
        if not callable(method):
            return 'the %s dialect has no %s' % (dialect.name, name)
        if len(inspect.signature(method).parameters) != 1:
            return ('the %s dialect\'s %s no longer takes a connection'
                    % (dialect.name, name))
    for reader in pool_rollback_readers():
        if not _reads(reader, 'do_rollback'):
            return ('%s no longer rolls back through the dialect'
                    % reader.__qualname__)
    return None


# A connection that ran no statement since its transaction ended (the
# DBAPI connection's id, in its pool record's info).
_ENDED = 'cyborg_transaction_ended'


def _pool_info(connection) -> dict | None:
    """The pool record's info of a pooled connection; None for one
    outside the pool (the first connect's, a bare DBAPI connection)."""
    try:
        return connection.info
    except (AttributeError, NotImplementedError):
        return None


def skip_redundant_rollbacks(engine: sa_engine.Engine) -> bool:
    """Make ``engine`` skip a ROLLBACK where no statement ran since the
    transaction ended, a round trip per transaction saved.

    oslo.db commits (writers) or rolls back (readers) each transaction,
    then closes its connection; the pool then rolls the connection back
    once more before it keeps it (reset on return), although nothing has
    run since. Here a commit or rollback marks the connection, any
    statement (and any failure of a commit or rollback) and every
    check-out from the pool (its ping) clear the mark, and a rollback of
    a marked connection is skipped: a transaction left open, a failed
    statement, a connection returned without a commit or rollback or one
    new to the pool is still rolled back. (Statements sent through a bare
    DBAPI cursor, which SQLAlchemy's events do not see, would not clear
    the mark: cyborg sends none.) Whether the patch applies (see
    :func:`redundant_rollback_problem`); the database layer calls it on
    every engine it creates.
    """
    from sqlalchemy import event as sa_event
    problem = redundant_rollback_problem(engine)
    if problem is not None:
        return _skipped('skip redundant rollbacks', problem)
    dialect = engine.dialect
    # The dialect's own methods, which the wrappers below end up calling.
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(connection):
        info = _pool_info(connection)
        if info is None:
            commit(connection)
            return
        # Cleared first: a commit that raises leaves the connection
        # unmarked, so the pool's rollback still runs.
        info.pop(_ENDED, None)
        commit(connection)
        # The DBAPI connection's id, not True: a record that reconnects
        # (after an invalidation) holds a new connection the mark must
        # not cover.
        info[_ENDED] = id(connection.dbapi_connection)

    def do_rollback(connection):
        info = _pool_info(connection)
        if info is None:  # nothing is known of it
            rollback(connection)
            return
        if info.pop(_ENDED, None) == id(connection.dbapi_connection):
            # Nothing ran since the commit or rollback: the transaction
            # is over already. The mark stays for the next rollback.
            info[_ENDED] = id(connection.dbapi_connection)
            return
        rollback(connection)
        info[_ENDED] = id(connection.dbapi_connection)

    def statement(connection, *args):
        # The DBAPI begins a transaction with any statement (a SELECT
        # too), which the next rollback must end.
        connection.info.pop(_ENDED, None)

    def checkout(dbapi_connection, record, proxy):
        # The pool's ping (pre_ping) runs on the DBAPI cursor, which
        # SQLAlchemy's statement events do not see.
        record.info.pop(_ENDED, None)

    # The pool's reset on return calls dialect.do_rollback, so wrapping
    # the dialect's methods covers the pool's rollback and oslo.db's
    # alike. SQLAlchemy's pool ``reset`` event cannot skip the pool's
    # rollback unless the engine is made with pool_reset_on_return=None,
    # which oslo.db's engine factory does not pass.
    dialect.do_commit, dialect.do_rollback = do_commit, do_rollback
    sa_event.listen(engine, 'before_cursor_execute', statement)
    sa_event.listen(engine, 'checkout', checkout)
    return True


# oslo.db: one transaction table per context ---------------------------------

# The attribute oslo.db keeps a context's per-thread transactions in.
_SCOPES = '_enginefacade_context'


def transaction_scopes_problem() -> str | None:
    """What keeps :func:`share_transaction_scopes` from applying; None:
    nothing."""
    from oslo_db.sqlalchemy import enginefacade
    table = getattr(enginefacade, '_TransactionContextTLocal', None)
    if not (isinstance(table, type) and issubclass(table, threading.local)):
        return 'oslo.db has no per-thread transaction table class any more'
    finder = getattr(enginefacade, '_transaction_contexts_by_thread', None)
    code = getattr(finder, '__code__', None)
    if code is None or _SCOPES not in code.co_names + code.co_consts:
        return ('oslo.db no longer keeps a context\'s transactions in %s'
                % _SCOPES)
    return None


def share_transaction_scopes(context_class: type) -> bool:
    """Give each ``context_class`` context one table of its per-thread
    transactions, however many threads use it first at the same time.

    oslo.db creates a context's table on its first transaction, without a
    lock: two threads that share a new context (the jobs of one bind, each
    on a worker thread) can each create one, and the thread whose table
    was replaced then finds no transaction of its own in the middle of
    its call (``NoEngineContextEstablished``). Here the table is created
    with ``dict.setdefault``, which the interpreter runs at once (string
    keys), so every thread gets the first table stored.
    """
    problem = transaction_scopes_problem()
    if problem is not None:
        return _skipped('share transaction scopes', problem)
    from oslo_db.sqlalchemy import enginefacade
    table_class = enginefacade._TransactionContextTLocal

    def scopes(context):
        table = context.__dict__.get(_SCOPES)
        if table is None:
            table = context.__dict__.setdefault(_SCOPES, table_class())
        return table

    def set_scopes(context, table):
        context.__dict__[_SCOPES] = table

    setattr(context_class, _SCOPES, property(scopes, set_scopes))
    return True


# oslo.config: undo a reload ------------------------------------------------

def mutable_config_problem(conf: cfg.ConfigOpts) -> str | None:
    """What keeps :func:`mutable_config_snapshot` from working on
    ``conf``; None: nothing."""
    if not hasattr(conf, '_mutable_ns'):
        return 'oslo.config ConfigOpts has no _mutable_ns any more'
    if not isinstance(getattr(conf, '_ConfigOpts__cache', None), dict):
        return 'oslo.config ConfigOpts has no value cache dict any more'
    if not _reads(cfg.ConfigOpts.mutate_config_files, '_mutable_ns'):
        return 'ConfigOpts.mutate_config_files no longer sets _mutable_ns'
    return None


def mutable_config_snapshot(conf: cfg.ConfigOpts) -> Callable[[], None]:
    """A function that puts back the mutable values ``conf`` has now;
    raises :class:`PatchError` (and changes nothing) where oslo.config
    no longer allows it.

    oslo.config has no API to undo ``mutate_config_files``. It replaces
    the namespace of the mutable values (``_mutable_ns``) with a new one
    on each call, never changing one in place, so the previous namespace
    can be put back; the values it cached from the new one go with the
    cache (``_ConfigOpts__cache``).
    """
    problem = mutable_config_problem(conf)
    if problem is not None:
        raise PatchError('cannot undo a reload: %s' % problem)
    before = conf._mutable_ns

    def restore() -> None:
        conf._mutable_ns = before
        conf._ConfigOpts__cache.clear()
    return restore
