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

"""A bind error's text and the class of error it names
(cyborg.domain.bind_errors)."""

import pytest

from cyborg.domain import bind_errors
from cyborg.domain import upstream

HANDLE = '0f8fad5b-d9cb-469f-a165-70867728950e'


def test_the_templates_write_what_clients_have_always_read():
    assert (bind_errors.programming_failed(HANDLE, 'no image')
            == 'Programming the device of attach handle %s failed: '
               'no image' % HANDLE)
    assert (bind_errors.preparing_failed(HANDLE, 'MdevError: busy')
            == 'Preparing attach handle %s failed: MdevError: busy' % HANDLE)
    assert (bind_errors.timed_out(300)
            == 'The bind did not finish within 300 seconds')


@pytest.mark.parametrize('bind_error, reason', [
    # An error class at the front.
    ('ProgramFailed: the region is busy', 'ProgramFailed'),
    ('OSError: [Errno 5] Input/output error', 'OSError'),
    ('oslo_messaging.exceptions.MessagingTimeout: Timed out',
     'MessagingTimeout'),
    # The conductor's templates: the class inside, else their own.
    (bind_errors.programming_failed(HANDLE, 'GlanceUnavailable: down'),
     'GlanceUnavailable'),
    (bind_errors.programming_failed(HANDLE, 'the image is gone'),
     bind_errors.PROGRAM_FAILED),
    (bind_errors.preparing_failed(HANDLE, 'MdevError: no such type'),
     'MdevError'),
    (bind_errors.preparing_failed(HANDLE, 'Timed out waiting'),
     bind_errors.PREPARE_FAILED),
    (bind_errors.timed_out(60), bind_errors.BIND_TIMEOUT),
    (bind_errors.NO_HANDLE_ERROR, bind_errors.NO_CLAIMED_HANDLE),
    (upstream.INTERRUPTED_BIND_ERROR, bind_errors.IMPORT_INTERRUPTED),
    # Nothing that names a class.
    (None, bind_errors.OTHER),
    ('', bind_errors.OTHER),
    ('the device fell off the bus', bind_errors.OTHER),
    ('Region: busy', bind_errors.OTHER),
    ('Exception: too vague to group by', bind_errors.OTHER),
    ('%sError: too long to be a class name' % ('A' * 70), bind_errors.OTHER),
    ('ProgramFailed:no space after the colon', bind_errors.OTHER),
])
def test_reason_class(bind_error, reason):
    assert bind_errors.reason_class(bind_error) == reason


def test_a_fixed_message_is_recognised_whole_only():
    assert bind_errors.reason_class(bind_errors.timed_out(86400)) == (
        bind_errors.BIND_TIMEOUT)
    assert (bind_errors.reason_class(bind_errors.timed_out(86400) + '!')
            == bind_errors.OTHER)
