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

"""Accelerator request (ARQ) states and the one table of transitions.

::

    Initial --bind--> BindStarted --job ok--> Bound
       ^                  |      \\               |
       |          job failed      timed out     unbind
       |                  v        v             v
       |            BindFailing -> BindFailed   Unbound --bind--> BindStarted
       |          (Nova not told    (resolved)
       |           yet; shown as
       |           BindStarted)
       +---------------- unbind (from any bind state) ----+
    any state --delete--> Deleting --> (row removed)

A bind PATCH decides synchronously everything the database can decide
(it answers 4xx and changes nothing otherwise), so an ARQ only fails
asynchronously when the work on its host fails (an mdev, a VF, FPGA
programming). Such an ARQ goes to **BindFailing**, not BindFailed:
Nova counts Bound, BindFailed and Deleting as resolved and builds the
server without waiting once it reads one of them, and it drops or
refuses (422, no host yet) a ``failed`` event that arrives before its
compute waits. A BindFailing ARQ reads as ``BindStarted`` in the API
(:func:`shown`) while its ``failed`` event is repeated, until Nova
unbinds or deletes it or ``[conductor] bind_timeout`` after the bind
started, when it becomes BindFailed. There is no ``UnbindFailed``
(upstream lists it but never stores it): an unbind always succeeds for
Nova, and a prepared handle its agent cannot release at once is
kept in use and released later by the conductor's sweeper.

Every state write is a compare-and-swap on the state column against the
allowed sources listed here, so concurrent API calls, bind jobs and
sweepers can never move an ARQ along a path this table does not allow.
"""

from cyborg.domain import events

INITIAL = 'Initial'
BIND_STARTED = 'BindStarted'
BOUND = 'Bound'
BIND_FAILING = 'BindFailing'
BIND_FAILED = 'BindFailed'
UNBOUND = 'Unbound'
DELETING = 'Deleting'

ALL = (INITIAL, BIND_STARTED, BOUND, BIND_FAILING, BIND_FAILED, UNBOUND,
       DELETING)

# target state -> states it may be entered from
TRANSITIONS: dict[str, frozenset[str]] = {
    BIND_STARTED: frozenset([INITIAL, UNBOUND]),
    BOUND: frozenset([BIND_STARTED]),
    BIND_FAILING: frozenset([BIND_STARTED]),
    BIND_FAILED: frozenset([BIND_STARTED, BIND_FAILING]),
    UNBOUND: frozenset([INITIAL, BIND_STARTED, BOUND, BIND_FAILING,
                        BIND_FAILED, UNBOUND]),
    DELETING: frozenset([INITIAL, BIND_STARTED, BOUND, BIND_FAILING,
                         BIND_FAILED, UNBOUND]),
}

# States whose bind has an outcome Nova can act on (bind_state=resolved).
RESOLVED = frozenset([BOUND, BIND_FAILED, DELETING])

# States of an ARQ bound to nothing: an unbind leaves it in one (Initial:
# never bound), and unbinding it again changes nothing.
UNBOUND_STATES = frozenset([INITIAL, UNBOUND])

# States whose bind failed; their ``bind_error`` says why.
FAILED = frozenset([BIND_FAILING, BIND_FAILED])

# Nova external event status per state that sends one.
EVENT_STATUS = {BOUND: events.COMPLETED, BIND_FAILING: events.FAILED,
                BIND_FAILED: events.FAILED, DELETING: events.FAILED}

# States clients see under another name (see the module docstring).
_SHOWN_AS = {BIND_FAILING: BIND_STARTED}


def sources(target: str) -> frozenset[str]:
    """The states an ARQ may be in to move to ``target`` (none for
    Initial, which nothing enters)."""
    return TRANSITIONS.get(target, frozenset())


def allowed(source: str, target: str) -> bool:
    return source in sources(target)


def shown(state: str) -> str:
    """The state clients (Nova above all) see for ``state``."""
    return _SHOWN_AS.get(state, state)


def resolved(state: str) -> bool:
    """Whether Nova may act on the bind outcome of an ARQ in ``state``."""
    return state in RESOLVED
