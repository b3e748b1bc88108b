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

"""Options of the [nova] group: how cyborg reaches Nova, and the notifier.

The first part are the standard keystoneauth1 session, auth and adapter
options, as in the ``[placement]`` group. With keystone, set
``auth_type = password`` and its options (``auth_url``, ``username``,
...); the endpoint comes from the service catalog (``service_type =
compute``). The user needs the role Nova's policy requires for
``os_compute_api:os-server-external-events:create`` (admin or service).

Without keystone, against a Nova running with
``[api] auth_strategy = noauth2``::

    [nova]
    auth_type = admin_token
    endpoint = http://127.0.0.1:8774/v2.1
    token = admin
    endpoint_override = http://127.0.0.1:8774/v2.1

The second part tunes the conductor's notifier, which delivers the
``accelerator-request-bound`` events of the ``nova_events`` outbox.
``timeout`` (the HTTP timeout) should stay well below ``claim_timeout``:
an event whose lease expires while its request is still in flight can be
claimed and delivered again by another conductor.
"""

from oslo_config import cfg

from cyborg.conf import ksa

group = cfg.OptGroup(
    'nova', title='Nova service client and notifier options',
    help='How cyborg authenticates to and finds the Nova (compute) API, '
         'and how it delivers accelerator request events to it.')

DEFAULT_SERVICE_TYPE = 'compute'
# Seconds; keystoneauth's own default is no timeout at all.
DEFAULT_TIMEOUT = 10

notifier_opts = [
    cfg.IntOpt(
        'events_batch_size', default=100, min=1, max=1000, mutable=True,
        help='Maximum number of events the notifier claims and sends to '
             'Nova in one POST /os-server-external-events request.'),
    cfg.FloatOpt(
        'retry_interval', default=1.0, min=0.0,
        help='Seconds to wait before the first retry of an event Nova '
             'could not take (unreachable, 5xx, timeout). The wait doubles '
             'with every further attempt, up to retry_max_interval, and is '
             'shortened by a random jitter of up to 20 percent.'),
    cfg.FloatOpt(
        'retry_max_interval', default=60.0, min=0.0,
        help='Longest wait, in seconds, between two attempts to deliver '
             'the same event.'),
    cfg.FloatOpt(
        'repeat_max_interval', default=10.0, min=0.1,
        help='Longest wait, in seconds, between two sends of the failed '
             'event of a bind that failed on its host. Nova drops such an '
             'event while its compute is not yet waiting for it (or '
             'refuses it while the instance has no host), so the event is '
             'repeated, retry_interval doubled each time up to this, until '
             'Nova unbinds or deletes the ARQ or [conductor] bind_timeout '
             'has passed since the bind started. It bounds how long a '
             'build waits for a failure it could already act on.'),
    cfg.IntOpt(
        'unhosted_retry_timeout', default=300, min=0,
        help='Seconds after it was queued during which an event Nova '
             'refuses because the instance has no host yet (event code '
             '422) is sent again, as a retry capped at '
             'repeat_max_interval. Nova binds accelerator requests before '
             'it places the instance on its compute host, so the event of '
             'a bind that completes at once usually meets this answer '
             'first. Past this time such an event is dropped; 0 drops it '
             'at once. Keep it at least Nova\'s [DEFAULT] '
             'arq_binding_timeout.'),
    cfg.IntOpt(
        'claim_timeout', default=30, min=1,
        help='Seconds a conductor holds the events it claimed. If it dies '
             'before recording the outcome, another conductor delivers '
             'the events once this lease has expired. Keep it well above '
             'the HTTP timeout of this group.'),
    cfg.FloatOpt(
        'record_delay', default=0.2, min=0.0, max=5.0,
        help='Seconds the notifier may wait, after Nova answered, before '
             'recording which events were delivered, so that the outcomes '
             'of the requests sent meanwhile are written in one '
             'transaction. Events go to Nova at once either way. Events '
             'whose outcome a dying conductor had not recorded yet are '
             'sent again after claim_timeout (Nova ignores an event '
             'nobody waits for). 0 records after every request.'),
    cfg.FloatOpt(
        'send_interval', default=0.02, min=0.0, max=1.0, mutable=True,
        help='Least time, in seconds, between two event requests of one '
             'conductor. The events of binds that finish within it wait '
             'for its end and go to Nova together, in one request of up '
             'to events_batch_size events: a busy conductor sends Nova '
             'fewer, larger requests, each of which costs Nova an '
             'instance lookup per cell and a message per compute host. '
             'An event that finds no request sent within this time goes '
             'at once, so it delays events only under load, by at most '
             'this. 0 sends every event at once.'),
    cfg.FloatOpt(
        'poll_interval', default=1.0, min=0.01, mutable=True,
        help='Seconds the notifier sleeps when it has nothing to send. '
             'Events of binds finished by this conductor are sent at '
             'once; this bounds the delay of retries and of events '
             'written by other conductors.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    ksa.register(conf, group, DEFAULT_SERVICE_TYPE, timeout=DEFAULT_TIMEOUT)
    conf.register_opts(notifier_opts, group=group.name)


def list_opts():
    return {group: ksa.list_options(DEFAULT_SERVICE_TYPE,
                                    timeout=DEFAULT_TIMEOUT)
            + notifier_opts}
