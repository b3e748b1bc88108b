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


"""The library patches (cyborg.common.patches).

Each patch has a test that fails when the installed library no longer
has the shape the patch was written for; the others check what the patch
does and that it stays out when the shape is wrong.
"""

from concurrent import futures
import functools
import inspect
import logging
import threading

from oslo_config import cfg
from oslo_db.sqlalchemy import enginefacade
from oslo_messaging._drivers import amqpdriver
import pecan
from pecan import core as pecan_core
from pecan import routing as pecan_routing
from pecan import util as pecan_util
import pytest
import sqlalchemy

from cyborg import context as cyborg_context
from cyborg.common import patches
from cyborg.common import signals
from tests.unit import fakes


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Controller:
    def plain(self, uuid, *args, **kwargs):
        pass

    @_decorated
    def wrapped(self, name, flag=False):
        pass


@pytest.fixture
def warnings_logged():
    records = fakes.LogRecords()
    logger = logging.getLogger('cyborg.common.patches')
    logger.addHandler(records)
    yield records.records
    logger.removeHandler(records)


# pecan getargspec ------------------------------------------------------------

def test_pecan_still_has_the_argspec_lookups_the_cache_replaces():
    assert list(inspect.signature(pecan_util.getargspec).parameters) == [
        'method']
    assert pecan_core.getargspec in (pecan_util.getargspec,
                                     patches.getargspec)
    assert pecan_routing.getargspec in (pecan_util.getargspec,
                                        patches.getargspec)
    assert 'getargspec' in (
        pecan_core.PecanBase.invoke_controller.__code__.co_names)
    assert 'getargspec' in pecan_routing.find_object.__code__.co_names
    assert patches.pecan_argspec_problem() is None


def test_same_answer_as_pecan():
    controller = Controller()
    for method in (controller.plain, Controller.plain, controller.wrapped):
        assert patches.getargspec(method) == pecan_util.getargspec(method)


def test_inspected_once_per_function(monkeypatch):
    patches._argspec_of.cache_clear()
    calls = []
    real = pecan_util.getargspec
    monkeypatch.setattr(pecan_util, 'getargspec',
                        lambda method: calls.append(method) or real(method))
    for _ in range(3):
        patches.getargspec(Controller().plain)
    assert calls == [Controller.plain]
    patches._argspec_of.cache_clear()


def test_install_replaces_pecans_lookups(monkeypatch):
    monkeypatch.setattr(pecan_core, 'getargspec', pecan_util.getargspec)
    monkeypatch.setattr(pecan_routing, 'getargspec', pecan_util.getargspec)
    assert patches.install_pecan_argspec_cache()
    assert pecan_core.getargspec is patches.getargspec
    assert pecan_routing.getargspec is patches.getargspec


def test_a_changed_pecan_is_left_alone_with_a_warning(monkeypatch,
                                                      warnings_logged):
    def other(method, extra):
        pass
    monkeypatch.setattr(pecan_routing, 'getargspec', other)
    monkeypatch.setattr(pecan_core, 'getargspec', pecan_util.getargspec)
    assert not patches.install_pecan_argspec_cache()
    assert pecan_routing.getargspec is other
    assert pecan_core.getargspec is pecan_util.getargspec
    assert [r.getMessage() for r in warnings_logged] == [
        'Library patch pecan getargspec cache not applied: '
        'pecan.routing.getargspec is no longer pecan.util.getargspec']
    assert warnings_logged[0].levelno == logging.WARNING


# pecan parsed JSON body ------------------------------------------------------

def _parsed(environ):
    if 'parsed' in environ:
        return True, environ['parsed']
    return False, None


def test_pecan_still_reads_the_json_body_the_request_class_replaces():
    """Fails when pecan or webob no longer have the shape
    parsed_json_request was written for."""
    assert patches.pecan_json_problem() is None


def test_the_request_answers_the_parsed_document_else_webobs():
    request_cls = patches.parsed_json_request(_parsed)
    assert issubclass(request_cls, pecan.Request)
    request = request_cls.blank('/v2/x', method='POST', body=b'{"a": 1}')
    request.content_type = 'application/json'
    assert request.json == {'a': 1}
    request.environ['parsed'] = {'b': 2}
    assert request.json == {'b': 2}


def test_a_pecan_that_no_longer_reads_json_gets_its_own_request(
        monkeypatch, warnings_logged):
    def find_controller(self, state):
        return None
    monkeypatch.setattr(pecan_core.PecanBase, 'find_controller',
                        find_controller)
    assert patches.parsed_json_request(_parsed) is pecan.Request
    assert [r.getMessage() for r in warnings_logged] == [
        'Library patch pecan parsed JSON body not applied: '
        'pecan.core.PecanBase.find_controller no longer reads Request.json']


# oslo.messaging idle polling -------------------------------------------------

