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

"""The allocation audit's rules."""

from cyborg.domain import allocation_audit as audit

P1 = audit.Provider('rp-1', 'h1', '0000:01:00.0')
P2 = audit.Provider('rp-2', 'h1', '0000:02:00.0')


def _arq(uuid, instance, rp, state='Bound'):
    return audit.HeldARQ(uuid, state, instance, rp, 'h1')


def test_an_allocation_is_held_by_an_arq_of_its_consumer_on_its_provider():
    allocations = {'rp-1': {'i1': {'FPGA': 1}, 'i2': {'FPGA': 1}},
                   'rp-2': {'i1': {'FPGA': 1}}}
    # i1's ARQ is on rp-1 only: its rp-2 allocation has no ARQ behind it.
    found = audit.orphan_allocations([P2, P1], allocations,
                                     [_arq('a1', 'i1', 'rp-1')])
    assert [(f.consumer, f.provider.rp_uuid) for f in found] == [
        ('i2', 'rp-1'), ('i1', 'rp-2')]


def test_only_the_instances_not_seen_are_asked_about():
    allocations = {'rp-1': {'i1': {'FPGA': 1}}}
    arqs = [_arq('a1', 'i1', 'rp-1'), _arq('a2', 'i3', 'rp-1'),
            _arq('a3', 'i2', 'rp-2')]
    assert audit.instances_to_check(allocations, arqs) == ['i2', 'i3']
    assert [f.arq.uuid for f in audit.orphan_arqs(arqs, {'i3'})] == ['a2']


def test_descriptions_name_what_to_look_at():
    [found] = audit.orphan_allocations([P1], {'rp-1': {'i9': {
        'FPGA': 2, 'CUSTOM_X': 1}}}, [])
    assert found.describe() == (
        'Allocation without an ARQ: consumer i9 holds CUSTOM_X=1, FPGA=2 '
        'of provider rp-1 (host h1, device 0000:01:00.0)')
    [stale] = audit.orphan_arqs([_arq('a1', 'i1', 'rp-1', 'BindFailed')],
                                {'i1'})
    assert stale.describe() == (
        'ARQ without a consumer: ARQ a1 (BindFailed) holds instance i1 on '
        'host h1, which has no allocation in Placement')
