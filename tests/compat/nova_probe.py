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

"""Drive Nova's own Cyborg client module (nova.accelerator.cyborg).

Run in its own interpreter by test_nova.py, because Nova and Cyborg both
register options on the process-global ``oslo_config.cfg.CONF``: in one
process with the cyborg package imported (e.g. ``pytest tests``), importing
``nova.conf`` fails with ``DuplicateOptError: duplicate option: workers``
(and the other way round). A separate interpreter also keeps Nova's config
overrides and eventlet handling away from every other test.

Usage::

    python nova_probe.py '<json request>'

Request: ``{"endpoint_override": URL, "ops": [[op, dp_name, owner], ...],
"disable_patching_env": true}``; ops are ``groups`` (_CyborgClient.
get_device_profile_groups) and ``request_groups``
(get_device_profile_request_groups). Prints one JSON object on stdout.
"""

import json
import os
import sys
import warnings


def _serialize_group(rg):
    return {
        'requester_id': rg.requester_id,
        'resources': dict(rg.resources),
        'required_traits': sorted(rg.required_traits),
        'forbidden_traits': sorted(rg.forbidden_traits),
        'use_same_provider': rg.use_same_provider,
        'provider_uuids': list(rg.provider_uuids),
    }


def _error(exc):
    return {'error': {
        'type': '%s.%s' % (type(exc).__module__, type(exc).__qualname__),
        'message': str(exc),
    }}


def main(request):
    if request.get('disable_patching_env', True):
        os.environ['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = '1'
    else:
        os.environ.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
    warnings.simplefilter('ignore')

    from nova import context as nova_context
    from nova import monkey_patch
    from nova import objects
    from nova.accelerator import cyborg
    import nova.conf

    result = {'eventlet_imported': 'eventlet' in sys.modules,
              'nova_monkey_patched': monkey_patch.is_patched()}
    if 'eventlet' in sys.modules:
        from eventlet import patcher
        result['eventlet_patched'] = sorted(
            m for m in ('os', 'select', 'socket', 'thread', 'time')
            if patcher.is_monkey_patched(m))

    objects.register_all()
    conf = nova.conf.CONF
    overrides = [('endpoint_override', request['endpoint_override'],
                  'cyborg'),
                 ('send_service_user_token', False, 'service_user')]
    for name, value, group in overrides:
        conf.set_override(name, value, group=group)
    try:
        # A user's request context as nova-api/conductor would have it
        # after keystonemiddleware: the user's token, no service catalog
        # needed because [cyborg]endpoint_override is set.
        ctx = nova_context.RequestContext(
            user_id='compat-user', project_id='compat-project',
            auth_token='compat-user-token', roles=['member', 'reader'],
            is_admin=False)
        answers = []
        for op, dp_name, owner in request['ops']:
            try:
                if op == 'groups':
                    client = cyborg._CyborgClient(ctx)
                    answers.append(
                        {'groups': client.get_device_profile_groups(dp_name)})
                elif op == 'request_groups':
                    rgs = cyborg.get_device_profile_request_groups(
                        ctx, dp_name, owner)
                    answers.append({
                        'types': sorted({'%s.%s' % (type(rg).__module__,
                                                    type(rg).__qualname__)
                                         for rg in rgs}),
                        'request_groups': [_serialize_group(rg)
                                           for rg in rgs]})
                else:
                    raise ValueError('unknown op %s' % op)
            except Exception as exc:
                answers.append(_error(exc))
        result['answers'] = answers
    finally:
        for name, _value, group in overrides:
            conf.clear_override(name, group=group)
    return result


if __name__ == '__main__':
    print(json.dumps(main(json.loads(sys.argv[1]))))