def test_oslo_messaging_still_starts_its_polls_at_the_patched_minimum():
    assert isinstance(amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN, float)
    assert 'ACK_REQUEUE_EVERY_SECONDS_MIN' in (
        amqpdriver.AMQPListener.__init__.__code__.co_names)
    assert 'ACK_REQUEUE_EVERY_SECONDS_MIN' in (
        amqpdriver.ReplyWaiter.poll.__code__.co_names)
    assert patches.amqp_idle_polling_problem() is None


def test_rabbit_transport_relaxes_idle_polling(conf, monkeypatch):
    from cyborg.common import rpc
    monkeypatch.setattr(amqpdriver, 'ACK_REQUEUE_EVERY_SECONDS_MIN', 0.001)
    conf.set_override('transport_url', 'rabbit://u:p@127.0.0.1:1/')
    transport = rpc.get_transport(conf)  # connects lazily: no broker needed
    try:
        assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == (
            patches.IDLE_POLL_INTERVAL)
    finally:
        transport.cleanup()


def test_relax_idle_polling_never_lowers_the_interval(monkeypatch):
    monkeypatch.setattr(amqpdriver, 'ACK_REQUEUE_EVERY_SECONDS_MIN', 2.0)
    assert patches.relax_amqp_idle_polling(0.5)
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == 2.0
    assert patches.relax_amqp_idle_polling(3.0)
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == 3.0


def test_a_changed_oslo_messaging_is_left_alone_with_a_warning(
        monkeypatch, warnings_logged):
    monkeypatch.setattr(amqpdriver, 'ACK_REQUEUE_EVERY_SECONDS_MIN', '1ms')
    assert not patches.relax_amqp_idle_polling()
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == '1ms'
    assert [r.getMessage() for r in warnings_logged] == [
        "Library patch AMQP idle polling not applied: oslo_messaging."
        "_drivers.amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN is '1ms', not a "
        "number"]


# oslo.config reload undo -----------------------------------------------------

@pytest.fixture
def file_conf(tmp_path):
    conf = cfg.ConfigOpts()
    conf.register_opt(cfg.IntOpt('interval', default=1, mutable=True))
    path = tmp_path / 'test.conf'
    path.write_text('[DEFAULT]\ninterval = 2\n')
    conf(['--config-file', str(path)])
    conf.path = path
    yield conf
    conf.reset()


def test_oslo_config_still_has_the_mutable_namespace_a_reload_replaces(
        file_conf):
    assert hasattr(file_conf, '_mutable_ns')
    assert isinstance(file_conf._ConfigOpts__cache, dict)
    before = file_conf._mutable_ns
    file_conf.path.write_text('[DEFAULT]\ninterval = 3\n')
    file_conf.mutate_config_files()
    # Replaced, never changed in place: the old one can be put back.
    assert file_conf._mutable_ns is not before
    assert patches.mutable_config_problem(file_conf) is None


def test_a_snapshot_puts_the_previous_values_back(file_conf):
    assert file_conf.interval == 2
    restore = patches.mutable_config_snapshot(file_conf)
    file_conf.path.write_text('[DEFAULT]\ninterval = 5\n')
    file_conf.mutate_config_files()
    assert file_conf.interval == 5
    restore()
    assert file_conf.interval == 2


def test_no_snapshot_without_the_namespace(file_conf, monkeypatch):
    monkeypatch.setattr(file_conf, '_ConfigOpts__cache', None)
    with pytest.raises(patches.PatchError, match='cannot undo a reload'):
        patches.mutable_config_snapshot(file_conf)


def test_a_reload_that_could_not_be_undone_is_refused(file_conf, monkeypatch,
                                                      caplog):
    monkeypatch.setattr(patches, 'mutable_config_problem',
                        lambda conf: 'a changed oslo.config')
    file_conf.path.write_text('[DEFAULT]\ninterval = 9\n')
    signals.Signals('cyborg-test', file_conf).reload()
    assert file_conf.interval == 2
    assert ('could not read its configuration files again, its '
            'configuration is unchanged: cannot undo a reload: a changed '
            'oslo.config') in caplog.text


# SQLAlchemy redundant rollbacks ----------------------------------------------

def test_sqlalchemy_still_rolls_back_through_the_dialect():
    """Fails when SQLAlchemy no longer has the shape
    skip_redundant_rollbacks was written for."""
    for dialect in ('sqlite://', 'postgresql+psycopg2://',
                    'mysql+pymysql://'):
        engine = sqlalchemy.create_engine(dialect)
        assert patches.redundant_rollback_problem(engine) is None, dialect


def test_a_dialect_that_changed_is_left_alone_with_a_warning(
        warnings_logged):
    engine = sqlalchemy.create_engine('sqlite://')

    def do_rollback(dbapi_connection, extra):
        pass
    engine.dialect.do_rollback = do_rollback
    do_commit = engine.dialect.do_commit
    assert not patches.skip_redundant_rollbacks(engine)
    assert engine.dialect.do_rollback is do_rollback
    assert engine.dialect.do_commit == do_commit
    assert [r.getMessage() for r in warnings_logged] == [
        'Library patch skip redundant rollbacks not applied: '
        "the sqlite dialect's do_rollback no longer takes a connection"]


