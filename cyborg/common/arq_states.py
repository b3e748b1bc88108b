"""Accelerator request (ARQ) states and the one table of transitions.

::

    Initial --bind--> BindStarted --job ok--> Bound
       ^                  |                     |
       |               job failed            unbind
       |                  v                     v
       +----------- BindFailed --unbind--> Unbound --bind--> BindStarted
                                        (UnbindFailed if the device
                                         cannot be released)
    any state --delete--> Deleting --> (row removed)

Every state write is a compare-and-swap on the state column against the
allowed sources listed here, so concurrent API calls, bind jobs and
sweepers can never move an ARQ along a path this table does not allow.
"""

INITIAL = 'Initial'
BIND_STARTED = 'BindStarted'
BOUND = 'Bound'
BIND_FAILED = 'BindFailed'
UNBOUND = 'Unbound'
UNBIND_FAILED = 'UnbindFailed'
DELETING = 'Deleting'

ALL = (INITIAL, BIND_STARTED, BOUND, BIND_FAILED, UNBOUND, UNBIND_FAILED,
       DELETING)

# target state -> states it may be entered from
TRANSITIONS: dict[str, frozenset[str]] = {
    BIND_STARTED: frozenset([INITIAL, UNBOUND]),
    BOUND: frozenset([BIND_STARTED]),
    BIND_FAILED: frozenset([BIND_STARTED]),
    UNBOUND: frozenset([INITIAL, BIND_STARTED, BOUND, BIND_FAILED,
                        UNBOUND, UNBIND_FAILED]),
    UNBIND_FAILED: frozenset([BOUND, BIND_FAILED, BIND_STARTED]),
    DELETING: frozenset([INITIAL, BIND_STARTED, BOUND, BIND_FAILED,
                         UNBOUND, UNBIND_FAILED]),
}

# States whose bind has an outcome Nova can act on (bind_state=resolved).
RESOLVED = frozenset([BOUND, BIND_FAILED, DELETING])

# Nova external event status per resolved state.
EVENT_STATUS = {BOUND: 'completed', BIND_FAILED: 'failed',
                DELETING: 'failed'}


def sources(target: str) -> frozenset[str]:
    """The states an ARQ may be in to move to ``target``."""
    return TRANSITIONS[target]


def allowed(source: str, target: str) -> bool:
    return source in TRANSITIONS.get(target, ())
