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

import json

from cyborg.notifications import envelope


def test_the_envelope_is_novas_with_the_cyborg_prefix():
    payload = envelope.envelope('DevicePayload', '1.0', {'uuid': 'u'})
    assert payload == {
        'cyborg_object.name': 'DevicePayload',
        'cyborg_object.namespace': 'cyborg',
        'cyborg_object.version': '1.0',
        'cyborg_object.data': {'uuid': 'u'},
    }


def test_the_envelope_crosses_json():
    payload = envelope.envelope('X', '1.2', {'a': [1, None]})
    assert json.loads(json.dumps(payload)) == payload
