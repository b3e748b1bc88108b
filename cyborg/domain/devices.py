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

"""A device's administrative status and when its inventory is offered."""

from cyborg.domain import device_tree

#: Offered to the scheduler (when healthy and present).
ENABLED = 'enabled'
#: Set aside by an operator: its inventory is reserved.
MAINTAINING = 'maintaining'
STATUSES = (ENABLED, MAINTAINING)


def is_schedulable(status: str, health: str, missing: bool) -> bool:
    """Whether new instances may be scheduled on the device: enabled,
    healthy and still reported by its agent."""
    return (status == ENABLED and health == device_tree.Health.HEALTHY.value
            and not missing)
