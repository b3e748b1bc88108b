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

"""MIG-backed vGPUs in ``homogeneous`` partition mode, end to end.

The deployment is nova_flow.py's (two conductors, the API, real
Placement, PostgreSQL, RabbitMQ, a FakeNova) with one real
``cyborg-agent`` running ``nvidia_gpu_driver`` on a fixture host: two
H200s in MIG mode whose twelve VFs each carry vGPU 17+ type files
(``H200X-1-18C`` for ``1g.18gb``, ``H200X-2-35C`` for ``2g.35gb``), and
the fake ``nvidia-smi`` of :mod:`cyborg.allinone.fake_mig`, which keeps
the GPU instances in a state file and applies NVIDIA's placement rules.

Nova's own client module (tests/compat/nova_arq_probe.py) creates and
binds the ARQs. The tests show: a bind creates the partition (GPU
instance, then the VF's type) and a delete destroys it; each GPU serves
one profile at a time and an empty one switches to follow demand, one
holding partitions never; a "reboot" of the host (every GPU instance
and VF type wiped) is repaired by the agent before its first report;
and a SIGKILL of the agent at each ``nvidia-smi`` step of a creation or
a destruction leaves no orphan (GPU instance, VF type or journal entry
no bound ARQ holds) once it is restarted.

The kills come from a wrapper in front of the fake ``nvidia-smi``: when
the file ``<tools>/.kill`` names a subcommand, the first call of it
SIGKILLs the agent (by the pid the file gives) before or after the
subcommand ran, as a kill at that instant would. The steps between two
``nvidia-smi`` calls (journal and sysfs writes) are not killed at.
"""

from __future__ import annotations

import os
import shlex
import uuid

import pytest
import requests

from cyborg.allinone import demo_host
from cyborg.allinone import embedded_placement
from cyborg.allinone import fake_mig
from cyborg.allinone import fake_tools
from cyborg.allinone import host_tree
from cyborg.common import constants
from tests.compat.nova_arq_probe import Probe
from tests.fixtures.hosts import hosts
from tests.functional import nova_flow
from tests.functional import servers

HOST = 'mig-compute-1'
PFS = (hosts.VGPU17_PF, '0000:c1:00.0')
TYPES = hosts.VGPU17_TYPES + [(1415, 'NVIDIA H200X-2-35C')]
TYPE_IDS = {'1g.18gb': 1414, '2g.35gb': 1415}
RC_1G = 'CUSTOM_MIG_1G_18GB'
RC_2G = 'CUSTOM_MIG_2G_35GB'
TIMEOUT = 30
INITIAL = {PFS[0]: RC_1G, PFS[1]: RC_2G}
PLACEMENT = {'X-Auth-Token': 'admin',
             'OpenStack-API-Version': nova_flow.PLACEMENT_VERSION}
PROJECT = 'c0ffee00c0ffee00c0ffee00c0ffee00'

# A shell script: most calls go straight on to the fake (one Python
# start, not two).
_WRAPPER = '''#!/bin/sh
if [ "$1" = mig ] && [ -f %(plan)s ]; then
    read -r command when pid < %(plan)s
    for arg in "$@"; do
        if [ "$arg" = "$command" ] && /bin/mv %(plan)s %(plan)s.fired \\
                2>/dev/null; then
            if [ "$when" = before ]; then
                kill -9 "$pid"
                exit 1
            fi
            %(real)s "$@"
            rc=$?
            kill -9 "$pid"
            exit $rc
        fi
    done
fi
exec %(real)s "$@"
'''


def vfs(pf: str) -> list[str]:
    """The twelve VFs of ``pf`` (functions 4 to 15, as on the fixture
    vGPU 17+ host)."""
    domain, bus, _rest = pf.split(':')
    return ['%s:%s:%02x.%x' % ((domain, bus) + divmod(4 + i, 8))
            for i in range(12)]


