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

"""The rules that match rows imported from an upstream Cyborg with our
agents' reports."""

import uuid

from cyborg.domain import adoption
from cyborg.domain import providers


def test_handle_identity_ignores_how_numbers_are_spelt():
    upstream = '{"bus":"0c","device":"0","domain":"0000","function":"1"}'
    ours = {'domain': '0000', 'bus': '0c', 'device': '00', 'function': '1'}
    assert adoption.handle_identity(upstream) == adoption.handle_identity(
        ours)
    assert adoption.pci_function(upstream) == '0000:0c:00.1'
    mdev = dict(ours, vgpu_mark='nvidia-223_0')
    assert adoption.handle_identity(mdev) != adoption.handle_identity(ours)
    assert adoption.pci_function('not json') is None


def test_match_prefers_most_shared_functions_then_oldest():
    reported = {'pool': {'a', 'b', 'c'}, 'other': {'z'}}
    foreign = [(5, {'a'}, set()), (3, {'b'}, {'b'}), (9, {'b', 'c'}, set())]
    assert adoption.match(reported, foreign) == {'pool': 9}
    assert adoption.match({'pool': {'a', 'b'}}, foreign[:2]) == {'pool': 3}
    # One holding a function in use that the reported one lacks is not
    # adopted: it stays as it is until released.
    assert adoption.match({'vf-a': {'a'}}, [(1, {'a', 'b'}, {'b'})]) == {}


def test_referenced_and_kept_traits():
    groups = [{'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
              {'trait:CUSTOM_OLD': 'forbidden'}]
    referenced = adoption.referenced_traits(groups)
    assert referenced == {'CUSTOM_FPGA_INTEL', 'CUSTOM_OLD'}
    assert adoption.kept_traits(
        ['CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_X', 'CUSTOM_FAKE_DEVICE'],
        ['CUSTOM_FAKE_DEVICE'], referenced) == ['CUSTOM_FPGA_INTEL']


def test_foreign_is_a_provider_uuid_we_do_not_derive():
    ours = providers.provider_uuid('h1', '0000:10:00.0', '0000_10_00_0')
    assert not adoption.is_foreign(ours, 'h1', '0000:10:00.0',
                                   '0000_10_00_0')
    # Upstream's uuid3 of the name; still foreign under our name.
    upstream = str(uuid.uuid3(uuid.NAMESPACE_DNS, 'h1_FakeDevice'))
    assert adoption.is_foreign(upstream, 'h1', '0000:10:00.0',
                               'h1_FakeDevice')
    assert adoption.is_foreign(upstream, 'h1', '0000:10:00.0',
                               '0000_10_00_0')
