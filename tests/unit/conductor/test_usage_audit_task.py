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

"""The conductor audits usage only where notifications are sent."""

import oslo_messaging as messaging
import pytest

from cyborg.conductor import service as conductor_service
from cyborg.conductor import usage_audit


def _task_names(conf, driver: str) -> dict[str, float]:
    conf.set_override('driver', driver, group='notifications')
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    try:
        conductor = conductor_service.create(conf, transport)
        return {task.name: task.interval for task in conductor._tasks}
    finally:
        transport.cleanup()


def test_no_audit_without_notifications(conf):
    assert 'conductor-usage-audit' not in _task_names(conf, 'noop')


@pytest.mark.parametrize('driver', ['log', 'messagingv2'])
def test_an_audit_every_periodic_interval_with_notifications(conf, driver):
    conf.set_override('periodic_interval', 7)
    assert _task_names(conf, driver)['conductor-usage-audit'] == 7


def test_the_audit_runs_again_after_its_interval_whatever_it_sent(
        conf, monkeypatch):
    """A number a periodic task returns is its next delay: the count of
    records sent must not become one (0 would run it without a pause)."""
    monkeypatch.setattr(usage_audit.UsageAuditor, 'run',
                        lambda self, context: 0)
    conf.set_override('periodic_interval', 7)
    conf.set_override('driver', 'log', group='notifications')
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    try:
        conductor = conductor_service.create(conf, transport)
        [task] = [task for task in conductor._tasks
                  if task.name == 'conductor-usage-audit']
        task._run()
        assert task.next_delay == 7
    finally:
        transport.cleanup()