def mig_host(root: str) -> host_tree.HostTree:
    """Two H200s in MIG mode (GPU 0 at 41:00.0, GPU 1 at c1:00.0) on
    the nvidia driver, twelve VFs each with both MIG-backed types."""
    tree = hosts.nvidia_vgpu17_host(root)
    second = PFS[1]
    tree.add_pci(second, hosts.NVIDIA, hosts.H200, hosts.CLASS_3D,
                 subsystem=(hosts.NVIDIA, 0x18bf), numa_node=1,
                 driver='nvidia')
    tree.add_sriov(second, vfs(second), hosts.H200, total_vfs=16, offset=4,
                   vf_drivers=['nvidia'] * 12)
    tree.add_nvidia_proc(second, 'NVIDIA H200',
                         'GPU-5d5ba0d6-0c7e-4a8e-9b1f-2a3c4d5e6f71', 1)
    for pf in PFS:
        for index, vf in enumerate(vfs(pf)):
            tree.add_vendor_vgpu(vf, TYPES, header=index % 2 == 0)
    gpus = [fake_tools.Gpu(i, pf, 'GPU-5d5ba0d6-0c7e-4a8e-9b1f-2a3c4d5e6f7%d'
                           % i, 'NVIDIA H200', memory_total='143771')
            for i, pf in enumerate(PFS)]
    fake_mig.write_nvidia_smi_mig(tree.tools_dir, gpus, state_file(tree),
                                  {0: 'NVIDIA H200', 1: 'NVIDIA H200'})
    return _killable(tree)


def _killable(tree: host_tree.HostTree) -> host_tree.HostTree:
    """The tree's fake ``nvidia-smi`` behind the kill wrapper."""
    fake_tools.write_dmesg(tree.tools_dir, [])
    real = os.path.join(tree.tools_dir, '.nvidia-smi-real')
    os.rename(os.path.join(tree.tools_dir, 'nvidia-smi'), real)
    wrapper = os.path.join(tree.tools_dir, 'nvidia-smi')
    with open(wrapper, 'w') as f:
        f.write(_WRAPPER % {'real': shlex.quote(real),
                            'plan': shlex.quote(kill_plan(tree))})
    os.chmod(wrapper, 0o755)
    return tree


def state_file(tree: host_tree.HostTree) -> str:
    return tree.root + '.mig.state'


def kill_plan(tree: host_tree.HostTree) -> str:
    return os.path.join(tree.tools_dir, '.kill')


