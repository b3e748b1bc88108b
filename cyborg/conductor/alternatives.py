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


# Placement's first microversion with in_tree (and in_tree<N>).
IN_TREE_MICROVERSION = '1.31'


class Prober:
    """Asks Placement for one allocation candidate per alternative, in
    order, and stops at the first that has one.

    ``client`` builds (or returns) the Placement client; None: no
    Placement, every group answers its first alternative.

    Placement builds every candidate of a query before it applies
    ``limit``: the query of an alternative that fits costs with the
    number of providers that fit. So the prober remembers, for each
    query, the provider of the last candidate Placement answered, and
    first asks for a candidate in that provider's tree alone
    (``in_tree``, Placement 1.31), a query of one tree; only when that
    tree has none (or Placement refuses the query) does it ask the whole
    fleet. Either query answers whether a candidate exists now.
    """

    def __init__(self, client: Callable[[],
                                        placement_client.PlacementClient]
                 | None, max_hints: int = 1024):
        self._client = client
        self._max_hints = max_hints
        # Query -> the provider of its last candidate.
        self._hints: dict[str, str] = {}

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
                options, lambda group: self._satisfiable(client, group))
                for options in candidates]
        except placement_client.PlacementUnavailable as e:
            LOG.warning('Cannot probe alternatives, Placement is '
                        'unavailable: %s', e)
            return [0] * len(candidates)

    def _satisfiable(self, client: placement_client.PlacementClient,
                     group: dict[str, Any]) -> bool:
        """Whether Placement has an allocation candidate for ``group``
        now: in the tree of its last candidate, or else anywhere."""
        query = urllib.parse.urlencode(alternatives.placement_query(group))
        hint = self._hints.get(query)
        if hint is not None:
            narrowed = query + '&' + urllib.parse.urlencode({
                'in_tree' + alternatives.PROBE_SUFFIX: hint})
            if _candidate(client, narrowed, IN_TREE_MICROVERSION,
                          group) is not None:
                return True
            self._hints.pop(query, None)
        provider = _candidate(client, query,
                              placement_client.PLACEMENT_MICROVERSION, group)
        if provider is None:
            return False
        if len(self._hints) >= self._max_hints:
            self._hints = {}
        self._hints[query] = provider
        return True


def _candidate(client: placement_client.PlacementClient, query: str,
               microversion: str, group: dict[str, Any]) -> str | None:
    """A provider of Placement's allocation candidate for ``query``, or
    None when it has none. A query Placement refuses (a trait it does not
    know, a microversion it does not have) has none."""
    try:
        response = client.request('GET', '/allocation_candidates?' + query,
                                  microversion=microversion, not_found=None)
    except placement_client.PlacementUnavailable:
        raise
    except placement_client.PlacementError as e:
        LOG.debug('Alternative %s cannot be satisfied: %s', group, e)
        return None
    for request in response.json().get('allocation_requests') or []:
        for provider in request.get('allocations') or {}:
            return provider
    return None
