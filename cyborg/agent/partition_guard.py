# Copyright 2026 The Cyborg Authors.
#
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

"""The switch guard an agent gives its drivers: the conductor answers
(conductor API 1.10, see :class:`cyborg.conductor.partitions.SwitchGuard`).

A conductor capped below 1.10 cannot be asked: the drivers switch as
they did before it existed. A conductor that does not answer refuses:
an agent that cannot ask does not switch.
"""

from typing import Any
from typing import Callable
from typing import Protocol

from oslo_log import log as logging

from cyborg import context as cyborg_context
from cyborg.domain import partitions

LOG = logging.getLogger(__name__)


class Conductor(Protocol):
    def partition_switch(self, context, host: str, address: str,
                         deployable: str) -> dict[str, Any] | None: ...


class ConductorSwitchGuard:
    """:class:`cyborg.domain.partitions.SwitchGuard` through the
    conductor."""

    def __init__(self, conductor: Conductor, host: str,
                 context_factory: Callable[[], Any]
                 = cyborg_context.get_admin_context) -> None:
        self._conductor = conductor
        self._host = host
        self._context = context_factory

    def may_serve(self, address: str, deployable: str
                  ) -> partitions.SwitchAnswer:
        try:
            answer = self._conductor.partition_switch(
                self._context(), self._host, address, deployable)
        except Exception as exc:
            # A timeout or a conductor's failure: asked again at the next
            # discovery.
            LOG.warning('Cannot ask the conductor whether device %s may '
                        'serve %s: %s', address, deployable, exc)
            return partitions.SwitchAnswer(False)
        if answer is None:
            return partitions.ALLOWED  # capped below 1.10
        return partitions.SwitchAnswer.from_wire(answer)
