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

from cyborg.api.controllers.v2 import deployable_program
from cyborg.common import exception

IMAGE = '8e3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a'


def _op(**fields):
    op = {'op': 'replace', 'path': '/program',
          'value': [{'image_uuid': IMAGE}]}
    op.update(fields)
    return {key: value for key, value in op.items() if value is not None}


@pytest.mark.parametrize('ops', [
    [_op()],
    [_op(op='add')],
    # Upstream's own tests send /bitstream_id.
    [_op(path='/bitstream_id')],
    [_op(value=[{'image_uuid': IMAGE.upper()}])],
    # Only the first op is read (each is still checked).
    [_op(), _op(value=[{'image_uuid': 'ignored'}])],
])
def test_the_image_of_the_first_op(ops):
    assert deployable_program.image_uuid(ops) == IMAGE


@pytest.mark.parametrize('ops, message', [
    ([_op(op='move')], "Invalid patch op 'move'"),
    ([_op(path='program')], "Invalid patch path 'program'"),
    ([_op(path='/a b')], "Invalid patch path '/a b'"),
    ([_op(path='/uuid')],
     "'/uuid' is an internal attribute and can not be updated"),
    ([_op(path='/num_accelerators')], 'internal attribute'),
    ([{'op': 'replace', 'path': '/program'}],
     "'add' and 'replace' operations need a value"),
    ([{'op': 'remove', 'path': '/program'}], "'remove' cannot program"),
    ([_op(value=[])], 'must be a list of one object'),
    ([_op(value={'image_uuid': IMAGE})], 'must be a list of one object'),
    ([_op(value=[IMAGE])], 'must be a list of one object'),
    ([_op(value=[{'image': IMAGE}])], 'needs "image_uuid"'),
    ([_op(value=[{'image_uuid': 'nope'}])],
     'Expected a uuid but received nope.'),
    ([_op(value=[{'image_uuid': 7}])], 'Expected a uuid but received 7.'),
    # A later op is checked too.
    ([_op(), _op(path='/id')], "'/id' is an internal attribute"),
])
def test_bad_requests_are_400s(ops, message):
    with pytest.raises(exception.Invalid) as error:
        deployable_program.image_uuid(ops)
    assert error.value.code == 400
    assert message in error.value.message
