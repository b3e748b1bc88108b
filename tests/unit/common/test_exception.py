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

"""Every cyborg exception survives oslo.messaging's remote round trip."""

import inspect

import oslo_messaging as messaging
from oslo_messaging import _utils  # noqa: F401  (loads the exc helpers)
from oslo_messaging.rpc import client as rpc_client  # noqa: F401
import pytest

from cyborg.common import exception
from cyborg.common import rpc

try:
    from oslo_messaging import exceptions as _exc  # noqa: F401
    from oslo_messaging._drivers import common as driver_common
except ImportError:  # pragma: no cover - layout of oslo.messaging
    driver_common = None

SAMPLES = {
    exception.DeviceProfileNotFound: {'key': 'name', 'value': 'x'},
    exception.ResourceNotFound: {
        'resource': 'Device',
        'key': 'uuid',
        'value': 'u',
    },
    exception.DuplicateDeviceProfileName: {'name': 'x'},
    exception.DuplicateDeviceProfileUUID: {'uuid': 'u'},
    exception.DeviceProfileInUse: {'name': 'x', 'count': 2},
    exception.Invalid: {'reason': 'bad'},
    exception.InvalidUUID: {'uuid': 'u'},
    exception.Conflict: {'reason': 'taken'},
    exception.PolicyNotAuthorized: {'action': 'a'},
}


def _classes():
    return [
        cls
        for _, cls in inspect.getmembers(exception, inspect.isclass)
        if issubclass(cls, exception.CyborgException)
    ]


@pytest.mark.parametrize('cls', _classes(), ids=lambda c: c.__name__)
def test_constructor_signature_is_not_changed(cls):
    assert cls.__init__ is exception.CyborgException.__init__


@pytest.mark.parametrize(
    'cls, kwargs',
    sorted(SAMPLES.items(), key=lambda i: i[0].__name__),
    ids=lambda v: getattr(v, '__name__', ''),
)
def test_remote_round_trip_keeps_class_status_and_message(cls, kwargs):
    original = cls(**kwargs)
    try:
        raise original
    except cls:
        serialized = driver_common.serialize_remote_exception(
            __import__('sys').exc_info()
        )
    rebuilt = driver_common.deserialize_remote_exception(
        serialized, rpc.ALLOWED_EXMODS
    )
    assert isinstance(rebuilt, cls)
    assert not isinstance(rebuilt, messaging.RemoteError)
    assert rebuilt.code == original.code
    assert rebuilt.message == original.message
