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

"""The probe behind ordered alternatives: which alternative of a device
profile group Placement can satisfy now (see
:mod:`cyborg.domain.alternatives`)."""

from collections.abc import Callable
from typing import Any
import urllib.parse

from oslo_log import log as logging

from cyborg.clients import placement as placement_client
from cyborg.domain import alternatives

LOG = logging.getLogger(__name__)


class Prober:
    """Asks Placement for one allocation candidate per alternative, in
    order, and stops at the first that has one.

    ``client`` builds (or returns) the Placement client; None: no
    Placement, every group answers its first alternative.
    """

    def __init__(self, client: Callable[[],
                                        placement_client.PlacementClient]
                 | None):
        self._client = client

    def first_satisfiable(self, candidates: list[list[dict[str, Any]]]
                          ) -> list[int]:
        """For each list of plain groups, the index of the first
        Placement can satisfy (0 when none can, or when Placement cannot
        be asked: Nova then fails to place it as it would today)."""
        if self._client is None:
            return [0] * len(candidates)
        try:
            client = self._client()
            return [alternatives.first_satisfiable(
                options, lambda group: _satisfiable(client, group))
                for options in candidates]
        except placement_client.PlacementUnavailable as e:
            LOG.warning('Cannot probe alternatives, Placement is '
                        'unavailable: %s', e)
            return [0] * len(candidates)


def _satisfiable(client: placement_client.PlacementClient,
                 group: dict[str, Any]) -> bool:
    """Whether Placement has an allocation candidate for ``group`` now.
    A query Placement refuses (a trait it does not know) has none."""
    query = urllib.parse.urlencode(alternatives.placement_query(group))
    try:
        response = client.request('GET', '/allocation_candidates?' + query,
                                  not_found=None)
    except placement_client.PlacementUnavailable:
        raise
    except placement_client.PlacementError as e:
        LOG.debug('Alternative %s cannot be satisfied: %s', group, e)
        return False
    return bool(response.json().get('allocation_requests'))