class MigFlow:
    """The deployment, the host tree and the agent (restartable)."""

    def __init__(self, deployment: nova_flow.NovaFlowDeployment,
                 tree: host_tree.HostTree, agent: servers.CyborgProcess,
                 journal: str) -> None:
        self.deployment = deployment
        self.tree = tree
        self.agent = agent
        self.journal = journal
        #: The instances of the current test that hold allocations.
        self.instances: list[str] = []

    # The agent ------------------------------------------------------------

    def restart_agent(self) -> None:
        """Start the agent again (after a kill or a stop) and wait for
        its first discovery (``-lgip`` is asked by discovery only)."""
        self.agent.stop()
        mark = len(fake_tools.calls(self.tree.tools_dir))
        self.agent.start()
        nova_flow.wait_until(
            lambda: ['nvidia-smi', 'mig', '-lgip'] in [
                c[:3] for c in fake_tools.calls(self.tree.tools_dir)[mark:]],
            TIMEOUT, 'a discovery of the restarted agent')

    def kill_at(self, command: str, when: str) -> None:
        """SIGKILL the agent at the next ``nvidia-smi mig <command>``."""
        assert self.agent.process is not None
        with open(kill_plan(self.tree) + '.tmp', 'w') as f:
            f.write('%s %s %d\n' % (command, when, self.agent.process.pid))
        os.replace(kill_plan(self.tree) + '.tmp', kill_plan(self.tree))

    def wait_killed(self) -> None:
        nova_flow.wait_until(lambda: not self.agent.running(), TIMEOUT,
                             'the agent killed')
        assert os.path.exists(kill_plan(self.tree) + '.fired')
        os.unlink(kill_plan(self.tree) + '.fired')

    # What the host holds --------------------------------------------------

    def gpu_instances(self) -> list[tuple[int, str]]:
        """(GPU index, profile) of every GPU instance, sorted."""
        return sorted((gpu.index, gpu.profile_of(gi).name)
                      for gpu in fake_mig.read_state(state_file(self.tree))
                      for gi in gpu.gis)

    def vf_types(self) -> dict[str, int]:
        """The VFs running a vGPU type, with the type."""
        found = {}
        for pf in PFS:
            for vf in vfs(pf):
                value = int(self.tree.read(self.tree.dev(
                    vf, 'nvidia', 'current_vgpu_type')))
                if value:
                    found[vf] = value
        return found

    def journal_keys(self) -> set[str]:
        try:
            names = os.listdir(self.journal)
        except FileNotFoundError:
            return set()
        return {n[:-len('.json')] for n in names if n.endswith('.json')}

    def held(self) -> tuple[list[tuple[int, str]], dict[str, int],
                            set[str]]:
        """What the bound ARQs hold: GPU instances, VF types and
        partition keys (the attach handles' uuids)."""
        instances, types, keys = [], {}, set()
        for arq in self.deployment.arqs():
            if arq['state'] != 'Bound' or arq['hostname'] != HOST:
                continue
            info = arq['attach_handle_info']
            vf = '%(domain)s:%(bus)s:%(device)s.%(function)s' % info
            profile = next(p for p, t in TYPE_IDS.items()
                           if str(t) == info['vgpu_type'])
            instances.append((PFS.index(vf[:-4] + '00.0'), profile))
            types[vf] = int(info['vgpu_type'])
            keys.add(arq['attach_handle_uuid'])
        return sorted(instances), types, keys

    def clear(self) -> None:
        """After a test: the agent running, no ARQ, no allocation of the
        test's instances, every handle released."""
        if not self.agent.running():
            self.restart_agent()
        self.deployment.delete_all_arqs()
        while self.instances:
            requests.delete(self.deployment.placement.url + '/allocations/'
                            + self.instances.pop(), headers=PLACEMENT,
                            timeout=TIMEOUT)
        self.wait_released()

    def wait_released(self) -> None:
        """Until every handle is free (the agent released them all),
        then nothing may be left on the host."""
        nova_flow.wait_until(
            lambda: self.deployment.handle_stats()['in_use'] == 0, TIMEOUT,
            'every handle released')
        assert self.gpu_instances() == []
        self.assert_no_orphan()

    def assert_no_orphan(self) -> None:
        """The host holds exactly what the bound ARQs hold."""
        instances, types, keys = self.held()
        assert self.gpu_instances() == instances
        assert self.vf_types() == types
        assert self.journal_keys() == keys

    # Placement ------------------------------------------------------------

    def providers(self, resource_class: str) -> list[str]:
        """The providers Placement offers one ``resource_class`` on."""
        return sorted({rp for c in self.deployment.allocation_candidates(
            [{'resources:' + resource_class: '1'}])
            for rp in c['device_profile_0']})

    def provider(self, pf: str) -> str:
        """The provider of the child (the partitions) of GPU ``pf``."""
        prefix = pf.replace(':', '_').replace('.', '_') + '_'
        (rp,) = [rp for name, rp in self.deployment.db_rows(
            'SELECT name, rp_uuid FROM deployables WHERE rp_uuid IS NOT '
            'NULL') if name.startswith(prefix)]
        return rp

    def serving(self) -> dict[str, str | None]:
        """The resource class each GPU is offered as in Placement, by PF
        (None: nothing offered)."""
        names = dict(self.deployment.db_rows(
            'SELECT rp_uuid, name FROM deployables WHERE rp_uuid IS NOT '
            'NULL'))
        found: dict[str, str | None] = dict.fromkeys(PFS)
        for resource_class in (RC_1G, RC_2G):
            # A provider of a deployable gone (a GPU that switched) may
            # stay in Placement a little longer: not what a GPU serves.
            for rp in self.providers(resource_class):
                for pf in PFS:
                    if names.get(rp, '').startswith(
                            pf.replace(':', '_').replace('.', '_')):
                        found[pf] = resource_class
        return found


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement_pg, work_dir):
    # Placement on PostgreSQL: the session's, on SQLite, answers a claim
    # made while the conductor writes with 500 "database is locked".
    placement = placement_pg
    with nova_flow.deployment('mig', postgres, rabbitmq, placement,
                              work_dir, []) as deployment:
        directory = os.path.join(work_dir, 'mig-host')
        tree = mig_host(os.path.join(directory, 'host'))
        agent = _agent(deployment, placement, HOST, directory, tree, {
            'mig_profiles': '1g.18gb,2g.35gb',
            # 1g.18gb is wanted once one is taken.
            'mig_min_free': 7})
        agent.start()
        result = MigFlow(deployment, tree, agent,
                         os.path.join(directory, 'nvidia_gpu', 'mig'))
        # Placement knows the resource classes once the agent reported.
        servers.wait_for(lambda: result.providers(RC_1G)
                         and result.providers(RC_2G), 60,
                         'both profiles offered', agent.process, agent.log)
        yield result


