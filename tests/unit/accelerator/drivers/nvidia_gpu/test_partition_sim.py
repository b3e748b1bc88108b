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

"""The capacity simulator (tools/bench/partition_sim.py) on a short
trace: its layouts are the model's, every policy replays the same
trace, and homogeneous grants are always created."""

import os
import random
import sys

from cyborg.allinone import fake_mig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
sys.path.insert(0, ROOT)
try:
    from tools.bench import partition_sim as sim
finally:
    sys.path.remove(ROOT)

A100 = fake_mig.MODELS['NVIDIA A100-SXM4-40GB']


def test_the_maximal_layouts_of_the_a100():
    layouts = sim.maximal_layouts(A100, sim.profiles_by_size(A100))
    assert {'7g', '4g+3g', '2x3g', '4g+2g+1g', '3x2g+1g', '7x1g',
            '3g+2g+2x1g'} <= set(layouts)
    # 3g + 3g + 1g fits the compute slices by count, not by position.
    assert '2x3g+1g' not in layouts


def test_a_short_trace_on_every_policy():
    sizes = sim.profiles_by_size(A100)
    requests = sim.trace(600, 4, 0.85, 7 * 4,
                         {s: p.compute for s, p in sizes.items()},
                         random.Random(5))
    layouts = sim.maximal_layouts(A100, sizes)
    static = sim.replay(sim.Static(A100, 4, sizes, [layouts['7x1g']]),
                        'static', requests)
    homogeneous = sim.replay(sim.Homogeneous(A100, 4, sizes),
                             'homogeneous', requests)
    for result in (static, homogeneous):
        assert result.placed + result.rejected == 600
        assert 0 <= result.stranded <= result.rejected
    # A 7x1g fleet places only 1g requests.
    assert static.placed <= sum(r.size == '1g' for r in requests)
    assert homogeneous.unrealizable == 0
    assert homogeneous.placed > static.placed
