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

"""Why a device has its health: the one rule every writer uses."""

import pytest

from cyborg.domain import devices as rules

H, U = 'healthy', 'unhealthy'


@pytest.mark.parametrize('health, missing, before, reason', [
    # New devices.
    (H, False, None, rules.REASON_DISCOVERED),
    (U, False, None, rules.REASON_UNHEALTHY),
    # Unchanged: the stamp stays, whatever it says.
    (H, False, (H, False, rules.REASON_RECOVERED), None),
    (U, False, (U, False, None), None),
    (H, True, (H, True, rules.REASON_VANISHED), None),
    # Health changes.
    (U, False, (H, False, rules.REASON_DISCOVERED), rules.REASON_UNHEALTHY),
    (H, False, (U, False, rules.REASON_UNHEALTHY), rules.REASON_RECOVERED),
    (H, False, (U, False, None), rules.REASON_RECOVERED),
    # Presence changes.
    (H, True, (H, False, None), rules.REASON_VANISHED),
    (U, True, (U, False, rules.REASON_UNHEALTHY), rules.REASON_VANISHED),
    (H, False, (H, True, rules.REASON_VANISHED), rules.REASON_REAPPEARED),
    (H, False, (U, True, rules.REASON_VANISHED), rules.REASON_REAPPEARED),
    (U, False, (H, True, rules.REASON_VANISHED), rules.REASON_UNHEALTHY),
    # An imported device's first report is its discovery.
    (H, False, (H, False, rules.REASON_IMPORTED), rules.REASON_DISCOVERED),
    (U, False, (H, False, rules.REASON_IMPORTED), rules.REASON_UNHEALTHY),
])
def test_health_reason(health, missing, before, reason):
    assert rules.health_reason(health, missing, before) == reason


def test_reasons_fit_their_column():
    assert len(set(rules.REASONS)) == len(rules.REASONS)
    assert all(0 < len(reason) <= 255 for reason in rules.REASONS)
