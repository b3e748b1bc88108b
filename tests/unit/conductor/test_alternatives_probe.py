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

"""The conductor's probe of ordered alternatives: which queries it sends
(the tree of the last candidate first), against a fake Placement."""

from unittest import mock

from cyborg.clients import placement as placement_client
from cyborg.conductor import alternatives as probe_lib

GROUP = {'resources:PGPU': '1', 'trait:CUSTOM_GPU_H100': 'required'}
FLEET = ('/allocation_candidates?resources1=PGPU%3A1&limit=1'
         '&required1=CUSTOM_GPU_H100')


class _Placement:
    """Answers each query from ``answers`` (query -> provider or None,
    or an exception to raise), recording (query, microversion)."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def request(self, method, path, microversion=None, not_found=None):
        self.asked.append((path, microversion))
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        requests = ([{'allocations': {answer: {'resources': {}}}}]
                    if answer else [])
        return mock.Mock(json=lambda: {'allocation_requests': requests})


def test_the_last_candidate_s_tree_first_then_the_fleet():
    placement = _Placement({FLEET: 'rp-a'})
    prober = probe_lib.Prober(lambda: placement)
    assert prober.first_satisfiable([[GROUP]]) == [0]
    assert placement.asked == [(FLEET, '1.26')]
    in_a = FLEET + '&in_tree1=rp-a'
    placement.answers[in_a] = 'rp-a'
    assert prober.first_satisfiable([[GROUP]]) == [0]
    assert placement.asked[1:] == [(in_a, '1.31')]
    # Tree a full: the fleet is asked, and its answer remembered.
    placement.answers.update({in_a: None, FLEET: 'rp-b'})
    assert prober.first_satisfiable([[GROUP]]) == [0]
    assert placement.asked[2:] == [(in_a, '1.31'), (FLEET, '1.26')]
    placement.answers[FLEET + '&in_tree1=rp-b'] = None
    placement.answers[FLEET] = None
    assert prober.first_satisfiable([[GROUP, GROUP]]) == [0]
    # No candidate anywhere: no hint left to ask.
    assert placement.asked[-1] == (FLEET, '1.26')
    asked = len(placement.asked)
    prober.first_satisfiable([[GROUP]])
    assert placement.asked[asked:] == [(FLEET, '1.26')]


def test_a_placement_without_in_tree_is_asked_for_the_fleet():
    placement = _Placement({FLEET: 'rp-a', FLEET + '&in_tree1=rp-a':
                            placement_client.PlacementError(
                                'Not Acceptable', status_code=406)})
    prober = probe_lib.Prober(lambda: placement)
    for _ in range(2):
        assert prober.first_satisfiable([[GROUP]]) == [0]
    assert [microversion for _path, microversion in placement.asked] == [
        '1.26', '1.31', '1.26']


def test_hints_are_bounded():
    other = {'resources:FPGA': '1'}
    fleet_other = '/allocation_candidates?resources1=FPGA%3A1&limit=1'
    placement = _Placement({FLEET: 'rp-a', fleet_other: 'rp-f',
                            FLEET + '&in_tree1=rp-a': 'rp-a'})
    prober = probe_lib.Prober(lambda: placement, max_hints=1)
    prober.first_satisfiable([[GROUP], [other], [GROUP]])
    assert [path for path, _mv in placement.asked] == [
        FLEET, fleet_other, FLEET]