def _agent(deployment: nova_flow.NovaFlowDeployment, placement, host: str,
           directory: str, tree: host_tree.HostTree,
           nvidia_gpu: dict) -> servers.CyborgProcess:
    """A ``cyborg-agent`` of ``host`` (a compute node in Placement)
    running nvidia_gpu_driver in homogeneous mode on ``tree``, with
    ``nvidia_gpu`` options; not started."""
    embedded_placement.ensure_compute_node(placement.client(), host)
    config = {
        'DEFAULT': {'host': host, 'state_path': directory,
                    'transport_url': deployment.conductor_configs[0][
                        'DEFAULT']['transport_url'],
                    'heartbeat_interval': 2, 'periodic_interval': 2},
        'database': {'connection': deployment.db_url},
        'placement': nova_flow.placement_config(placement.url),
        # A discovery asks the fake nvidia-smi 13 times (about 0.7 s of
        # CPU): every 2 s, not every second, on the suite's two cores.
        'agent': {'resource_provider_name': host,
                  'discovery_interval': 2, 'host_root': tree.root,
                  'enabled_drivers': 'nvidia_gpu_driver'},
        'nvidia_gpu': dict(nvidia_gpu, partition_mode='homogeneous'),
    }
    agent = servers.CyborgProcess('cyborg-agent', config, directory,
                                  name='%s-agent' % host,
                                  env={'PATH': tree.tools_dir})
    deployment.agents.append(agent)
    return agent


@pytest.fixture(scope='module')
def nova(flow):
    with Probe(flow.deployment.url) as probe:
        yield probe


@pytest.fixture
def clean(flow):
    """No ARQ and nothing partitioned before and after; the agent runs."""
    yield flow
    flow.clear()
    # Empty again, each GPU serves the profile the host has none of: in
    # what a report collected now says (a report collected while one
    # GPU was already empty and the other not yet may still be on its
    # way, and would switch the empty GPU).
    _settled(flow)
    # Or in a later one: a switch the conductor refused (its reservation
    # of the GPU's providers answered 409 when a Placement write moved
    # their generation in between) is asked again at the next report.
    nova_flow.wait_until(lambda: flow.serving() == INITIAL, TIMEOUT,
                         'each empty GPU serving its initial profile')


