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

"""What an ARQ's ``bind_error`` says, and the class of error it names.

A failed bind keeps a one-line reason in ``bind_error`` (clients read it
from microversion 2.5). The conductor writes it from the templates here;
:func:`reason_class` maps any ``bind_error`` to a short, bounded name
for grouping failures (the ``reason`` label of the fleet metrics):

* an error class at the front (``ProgramFailed: the region is busy``,
  the form of an error an agent raised) is that class;
* a reason written from a template below is the class of the error
  inside it, if it names one (``Preparing attach handle X failed:
  MdevError: ...`` is ``MdevError``), else the template's own class;
* anything else is :data:`OTHER`.
"""

import re

from cyborg.domain import upstream

#: Programming the deployable's region failed (the job's first step).
PROGRAM_FAILED = 'ProgramFailed'
#: The agent could not prepare the attach handle (an mdev, a VF...).
PREPARE_FAILED = 'PrepareFailed'
#: The bind job did not finish within ``[conductor] bind_timeout``.
BIND_TIMEOUT = 'BindTimeout'
#: The bind job found no attach handle claimed for its ARQ.
NO_CLAIMED_HANDLE = 'NoClaimedHandle'
#: The bind was under way when an upstream database was imported.
IMPORT_INTERRUPTED = 'ImportInterrupted'
#: A reason that names no error class.
OTHER = 'other'

_PROGRAMMING = 'Programming the device of attach handle %s failed: %s'
_PREPARING = 'Preparing attach handle %s failed: %s'
_TIMED_OUT = 'The bind did not finish within %d seconds'
#: ``bind_error`` of a bind job that found no claimed handle.
NO_HANDLE_ERROR = 'The bind job found no claimed attach handle'


def programming_failed(handle_uuid: str, reason: str) -> str:
    return _PROGRAMMING % (handle_uuid, reason)


def preparing_failed(handle_uuid: str, reason: str) -> str:
    return _PREPARING % (handle_uuid, reason)


def timed_out(seconds: int) -> str:
    return _TIMED_OUT % seconds


# A Python class name (dotted names: its last part) ending with ': ',
# CamelCase (two capitals at least: a sentence's first word is not one)
# or ending in Error or Exception.
_CLASS_AT_FRONT = re.compile(
    r'(?:[A-Za-z_][A-Za-z0-9_]*\.)*'
    r'([A-Z][a-z0-9_]*[A-Z][A-Za-z0-9_]*|[A-Z][A-Za-z0-9_]*(?:Error|Exception))'
    r': ')
# The longest class name taken: a longer "name" is not one.
_MAX_CLASS = 64


def _template(text: str) -> re.Pattern:
    """A pattern matching what ``text`` (one %s handle, one %s reason)
    writes, the reason as group ``reason``."""
    before, after = text.split('%s', 1)
    return re.compile(re.escape(before) + r'\S+' + re.escape(after[:-2])
                      + r'(?P<reason>.*)', re.DOTALL)


_TEMPLATES = ((_template(_PROGRAMMING), PROGRAM_FAILED),
              (_template(_PREPARING), PREPARE_FAILED))
_FIXED = (
    (re.compile(re.escape(_TIMED_OUT).replace('%d', r'\d+') + '$'),
     BIND_TIMEOUT),
    (re.compile(re.escape(NO_HANDLE_ERROR) + '$'), NO_CLAIMED_HANDLE),
    (re.compile(re.escape(upstream.INTERRUPTED_BIND_ERROR) + '$'),
     IMPORT_INTERRUPTED),
)


def _class_at_front(text: str) -> str | None:
    match = _CLASS_AT_FRONT.match(text)
    if match is None or len(match.group(1)) > _MAX_CLASS:
        return None
    return match.group(1)


def reason_class(bind_error: str | None) -> str:
    """The class of error ``bind_error`` names (see the module
    docstring); :data:`OTHER` when it names none."""
    if not bind_error:
        return OTHER
    for pattern, own_class in _TEMPLATES:
        match = pattern.match(bind_error)
        if match:
            return _class_at_front(match.group('reason')) or own_class
    for pattern, own_class in _FIXED:
        if pattern.match(bind_error):
            return own_class
    return _class_at_front(bind_error) or OTHER
