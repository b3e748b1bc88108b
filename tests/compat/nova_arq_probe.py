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

"""Play Nova's ARQ flow with Nova's own Cyborg client module
(``nova.accelerator.cyborg`` of the installed ``nova`` package).

Run in its own interpreter (see nova_probe.py for why: nova's and cyborg's
oslo.config options clash in one process). It serves requests, one JSON
object per line on stdin, one JSON answer per line on stdout::

    python nova_arq_probe.py '<json config>'
    > {"op": "request_groups", "dp_name": "dp1"}
    < {"result": [...]}

Config: ``{"endpoint_override": <cyborg URL>, "service_token": true}``.

Nova is configured as in production with service tokens: ``[cyborg]
endpoint_override`` (no catalog) and ``[service_user]
send_service_user_token = true`` with an ``admin_token`` service user, so
that Nova's code builds its real ``ServiceTokenAuthWrapper`` and every
request carries the user's ``X-Auth-Token`` plus an ``X-Service-Token``.
Nothing of Nova is changed: Cyborg's noauth mode counts an
``X-Service-Token`` as a service token, as keystonemiddleware would a
valid one of a user with the ``service`` role.

Ops (each answers ``{"result": ...}`` or ``{"error": {type, message}}``):

* ``request_groups`` (dp_name): get_device_profile_request_groups;
* ``create_and_match`` (dp_name, rg_rp_map):
  _CyborgClient.create_arqs_and_match_resource_providers;
* ``bind`` (bindings): _CyborgClient.bind_arqs;
* ``get_for_instance`` (instance_uuid, only_resolved):
  get_arqs_for_instance;
* ``get_by_uuid`` (arq_uuid): get_arq_by_uuid;
* ``pci_profile`` (arq): get_arq_pci_device_profile (a pure helper);
* ``delete_for_instance`` (instance_uuid): delete_arqs_for_instance;
* ``delete_by_uuid`` (arq_uuids): delete_arqs_by_uuid;
* ``headers``: the headers Nova's adapter sends (for the report).
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings

TIMEOUT = 120


class Probe:
    """This script in a child interpreter, for tests::

        with Probe(endpoint) as nova:
            arqs = nova('create_and_match', dp_name=..., rg_rp_map=...)

    A call returns the op's result or raises :class:`NovaError`.
    """

    def __init__(self, endpoint, service_token=True, **config):
        config.update(endpoint_override=endpoint,
                      service_token=service_token)
        self._config = config
        self._proc = None
        self._stderr = tempfile.TemporaryFile(mode='w+')

    def __enter__(self):
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__),
             json.dumps(self._config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, bufsize=1)
        return self

    def __exit__(self, *exc_info):
        self._proc.stdin.close()
        try:
            self._proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()

    def stderr(self):
        self._stderr.seek(0)
        return self._stderr.read()

    def __call__(self, op, **args):
        self._proc.stdin.write(json.dumps(dict(args, op=op)) + '\n')
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError('the Nova probe died:\n%s' % self.stderr())
        answer = json.loads(line)
        if 'error' in answer:
            raise NovaError(answer['error']['type'],
                            answer['error']['message'])
        return answer['result']


class NovaError(Exception):
    def __init__(self, type_, message):
        super().__init__('%s: %s' % (type_, message))
        self.type = type_
        self.message = message


def _serialize_group(rg):
    return {
        'requester_id': rg.requester_id,
        'resources': dict(rg.resources),
        'required_traits': sorted(rg.required_traits),
        'forbidden_traits': sorted(rg.forbidden_traits),
    }


def _error(exc):
    return {'error': {
        'type': '%s.%s' % (type(exc).__module__, type(exc).__qualname__),
        'message': str(exc),
    }}


def _configure(config):
    """Nova's CONF from a config file, as nova-compute would read it."""
    import nova.conf
    conf = nova.conf.CONF
    lines = ['[cyborg]', 'endpoint_override = %s'
             % config['endpoint_override'], '']
    if config.get('service_token', True):
        lines += ['[service_user]', 'send_service_user_token = true',
                  'auth_type = admin_token', 'token = nova-service-token',
                  'endpoint = %s' % config['endpoint_override'], '']
    fd, path = tempfile.mkstemp(prefix='nova-arq-probe-', suffix='.conf')
    with os.fdopen(fd, 'w') as f:
        f.write('\n'.join(lines))
    try:
        conf([], project='nova', default_config_files=[path])
    finally:
        os.unlink(path)
    return conf


def main(config):
    os.environ['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = '1'
    warnings.simplefilter('ignore')

    from nova import context as nova_context
    from nova import objects
    from nova.accelerator import cyborg

    objects.register_all()
    _configure(config)
    # A user's request context as nova-compute has it (the user's token).
    ctx = nova_context.RequestContext(
        user_id='nova-flow-user', project_id=config.get(
            'project_id', 'nova-flow-project'),
        auth_token='nova-flow-user-token', roles=['member', 'reader'],
        is_admin=False)

    def run(request):
        client = cyborg.get_client(ctx)
        op = request['op']
        if op == 'request_groups':
            rgs = cyborg.get_device_profile_request_groups(
                ctx, request['dp_name'], request.get('owner'))
            return [_serialize_group(rg) for rg in rgs]
        if op == 'create_and_match':
            return client.create_arqs_and_match_resource_providers(
                request['dp_name'], request['rg_rp_map'])
        if op == 'bind':
            return client.bind_arqs(request['bindings'])
        if op == 'get_for_instance':
            return client.get_arqs_for_instance(
                request['instance_uuid'],
                only_resolved=request.get('only_resolved', False))
        if op == 'get_by_uuid':
            return client.get_arq_by_uuid(request['arq_uuid'])
        if op == 'pci_profile':
            return cyborg.get_arq_pci_device_profile(request['arq'])
        if op == 'delete_for_instance':
            return client.delete_arqs_for_instance(request['instance_uuid'])
        if op == 'delete_by_uuid':
            return client.delete_arqs_by_uuid(request['arq_uuids'])
        if op == 'headers':
            adapter = client._client
            return {key: ('<set>' if value else value) for key, value in
                    (adapter.session.get_auth_headers() or {}).items()}
        raise ValueError('unknown op %s' % op)

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = {'result': run(json.loads(line))}
        except Exception as exc:
            answer = _error(exc)
        sys.stdout.write(json.dumps(answer) + '\n')
        sys.stdout.flush()


if __name__ == '__main__':
    main(json.loads(sys.argv[1]))