def _claim(flow, resource_class: str, count: int, instance: str,
           rp: str | None = None) -> dict[str, list[str]]:
    """What Nova's scheduler does: an allocation candidate of ``count``
    ``resource_class`` (on ``rp`` if given) claimed for ``instance``;
    its mappings (Nova's rg_rp_map)."""
    response = requests.get(
        flow.deployment.placement.url + '/allocation_candidates',
        params={'resources_dp0': '%s:%d' % (resource_class, count),
                'group_policy': 'none'},
        headers=PLACEMENT, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    requests_ = [r for r in response.json()['allocation_requests']
                 if rp is None or r['mappings']['_dp0'] == [rp]]
    assert requests_, 'no allocation candidate for %s' % resource_class
    chosen = requests_[0]
    flow.instances.append(instance)
    response = requests.put(
        flow.deployment.placement.url + '/allocations/' + instance,
        json={'allocations': chosen['allocations'],
              'project_id': PROJECT, 'user_id': PROJECT,
              'consumer_generation': None},
        headers=PLACEMENT, timeout=TIMEOUT)
    assert response.status_code == 204, response.text
    return {'device_profile_0': chosen['mappings']['_dp0']}


def _delete(flow, nova, instance: str) -> None:
    """Nova deletes the instance: its ARQs, then its allocations."""
    assert nova('delete_for_instance', instance_uuid=instance) is None
    response = requests.delete(
        flow.deployment.placement.url + '/allocations/' + instance,
        headers=PLACEMENT, timeout=TIMEOUT)
    assert response.status_code in (204, 404), response.text


def _bind(flow, nova, resource_class, count=1, rp=None, host=HOST):
    """Nova up to the bind: ``count`` ``resource_class`` claimed in
    Placement for a new instance (on ``rp`` if given), the ARQs of a
    profile of them matched to the claim and bound; the instance and
    the ARQ uuids."""
    instance = str(uuid.uuid4())
    rg_rp_map = _claim(flow, resource_class, count, instance, rp)
    return instance, _bind_claimed(flow, nova, resource_class, count,
                                   instance, rg_rp_map, host)


def _bind_claimed(flow, nova, resource_class, count, instance, rg_rp_map,
                  host=HOST):
    """Nova's bind of a claim :func:`_claim` made; the ARQ uuids."""
    profile = flow.deployment.create_profile(
        [{'resources:' + resource_class: str(count)}])
    arqs = nova('create_and_match', dp_name=profile, rg_rp_map=rg_rp_map)
    assert nova('bind', bindings={arq['uuid']: {
        'hostname': host, 'device_rp_uuid': arq['device_rp_uuid'],
        'instance_uuid': instance} for arq in arqs}) is None
    return [arq['uuid'] for arq in arqs]


def _spawn(flow, nova, resource_class, count=1, rp=None):
    """:func:`_bind`, then the ARQs resolved; each must be Bound."""
    instance, uuids = _bind(flow, nova, resource_class, count, rp)
    arqs = flow.deployment.wait_resolved(uuids, TIMEOUT)
    assert {a['state'] for a in arqs.values()} == {'Bound'}, servers.tail(
        flow.agent.log, 40)
    return instance, arqs


def _settled(flow) -> None:
    """Wait until Placement shows what the host holds now: a report
    the agent collected after this call applied, and the host's
    providers synced.

    Each report asks ``-lgip`` once per GPU, under the agent's report
    lock (reports never interleave), and nothing else asks it while no
    bind or release runs; so of the calls after now, at most
    ``len(PFS) - 1`` belong to a report collected before, the next
    ``len(PFS)`` to one collected after, and one more shows that
    report answered (the next one started).
    """
    def lgips():
        return sum(1 for c in fake_tools.calls(flow.tree.tools_dir)
                   if c[1:3] == ['mig', '-lgip'])
    mark = lgips()
    nova_flow.wait_until(lambda: lgips() >= mark + 2 * len(PFS), TIMEOUT,
                         'a report collected after now')

    def synced():
        ((requested, done),) = flow.deployment.db_rows(
            'SELECT sync_requested, sync_done FROM services WHERE host = '
            ':host AND "binary" = :binary', host=HOST,
            binary=constants.BINARY_AGENT)
        return done >= requested
    nova_flow.wait_until(synced, TIMEOUT, 'the host synced to Placement')


def test_nova_binds_partitions_of_two_profiles(flow, nova, clean):
    # Each empty GPU serves the profile the host has none of.
    assert flow.serving() == INITIAL
    two, arqs_2g = _spawn(flow, nova, RC_2G)
    one, arqs_1g = _spawn(flow, nova, RC_1G)
    assert flow.gpu_instances() == [(0, '1g.18gb'), (1, '2g.35gb')]
    for arq in list(arqs_1g.values()) + list(arqs_2g.values()):
        assert arq['attach_handle_type'] == 'PCI'
        # What Nova's libvirt driver attaches: the VF, now of the type.
        vf = '%(domain)s:%(bus)s:%(device)s.%(function)s' % arq[
            'attach_handle_info']
        assert flow.vf_types()[vf] == int(
            arq['attach_handle_info']['vgpu_type'])
    flow.assert_no_orphan()
    # The notifier sends the events once the binds committed: they may
    # reach Nova a little after the ARQs read Bound.
    tags = list(arqs_1g) + list(arqs_2g)
    flow.deployment.nova.wait_tags(tags, TIMEOUT)
    assert {e['status'] for e in flow.deployment.nova.events
            if e['tag'] in tags} == {'completed'}
    # Held + still creatable: the totals stay what the GPUs can hold.
    nova_flow.wait_until(lambda: flow.serving() == {PFS[0]: RC_1G,
                                                    PFS[1]: RC_2G},
                         TIMEOUT, 'both profiles still offered')

    for instance in (one, two):
        _delete(flow, nova, instance)
    flow.wait_released()


def test_an_empty_gpu_switches_profile_one_holding_partitions_never(
        flow, nova, clean):
    holder, _arqs = _spawn(flow, nova, RC_2G)
    # A 1g.18gb taken: the host has fewer than mig_min_free (7) left,
    # demand for 1g.18gb.
    _spawn(flow, nova, RC_1G)
    assert flow.gpu_instances() == [(0, '1g.18gb'), (1, '2g.35gb')]
    _settled(flow)
    # GPU 1 holds a 2g.35gb partition: it keeps its profile, and
    # Placement grants 1g.18gb on GPU 0 only.
    assert flow.serving() == INITIAL
    assert flow.providers(RC_1G) == [flow.provider(PFS[0])]

    _delete(flow, nova, holder)
    # Empty, GPU 1 follows the demand.
    nova_flow.wait_until(lambda: flow.serving()[PFS[1]] == RC_1G, TIMEOUT,
                         'GPU 1 switched to 1g.18gb')
    _spawn(flow, nova, RC_1G, rp=flow.provider(PFS[1]))
    assert flow.gpu_instances() == [(0, '1g.18gb'), (1, '1g.18gb')]
    nova_flow.wait_until(lambda: flow.providers(RC_2G) == [], TIMEOUT,
                         'no 2g.35gb offered')
    flow.assert_no_orphan()


def test_a_claim_not_bound_yet_keeps_its_gpu_serving_its_profile(
        flow, nova, clean):
    """Nova claims in Placement, then binds: an empty GPU the demand
    would switch keeps its profile while a claim on it waits for its
    bind (the conductor's switch guard), and the bind makes it."""
    instance = str(uuid.uuid4())
    rg_rp_map = _claim(flow, RC_2G, 1, instance, flow.provider(PFS[1]))
    # A 1g.18gb taken: fewer than mig_min_free left, demand for 1g.18gb,
    # and GPU 1 holds no partition.
    _spawn(flow, nova, RC_1G)
    _settled(flow)
    assert flow.serving() == INITIAL
    assert ('GPU %s keeps serving 2g.35gb, not 1g.18gb' % PFS[1]
            in flow.agent.log_text())
    uuids = _bind_claimed(flow, nova, RC_2G, 1, instance, rg_rp_map)
    arqs = flow.deployment.wait_resolved(uuids, TIMEOUT)
    assert {a['state'] for a in arqs.values()} == {'Bound'}, servers.tail(
        flow.agent.log, 40)
    assert flow.gpu_instances() == [(0, '1g.18gb'), (1, '2g.35gb')]
    flow.assert_no_orphan()


def _reboot(flow) -> None:
    """What a reboot does to the host: every GPU instance and VF type
    gone (MIG mode stays)."""
    gpus = fake_mig.read_state(state_file(flow.tree))
    for gpu in gpus:
        gpu.gis = []
    fake_mig.write_state(state_file(flow.tree), gpus)
    for vf in flow.vf_types():
        flow.tree.write(flow.tree.dev(vf, 'nvidia', 'current_vgpu_type'),
                        '0')


def test_the_agent_restores_partitions_after_a_reboot_before_reporting(
        flow, nova, clean):
    _spawn(flow, nova, RC_2G)
    _spawn(flow, nova, RC_1G)
    before = flow.gpu_instances()
    flow.agent.stop()
    _reboot(flow)
    # And a GPU instance no partition holds, made by hand meanwhile.
    smi = os.path.join(flow.tree.tools_dir, 'nvidia-smi')
    servers.run_logged([smi, 'mig', '-cgi', '0', '-i', '0'],
                       os.path.join(flow.agent.work_dir, 'smi.log'),
                       'a stray GPU instance')
    assert flow.gpu_instances() == [(0, '7g.141gb')]
    mark = len(fake_tools.calls(flow.tree.tools_dir))
    flow.restart_agent()
    flow.assert_no_orphan()
    assert flow.gpu_instances() == before
    calls = [c[1:3] for c in fake_tools.calls(flow.tree.tools_dir)[mark:]]
    # Destroyed and recreated before the first discovery (the first
    # -lgip), so before the first report.
    first_discovery = calls.index(['mig', '-lgip'])
    assert [c for c in calls[first_discovery:]
            if c[1] in ('-cgi', '-dgi')] == []
    assert calls[:first_discovery].count(['mig', '-cgi']) == 2
    assert ['mig', '-dgi'] in calls[:first_discovery]
    log = flow.agent.log_text()
    assert 'destroying GPU instance 1 (7g.141gb) of GPU 0' in log
    assert log.count('restored MIG partition') == 2
    # Still bound, and released as usual.
    assert {a['state'] for a in flow.deployment.arqs()} == {'Bound'}


# A SIGKILL at each nvidia-smi step of a creation (at bind) and of a
# destruction (at delete): before the GPU instance is created (the
# intent recorded), after it is (its id not yet recorded), after the
# VF's type was reset and before the compute instance is destroyed,
# between the compute and the GPU instance, after the GPU instance is
# gone (the journal entry left).
KILLS = [('bind', '-cgi', 'before'), ('bind', '-cgi', 'after'),
         ('delete', '-dci', 'before'), ('delete', '-dci', 'after'),
         ('delete', '-dgi', 'after')]


@pytest.mark.parametrize('step,command,when', KILLS,
                         ids=['%s-%s-%s' % k for k in KILLS])
def test_agent_sigkill_leaves_no_orphan(flow, nova, clean, step, command,
                                        when):
    rolled_back = flow.agent.log_text().count('rolled back the unfinished')
    if step == 'delete':
        instance, _arqs = _spawn(flow, nova, RC_1G)
        flow.kill_at(command, when)
        _delete(flow, nova, instance)
    else:
        flow.kill_at(command, when)
        instance, uuids = _bind(flow, nova, RC_1G)
    flow.wait_killed()
    flow.restart_agent()
    if step == 'delete':
        nova_flow.wait_until(
            lambda: flow.deployment.handle_stats()['in_use'] == 0, TIMEOUT,
            'the handle released')
        assert flow.gpu_instances() == []
    else:
        # The conductor's call to the killed agent timed out: the bind
        # failed (Nova then deletes the ARQ), or a retry made it.
        (arq,) = flow.deployment.wait_resolved(uuids, TIMEOUT).values()
        assert [p for _gpu, p in flow.gpu_instances()] == (
            ['1g.18gb'] if arq['state'] == 'Bound' else [])
    flow.assert_no_orphan()
    assert flow.agent.log_text().count(
        'rolled back the unfinished MIG partition') == rolled_back + 1


# MIG-backed vGPUs created as mdevs (vGPU 13 to 16) -------------------------
#
# A second compute host on the same deployment: an A100 in MIG mode
# whose sixteen VFs list the MIG-backed mdev types (hosts.py), its
# agent, and a thread in place of the kernel that applies the writes to
# the VFs' mdev ``create`` and ``remove`` files.

MDEV_HOST = 'mig-compute-2'
RC_3G = 'CUSTOM_MIG_3G_20GB'


class MdevFlow(MigFlow):
    """:class:`MigFlow` of the A100 host: its partitions are mdevs."""

    def mdevs(self) -> dict[str, str]:
        """The mdevs of the A100's VFs: uuid -> VF."""
        return {m: vf for vf in hosts.a100_vfs()
                for m in self.tree.mdevs_of(vf)}

    def bound(self) -> list[dict]:
        return [arq for arq in self.deployment.arqs()
                if arq['state'] == 'Bound'
                and arq['hostname'] == MDEV_HOST]

    def assert_no_orphan(self) -> None:
        """The host holds exactly what its bound ARQs hold: a GPU
        instance of the handle's profile, an mdev of the handle's uuid
        on its VF, a journal entry."""
        arqs = self.bound()
        infos = {a['attach_handle_uuid']: a['attach_handle_info']
                 for a in arqs}
        assert self.gpu_instances() == sorted(
            (0, info['mig_profile']) for info in infos.values())
        assert self.mdevs() == {
            key: '%(domain)s:%(bus)s:%(device)s.%(function)s' % info
            for key, info in infos.items()}
        assert self.journal_keys() == set(infos)

    def wait_released(self) -> None:
        nova_flow.wait_until(
            lambda: self.deployment.handle_stats()['in_use'] == 0, TIMEOUT,
            'every handle released')
        # The kernel thread removes an mdev a moment after the write.
        nova_flow.wait_until(lambda: self.mdevs() == {}, TIMEOUT,
                             'the mdevs removed')
        self.assert_no_orphan()


@pytest.fixture(scope='module')
def mdev_flow(flow, placement_pg, work_dir):
    directory = os.path.join(work_dir, 'mig-mdev-host')
    tree = _killable(hosts.nvidia_a100_mig_mdev_host(
        os.path.join(directory, 'host')))
    agent = _agent(flow.deployment, placement_pg, MDEV_HOST, directory, tree,
                   {'mig_profiles': '3g.20gb,1g.5gb'})
    with demo_host.DemoKernel(tree):
        agent.start()
        result = MdevFlow(flow.deployment, tree, agent,
                          os.path.join(directory, 'nvidia_gpu', 'mig'))
        servers.wait_for(lambda: result.providers(RC_3G), 60,
                         '3g.20gb offered', agent.process, agent.log)
        yield result
        agent.stop()


@pytest.fixture
def mdev_clean(mdev_flow):
    yield mdev_flow
    mdev_flow.clear()


def _spawn_mdev(flow, nova):
    """Nova boots with one 3g.20gb: claimed, bound, Bound; the ARQ."""
    instance, uuids = _bind(flow, nova, RC_3G, host=MDEV_HOST)
    (arq,) = flow.deployment.wait_resolved(uuids, TIMEOUT).values()
    assert arq['state'] == 'Bound', servers.tail(flow.agent.log, 40)
    return instance, arq


def test_nova_binds_a_mig_backed_vgpu_created_as_an_mdev(mdev_flow, nova,
                                                         mdev_clean):
    instance, arq = _spawn_mdev(mdev_flow, nova)
    # What Nova's libvirt driver attaches: the mdev of the handle's uuid.
    assert arq['attach_handle_type'] == 'MDEV'
    key = arq['attach_handle_uuid']
    nova_flow.wait_until(lambda: key in mdev_flow.mdevs(), TIMEOUT,
                         'the mdev created')
    assert mdev_flow.gpu_instances() == [(0, '3g.20gb')]
    mdev_flow.assert_no_orphan()
    mdev_flow.deployment.nova.wait_tags([arq['uuid']], TIMEOUT)
    _delete(mdev_flow, nova, instance)
    mdev_flow.wait_released()
    assert mdev_flow.gpu_instances() == []


def test_the_agent_restores_mdev_partitions_after_a_reboot(mdev_flow, nova,
                                                           mdev_clean):
    _spawn_mdev(mdev_flow, nova)
    _spawn_mdev(mdev_flow, nova)
    nova_flow.wait_until(lambda: len(mdev_flow.mdevs()) == 2, TIMEOUT,
                         'the mdevs created')
    mdev_flow.agent.stop()
    mdev_flow.tree.reboot()
    gpus = fake_mig.read_state(state_file(mdev_flow.tree))
    for gpu in gpus:
        gpu.gis = []
    fake_mig.write_state(state_file(mdev_flow.tree), gpus)
    assert mdev_flow.mdevs() == {}
    mark = len(fake_tools.calls(mdev_flow.tree.tools_dir))
    mdev_flow.restart_agent()
    calls = [c[1:3] for c in fake_tools.calls(mdev_flow.tree.tools_dir)[
        mark:]]
    # Recreated before the first discovery, so before the first report.
    first_discovery = calls.index(['mig', '-lgip'])
    assert calls[:first_discovery].count(['mig', '-cgi']) == 2
    nova_flow.wait_until(lambda: len(mdev_flow.mdevs()) == 2, TIMEOUT,
                         'the mdevs restored')
    mdev_flow.assert_no_orphan()


@pytest.mark.parametrize('step,command,when', KILLS,
                         ids=['%s-%s-%s' % k for k in KILLS])
def test_agent_sigkill_leaves_no_mdev_orphan(mdev_flow, nova, mdev_clean,
                                             step, command, when):
    """The kills of :data:`KILLS`, where the vGPU is an mdev: made after
    the GPU instance at bind, removed before it at delete."""
    if step == 'delete':
        instance, _arq = _spawn_mdev(mdev_flow, nova)
        mdev_flow.kill_at(command, when)
        _delete(mdev_flow, nova, instance)
    else:
        mdev_flow.kill_at(command, when)
        instance, uuids = _bind(mdev_flow, nova, RC_3G, host=MDEV_HOST)
    rolled_back = mdev_flow.agent.log_text().count(
        'rolled back the unfinished')
    mdev_flow.wait_killed()
    mdev_flow.restart_agent()
    if step == 'delete':
        mdev_flow.wait_released()
    else:
        (arq,) = mdev_flow.deployment.wait_resolved(uuids, TIMEOUT).values()
        if arq['state'] == 'Bound':
            nova_flow.wait_until(lambda: len(mdev_flow.mdevs()) == 1,
                                 TIMEOUT, 'the retried mdev created')
    mdev_flow.assert_no_orphan()
    assert mdev_flow.agent.log_text().count(
        'rolled back the unfinished MIG partition') == rolled_back + 1