def test_a_pool_that_no_longer_rolls_back_through_the_dialect(
        monkeypatch, warnings_logged):
    def reset(self, pool, transaction_was_reset, terminate_only,
              asyncio_safe):
        pass
    monkeypatch.setattr(patches, 'pool_rollback_readers', lambda: (reset,))
    engine = sqlalchemy.create_engine('sqlite://')
    assert not patches.skip_redundant_rollbacks(engine)
    assert 'no longer rolls back through the dialect' in (
        warnings_logged[0].getMessage())


# oslo.messaging obsolete reply queues ----------------------------------------

def test_oslo_messaging_still_reads_the_patched_reply_queue_ttl():
    assert isinstance(amqpdriver.ObsoleteReplyQueuesCache.TTL, int)
    assert 'TTL' in (
        amqpdriver.ObsoleteReplyQueuesCache.__init__.__code__.co_names)
    assert patches.obsolete_reply_queue_problem() is None


def test_rabbit_transport_forgets_obsolete_reply_queues_soon(conf,
                                                             monkeypatch):
    from cyborg.common import rpc
    monkeypatch.setattr(amqpdriver.ObsoleteReplyQueuesCache, 'TTL', 60)
    conf.set_override('transport_url', 'rabbit://u:p@127.0.0.1:1/')
    transport = rpc.get_transport(conf)  # connects lazily: no broker needed
    try:
        cache = amqpdriver.ObsoleteReplyQueuesCache()
        assert cache._cache.ttl == patches.OBSOLETE_REPLY_QUEUE_SECONDS
        # A reply queue given up on is tried again once that is over.
        cache.add('reply_q', 'msg')
        assert not cache.reply_q_valid('reply_q', 'msg')
    finally:
        transport.cleanup()


def test_shorter_reply_queue_memory_never_lengthens_it(monkeypatch):
    monkeypatch.setattr(amqpdriver.ObsoleteReplyQueuesCache, 'TTL', 2)
    assert patches.shorten_obsolete_reply_queue_memory(5)
    assert amqpdriver.ObsoleteReplyQueuesCache.TTL == 2


def test_a_changed_reply_queue_cache_is_left_alone_with_a_warning(
        monkeypatch, warnings_logged):
    monkeypatch.setattr(amqpdriver.ObsoleteReplyQueuesCache, 'TTL', None)
    assert not patches.shorten_obsolete_reply_queue_memory()
    assert [r.getMessage() for r in warnings_logged] == [
        'Library patch obsolete reply queue memory not applied: '
        'oslo_messaging._drivers.amqpdriver.ObsoleteReplyQueuesCache.TTL is '
        'None, not a number']


# oslo.db per-thread transaction tables ---------------------------------------

def test_oslo_db_still_keeps_a_contexts_transactions_per_thread():
    """Fails when oslo.db no longer has the shape
    share_transaction_scopes was written for."""
    assert patches.transaction_scopes_problem() is None


def _tables_made_together(monkeypatch):
    """A table class whose construction waits for a second one: two
    threads that use a new context both find it without a table."""
    made_together = threading.Barrier(2, timeout=10)

    class Table(threading.local):
        def __init__(self):
            made_together.wait()
    monkeypatch.setattr(enginefacade, '_TransactionContextTLocal', Table)


def _tables_of_two_threads(context):
    with futures.ThreadPoolExecutor(2) as pool:
        found = [pool.submit(enginefacade._transaction_contexts_by_thread,
                             context) for _ in range(2)]
        return [future.result() for future in found]


def test_oslo_db_alone_gives_threads_sharing_a_new_context_two_tables(
        monkeypatch):
    """The race the patch closes (fails when oslo.db closes it itself:
    the patch can then go)."""
    _tables_made_together(monkeypatch)

    class Context:
        pass
    first, second = _tables_of_two_threads(Context())
    assert first is not second


def test_threads_sharing_a_new_context_share_one_table(monkeypatch):
    _tables_made_together(monkeypatch)

    class Context:
        pass
    assert patches.share_transaction_scopes(Context)
    context = Context()
    first, second = _tables_of_two_threads(context)
    assert first is second is context._enginefacade_context


def test_the_request_context_has_one_table_per_context():
    from cyborg.db import api as db_api  # noqa: F401 (installs the patch)
    context = cyborg_context.get_admin_context()
    table = context._enginefacade_context
    assert isinstance(table, enginefacade._TransactionContextTLocal)
    assert context._enginefacade_context is table
    assert cyborg_context.get_admin_context()._enginefacade_context is not (
        table)


def test_a_changed_oslo_db_is_left_alone_with_a_warning(monkeypatch,
                                                        warnings_logged):
    monkeypatch.delattr(enginefacade, '_TransactionContextTLocal')

    class Context:
        pass
    assert not patches.share_transaction_scopes(Context)
    assert not hasattr(Context, '_enginefacade_context')
    assert [r.getMessage() for r in warnings_logged] == [
        'Library patch share transaction scopes not applied: oslo.db has '
        'no per-thread transaction table class any more']
