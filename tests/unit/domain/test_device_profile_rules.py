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

import pytest

from cyborg.common import exception
from cyborg.domain import device_profile as rules

BITSTREAM = '0b4e8b6c-6a62-4b5b-9d3c-2a6b1b7e3f11'


def test_normalizes_names_and_amounts():
    group = rules.normalize_group(
        0,
        {
            'resources:custom-fpga': 2,
            'resources: FPGA ': '1',
            'trait:custom-fast': 'required',
            'trait:HW_CPU_X86_AVX2': 'forbidden',
            'accel:bitstream_id': BITSTREAM,
            'accel:attach_target': 'host',
        },
    )
    assert group == {
        'resources:CUSTOM_FPGA': '2',
        'resources:FPGA': '1',
        'trait:CUSTOM_FAST': 'required',
        'trait:HW_CPU_X86_AVX2': 'forbidden',
        'accel:bitstream_id': BITSTREAM,
        'accel:attach_target': 'host',
    }


@pytest.mark.parametrize(
    'group, fragment',
    [
        ({'resource:FPGA': '1'}, 'keys must be of the form'),
        ({'FPGA': '1'}, 'keys must be of the form'),
        ({'resources:BOGUS': '1'}, 'Unsupported resource class BOGUS'),
        ({'resources:FPGA': '\u00b2'}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': '\u0661'}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': '1025'}, 'must be an integer from 1 to 1024'),
        ({'resources:GPU': '1'}, 'use PGPU for a whole GPU'),
        ({'resources:FPGA': '0'}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': '-1'}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': '1.5'}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': True}, 'must be an integer from 1 to 1024'),
        ({'resources:FPGA': 1.0}, 'must be an integer from 1 to 1024'),
        (
            {'resources:FPGA': '1', 'trait:BOGUS': 'required'},
            'Unsupported trait name BOGUS',
        ),
        (
            {'resources:FPGA': '1', 'trait:CUSTOM_A': 'preferred'},
            'Unsupported trait value',
        ),
        (
            {'resources:FPGA': '1', 'accel:colour': 'red'},
            'Unsupported accel key accel:colour',
        ),
        (
            {'resources:FPGA': '1', 'accel:bitstream_id': 'abc'},
            'must be a UUID',
        ),
        (
            {'resources:FPGA': '1', 'accel:function_id': 'abc'},
            'must be a UUID',
        ),
        (
            {'resources:FPGA': '1', 'accel:attach_target': 'VMs'},
            'must be one of VM, host, none',
        ),
        (
            {'resources:FPGA': '1', 'accel:bitstream_name': ''},
            'must not be empty',
        ),
        (
            {'resources:FPGA': '1', 'accel:bitstream_name': 3},
            'must be a string',
        ),
        ({'trait:CUSTOM_A': 'required'}, 'requests no resources'),
        ({'resources:FPGA': '1', 'resources:fpga': '1'}, 'appears twice'),
        (
            {
                'resources:FPGA': '1',
                'accel:bitstream_id': BITSTREAM,
                'accel:function_name': 'gzip',
            },
            'both a bitstream and a function',
        ),
    ],
)
def test_rejects_bad_groups(group, fragment):
    with pytest.raises(exception.InvalidParameterValue) as error:
        rules.normalize_group(3, group)
    assert fragment in str(error.value)
    assert error.value.code == 400


def test_error_names_the_group():
    with pytest.raises(exception.Invalid) as error:
        rules.normalize_groups(
            [{'resources:FPGA': '1'}, {'trait:CUSTOM_A': 'required'}]
        )
    assert 'Group 1' in str(error.value)


def test_accelerator_count_sums_resources_only():
    group = {
        'resources:FPGA': '2',
        'resources:CUSTOM_MEM': '1',
        'trait:CUSTOM_X': 'required',
        'accel:attach_target': 'VM',
    }
    assert rules.accelerator_count(group) == 3


def test_accelerators_of_every_key_and_group_count_towards_the_limit():
    groups = [{'resources:FPGA': '30', 'resources:PGPU': '30'},
              {'resources:VGPU': '5'}]
    assert rules.total_accelerators(rules.normalize_groups(groups)) == 65
    with pytest.raises(exception.LimitExceeded,
                       match='65, more than the 64 allowed'):
        rules.normalize_groups(groups, max_accelerators=64)
    assert len(rules.normalize_groups(groups, max_accelerators=65)) == 2


@pytest.mark.parametrize('group, resource_class, traits, expected', [
    ({'resources:FPGA': '1'}, 'FPGA', set(), []),
    ({'resources:FPGA': '1', 'trait:CUSTOM_A': 'required',
      'trait:CUSTOM_B': 'forbidden'}, 'FPGA', {'CUSTOM_A', 'CUSTOM_C'}, []),
    ({'resources:FPGA': '1'}, 'PGPU', set(),
     ['offers resource class PGPU, not FPGA']),
    ({'resources:FPGA': '1'}, None, set(),
     ['offers resource class (none), not FPGA']),
    ({'resources:FPGA': '1', 'resources:CUSTOM_X': '1'}, 'CUSTOM_X', set(),
     []),
    ({'resources:FPGA': '1', 'resources:CUSTOM_X': '1'}, 'PGPU', set(),
     ['offers resource class PGPU, not CUSTOM_X or FPGA']),
    ({'resources:FPGA': '1', 'trait:CUSTOM_B': 'required',
      'trait:CUSTOM_A': 'required'}, 'FPGA', set(),
     ['lacks required trait CUSTOM_A', 'lacks required trait CUSTOM_B']),
    ({'resources:FPGA': '1', 'trait:CUSTOM_A': 'forbidden'}, 'FPGA',
     {'CUSTOM_A'}, ['has forbidden trait CUSTOM_A']),
    ({'resources:PGPU': '1', 'trait:CUSTOM_A': 'required',
      'trait:CUSTOM_B': 'forbidden'}, 'FPGA', {'CUSTOM_B'},
     ['offers resource class FPGA, not PGPU',
      'lacks required trait CUSTOM_A', 'has forbidden trait CUSTOM_B']),
    # Groups stored before normalization match as Placement matched them.
    ({'resources:custom-x': '1', 'trait: custom-a': 'required'},
     'CUSTOM_X', {'CUSTOM_A'}, []),
    # accel: keys say nothing about the provider.
    ({'resources:FPGA': '1', 'accel:bitstream_name': 'x'}, 'FPGA', set(),
     []),
])
def test_unmet_names_every_mismatch(group, resource_class, traits,
                                    expected):
    assert rules.unmet(group, resource_class, traits) == expected
