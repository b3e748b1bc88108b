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

"""The conductor's one Notifier: as [notifications] says, handed to
every collaborator that emits, never retrying for ever."""

import threading
import time

import oslo_messaging as messaging
import pytest

from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import service as conductor_service
from cyborg.notifications import notifier as notifier_mod


def test_noop_builds_no_oslo_messaging_notifier(conf):
    assert not notifier_mod.Notifier.from_conf(conf, 'x:y').enabled


def test_messagingv2_sends_to_the_topics_and_retries_a_bounded_number(conf):
    conf.set_override('driver', 'messagingv2', group='notifications')
    conf.set_override('transport_url', 'fake:/', group='notifications')
    notifier = notifier_mod.Notifier.from_conf(conf, 'cyborg-conductor:h')
    assert notifier.enabled
    inner = notifier._notifier
    assert inner.publisher_id == 'cyborg-conductor:h'
    assert inner._topics == ['versioned_notifications']
    # oslo.messaging's default (-1) would block the operation for as long
    # as the broker is away.
    assert inner.retry == notifier_mod.SEND_RETRIES == 0


def test_the_conductor_builds_one_notifier_for_every_emitter(conf,
                                                             monkeypatch):
    conf.set_override('host', 'cond-7')
    built = []
    original = notifier_mod.Notifier.from_conf

    def from_conf(conf, publisher_id):
        built.append(publisher_id)
        return original(conf, publisher_id)

    managers = []
    original_manager = conductor_manager.ConductorManager.__init__

    def manager_init(self, *args, **kwargs):
        original_manager(self, *args, **kwargs)
        managers.append(self)

    monkeypatch.setattr(notifier_mod.Notifier, 'from_conf', from_conf)
    monkeypatch.setattr(conductor_manager.ConductorManager, '__init__',
                        manager_init)
    conductor_service.create(conf, messaging.get_rpc_transport(
        conf, 'fake:/'), lambda: None)
    assert built == ['cyborg-conductor:cond-7']
    [manager] = managers
    notifier = manager._notifier
    assert manager._binder._notifier is notifier
    assert manager._programmer._notifier is notifier


class Recording:
    def __init__(self, gate=None):
        self.sent = []
        self.gate = gate
        self.threads = set()

    def info(self, context, event_type, payload):
        if self.gate is not None:
            self.gate.wait(10)
        self.threads.add(threading.current_thread().name)
        self.sent.append(event_type)


def test_from_conf_sends_from_a_thread_of_its_own(conf):
    conf.set_override('driver', 'messagingv2', group='notifications')
    conf.set_override('transport_url', 'fake:/', group='notifications')
    assert notifier_mod.Notifier.from_conf(conf, 'x:y')._queue is not None


def test_in_the_background_notifications_go_in_order_off_the_caller():
    recording = Recording()
    notifier = notifier_mod.Notifier(recording, background=True)
    for index in range(50):
        assert notifier.emit(None, 'e%d' % index, {})
    assert notifier.flush(10)
    assert recording.sent == ['e%d' % index for index in range(50)]
    assert recording.threads == {'notifications'}


def test_a_full_queue_drops_and_flush_gives_up_in_time():
    gate = threading.Event()
    recording = Recording(gate)
    notifier = notifier_mod.Notifier(recording, background=True,
                                     queue_size=1)
    assert notifier.emit(None, 'held', {})
    # The thread holds the first (blocked by the broker); one waits.
    deadline = time.monotonic() + 10
    while notifier._queue.qsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert notifier.emit(None, 'waiting', {})
    assert not notifier.emit(None, 'dropped', {})
    assert not notifier.flush(0.1)
    gate.set()
    assert notifier.flush(10)
    assert recording.sent == ['held', 'waiting']


class Refusing(Recording):
    def info(self, context, event_type, payload):
        raise RuntimeError('the broker is away')


def test_send_is_synchronous_and_says_whether_the_transport_took_it():
    """A usage record is marked sent only once it is: send() runs in the
    caller's thread even on a background notifier, and says False (never
    raises) when the transport refuses."""
    recording = Recording()
    notifier = notifier_mod.Notifier(recording, background=True)
    assert notifier.send(None, 'record', {})
    assert recording.sent == ['record']
    assert recording.threads == {threading.current_thread().name}
    assert not notifier_mod.Notifier(Refusing(), background=True).send(
        None, 'record', {})
    assert not notifier_mod.Notifier(None).send(None, 'record', {})


def test_the_in_process_transport_logs_or_names_what_is_missing(conf):
    """The all-in-one's RPC transport carries no notifications: the log
    driver works without one, messagingv2 asks for a transport_url."""
    conf.set_override('transport_url', 'inproc://')
    conf.set_override('driver', 'log', group='notifications')
    try:
        assert notifier_mod.Notifier.from_conf(conf, 'x:y').enabled
        conf.set_override('driver', 'messagingv2', group='notifications')
        with pytest.raises(exception.ConfigInvalid,
                           match='needs \\[notifications\\] transport_url'):
            notifier_mod.Notifier.from_conf(conf, 'x:y')
        conf.set_override('transport_url', 'fake:/', group='notifications')
        assert notifier_mod.Notifier.from_conf(conf, 'x:y').enabled
    finally:
        conf.clear_override('transport_url')
        conf.clear_override('driver', group='notifications')
        conf.clear_override('transport_url', group='notifications')
