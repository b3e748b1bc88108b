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

"""The hourly usage record, end to end: a real conductor, a real
RabbitMQ, a real notification listener, and a clock the test sets.

Over three audit periods (10:00-13:00) ARQs are bound, unbound, rebound
and deleted through the conductor's RPC API; the conductor is SIGKILLed
in the middle of the second period's audit, after it created the
records and while it is blocked sending the first one (its notification
connection goes through a proxy that stops forwarding). A new conductor
sends the records once the dead one's lease has expired. The listener
must receive exactly one record per bound ARQ per period, whose seconds
add up to the time each was bound.
"""

import collections
import datetime
import os
import signal
import sys
import threading
import time
import types
import uuid

from oslo_config import cfg
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import migration
from cyborg.db import models
from cyborg.domain import usage
from tests import factories
from tests.functional import clocked
from tests.functional import servers
from tests.functional.fake_nova import FakeNova
from tests.functional.tcp_proxy import HoldingProxy

HOST = 'compute-1'
PROFILE = 'usage-fpga'
RP_UUID = '3f6a1c2e-8b4d-4e7f-a9c1-5d2b7e0f4a68'
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
TIMEOUT = 30
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        'clocked.py')


def t(hour: int, minute: int = 0, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2030, 1, 1, hour, minute, second)


class Listener:
    """The exists notifications received, in order."""

    def __init__(self):
        self.records: list[dict] = []
        self.lock = threading.Lock()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        if event_type == usage.EVENT_TYPE:
            with self.lock:
                self.records.append(payload['cyborg_object.data'])

    def count(self) -> int:
        with self.lock:
            return len(self.records)


class Conductor:
    """cyborg-conductor under the test's clock, started again at will."""

    def __init__(self, work_dir: str, config: dict, clock_file: str):
        self.work_dir = work_dir
        self.config_file = servers.write_config(
            os.path.join(work_dir, 'conductor.conf'), config)
        self.clock_file = clock_file
        self.starts = 0
        self.process = None
        self.log = None

    def start(self) -> None:
        self.starts += 1
        self.log = os.path.join(self.work_dir,
                                'conductor-%d.log' % self.starts)
        self.process = servers.spawn(
            [sys.executable, LAUNCHER, self.clock_file,
             'cyborg.cmd.conductor', '--config-file', self.config_file],
            self.log, env=dict(os.environ, PYTHONUNBUFFERED='1'),
            cwd=self.work_dir)
        servers.wait_for(lambda: 'Started cyborg-conductor' in open(
            self.log, errors='replace').read(), 90, 'the conductor',
            self.process, self.log)

    def kill(self) -> None:
        servers.kill_group(self.process, signal.SIGKILL)

    def stop(self) -> None:
        if self.process is not None:
            servers.kill_group(self.process, signal.SIGTERM, 20)


@pytest.fixture
def deployment(postgres, rabbitmq, tmp_path):
    """The database (one FPGA of 3 PCI handles on HOST), a conductor on
    its own vhost whose notifications go through a proxy, a listener, an
    RPC client and the clock."""
    name = 'cyborg_usage_%s' % uuid.uuid4().hex[:8]
    url = postgres.create_database(name)
    engine = sa.create_engine(url)
    migration.upgrade(engine=engine)
    device = factories.create_test_device(engine, hostname=HOST,
                                          vendor='8086', model='0b30')
    deployable = factories.create_test_deployable(
        engine, device_id=device['id'], num_accelerators=3, rp_uuid=RP_UUID)
    factories.create_test_attribute(engine, deployable_id=deployable['id'],
                                    key='rc', value='FPGA')
    cpid = factories.create_test_controlpath_id(engine,
                                                device_id=device['id'])
    for function in range(3):
        factories.create_test_attach_handle(
            engine, deployable_id=deployable['id'], cpid_id=cpid['id'],
            attach_info=factories.pci_info(function))
    factories.create_test_device_profile(engine=engine, name=PROFILE)

    vhost = rabbitmq.create_vhost('usage-audit')
    clock_file = str(tmp_path / 'clock')
    clocked.set_clock(clock_file, t(10, 10))
    conf = cfg.CONF
    rpc.register_opts(conf)
    conf.set_override('transport_url', vhost)
    transport = rpc.get_transport(conf)
    listener_transport = messaging.get_notification_transport(conf,
                                                              url=vhost)
    received = Listener()
    listener = messaging.get_notification_listener(
        listener_transport,
        [messaging.Target(topic='versioned_notifications',
                          exchange='cyborg')],
        [received], executor='threading')
    with FakeNova() as nova, HoldingProxy(rabbitmq.port) as proxy:
        conductor = Conductor(str(tmp_path), {
            'DEFAULT': {'host': 'usage-conductor', 'transport_url': vhost,
                        'periodic_interval': 1},
            'database': {'connection': url},
            'notifications': {
                'driver': 'messagingv2',
                # The same vhost through the proxy.
                'transport_url': vhost.replace(':%d/' % rabbitmq.port,
                                               ':%d/' % proxy.port)},
            'nova': {'auth_type': 'admin_token', 'endpoint': nova.url,
                     'token': 'admin', 'endpoint_override': nova.url,
                     'timeout': 5},
        }, clock_file)
        listener.start()
        try:
            conductor.start()
            yield types.SimpleNamespace(
                engine=engine, conductor=conductor, proxy=proxy,
                received=received, clock_file=clock_file,
                api=rpcapi.ConductorAPI(transport, timeout=TIMEOUT))
        finally:
            conductor.stop()
            listener.stop()
            listener.wait()
            listener_transport.cleanup()
            rpc.cleanup(transport)
            conf.clear_override('transport_url')
            engine.dispose()
            postgres.drop_database(name)



def _records(engine, period_start=None) -> list[dict]:
    query = sa.select(models.USAGE_RECORDS).order_by(models.USAGE_RECORDS.c.id)
    if period_start is not None:
        query = query.where(
            models.USAGE_RECORDS.c.period_start == period_start)
    with engine.connect() as connection:
        return [dict(row._mapping) for row in connection.execute(query)]


def test_one_record_per_bound_arq_per_period_across_a_sigkill(deployment):
    d = deployment
    context = cyborg_context.RequestContext(project_id='p1', is_admin=True,
                                            roles=['admin'])

    def at(moment):
        clocked.set_clock(d.clock_file, moment)

    def create():
        return d.api.arq_create(context, PROFILE)[0]['uuid']

    def bind(uuid):
        d.api.arq_bind(context, {uuid: {
            'hostname': HOST, 'device_rp_uuid': RP_UUID,
            'instance_uuid': INSTANCE}})

    def received(count, what):
        servers.wait_for(lambda: d.received.count() >= count, TIMEOUT,
                         what, d.conductor.process, d.conductor.log)

    a, b, c = create(), create(), create()
    # Period 1, 10:00-11:00.
    at(t(10, 15))
    bind(a)
    bind(b)
    at(t(10, 45))
    d.api.arq_unbind(context, [b])
    at(t(11, 0, 5))
    received(2, 'the records of 10:00-11:00')
    # Period 2, 11:00-12:00.
    at(t(11, 10))
    bind(c)
    at(t(11, 20))
    bind(b)
    at(t(11, 30))
    d.api.arq_delete(context, [a])
    # The conductor's notifications go nowhere from now on: it creates
    # the records of 11:00-12:00, then blocks sending the first one.
    d.proxy.hold()
    at(t(12, 0, 5))
    servers.wait_for(
        lambda: len(_records(d.engine, t(11))) == 3 and d.proxy.held > 0,
        TIMEOUT, 'the conductor to send a record of 11:00-12:00',
        d.conductor.process, d.conductor.log)
    d.conductor.kill()
    # Killed with the records created, leased to it and none sent.
    assert [(r['claimed_by'], r['sent_at'])
            for r in _records(d.engine, t(11))] == [
        ('usage-conductor', None)] * 3
    assert d.received.count() == 2
    # A new conductor sends them once the dead one's lease has expired.
    d.proxy.release()
    at(t(12, 5, 30))
    d.conductor.start()
    received(5, 'the records of 11:00-12:00, sent by the new conductor')
    # Period 3, 12:00-13:00.
    at(t(12, 30))
    d.api.arq_unbind(context, [c])
    at(t(13, 0, 5))
    received(7, 'the records of 12:00-13:00')
    # Nothing more comes (the audit runs every second): not a record
    # twice, not a period again.
    at(t(13, 20))
    time.sleep(3)

    periods = collections.Counter(
        (r['arq_uuid'], r['audit_period_beginning'])
        for r in d.received.records)
    assert all(count == 1 for count in periods.values()), periods
    seconds = {(r['arq_uuid'], r['audit_period_beginning'][11:16]):
               r['bound_seconds'] for r in d.received.records}
    assert seconds == {
        (a, '10:00'): 45 * 60, (b, '10:00'): 30 * 60,
        (a, '11:00'): 30 * 60, (c, '11:00'): 50 * 60, (b, '11:00'): 40 * 60,
        (c, '12:00'): 30 * 60, (b, '12:00'): 60 * 60}
    # The seconds add up to the time each ARQ was bound.
    totals = collections.Counter()
    for (arq, _period), value in seconds.items():
        totals[arq] += value
    assert totals == {a: (t(11, 30) - t(10, 15)).total_seconds(),
                      b: (t(10, 45) - t(10, 15) + t(13) - t(11, 20)
                          ).total_seconds(),
                      c: (t(12, 30) - t(11, 10)).total_seconds()}
    for record in d.received.records:
        assert (record['project_id'], record['instance_uuid'],
                record['device_profile_name'], record['resource_class'],
                record['vendor'], record['model'], record['host']) == (
            'p1', INSTANCE, PROFILE, 'FPGA', '8086', '0b30', HOST)
    assert all(r['sent_at'] is not None for r in _records(d.engine))


def test_manage_usage_audit_command(tmp_path):
    """``cyborg-manage usage audit``: one line and status 1 when refused,
    the records created otherwise."""
    url = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    engine = sa.create_engine(url)
    migration.upgrade(engine=engine)
    engine.dispose()
    config = servers.write_config(str(tmp_path / 'cyborg.conf'),
                                  {'database': {'connection': url}})

    def manage(*args):
        return servers.run_script('cyborg-manage', 'usage', 'audit', *args,
                                  config_file=config)

    refused = manage('--period-start', '2020-01-01T00:30:00Z')
    assert (refused.returncode, refused.stdout) == (1, '')
    assert refused.stderr.startswith('cyborg-manage: 2020-01-01T00:30:00Z '
                                     'starts no audit period')
    assert len(refused.stderr.splitlines()) == 1
    done = manage('--period-start', '2020-01-01T00:00:00Z')
    assert (done.returncode, done.stdout) == (
        0, 'Created 0 usage records of 2020-01-01T00:00:00Z to '
           '2020-01-01T01:00:00Z; the conductors send them.\n'), done.stderr
    again = manage('--period-start', '2020-01-01T00:00:00Z')
    assert again.returncode == 1
    assert 'was audited already' in again.stderr
    missing = manage()
    assert missing.returncode == 2
