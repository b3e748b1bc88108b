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

"""Options of the NVIDIA GPU driver ([nvidia_gpu], [vgpu_<type>]).

The syntax follows Nova's libvirt vGPU options, which operators know:
``[nvidia_gpu] enabled_vgpu_types`` is Nova's ``[devices]
enabled_mdev_types`` and each enabled type has a group ``[vgpu_<type>]``
(Nova's ``[mdev_<type>]``) with ``device_addresses``, registered when the
driver starts.
"""

from oslo_config import cfg

group = cfg.OptGroup(
    'nvidia_gpu', title='NVIDIA GPU driver',
    help='Options of nvidia_gpu_driver, which reports NVIDIA GPUs for '
         'passthrough (PGPU) and their virtual GPUs (VGPU).')

opts = [
    cfg.ListOpt('enabled_vgpu_types', default=[],
                help='vGPU types offered on this host. An mdev type id '
                     '(as in /sys/class/mdev_bus/<address>/'
                     'mdev_supported_types, e.g. nvidia-222), or, for GPUs '
                     'whose virtual functions carry nvidia/'
                     'creatable_vgpu_types (vGPU 17 and later), the vGPU '
                     'type name without its "NVIDIA " prefix (e.g. '
                     'H200X-1-18C) or its numeric id. Each type has a group '
                     '[vgpu_<type>] (e.g. [vgpu_nvidia-222]) with the '
                     'options device_addresses (the PCI addresses of the '
                     'GPUs that offer the type; one type without it '
                     'applies to every other GPU that offers it), '
                     'resource_class (VGPU, the default, or a custom '
                     'class) and max_instances (at most this many vGPUs '
                     'per GPU). GPUs with no type are reported for '
                     'passthrough.'),
    cfg.ListOpt('passthrough_drivers', default=['vfio-pci'],
                help='Host drivers a GPU with no vGPU type may be bound to '
                     'and still be reported for passthrough (PGPU) as it '
                     'is. An unbound GPU is always reported (libvirt binds '
                     'it to vfio-pci); a GPU bound to the host\'s nvidia '
                     'driver is reported as rebind_nvidia_gpus says; one '
                     'bound to another driver (nouveau) is in use by the '
                     'host and not reported.'),
    cfg.BoolOpt('rebind_nvidia_gpus', default=True,
                help='Offer for passthrough (PGPU) the GPUs with no vGPU '
                     'type that the host\'s nvidia driver holds. At bind '
                     'the agent moves such a GPU from nvidia to vfio-pci, '
                     'only when no host process has its /dev/nvidia<N> '
                     'open and the nvidia driver grants its unbindLock: a '
                     'GPU in use on the host fails the bind with the '
                     'processes that hold it (Nova then reschedules the '
                     'instance). When the accelerator request is unbound '
                     'or deleted the GPU goes back to nvidia. Needs the '
                     'vfio-pci module loaded. False: such GPUs are not '
                     'reported (bind them to vfio-pci yourself). Ignored '
                     'for GPUs when nvidia is one of passthrough_drivers.'),
    cfg.FloatOpt('rebind_timeout', default=10.0, min=0.1,
                 help='Seconds the agent waits for the kernel to move a '
                      'GPU between nvidia and vfio-pci (rebind_nvidia_gpus) '
                      'before the bind or the release fails.'),
    cfg.FloatOpt('nvidia_smi_timeout', default=10.0, min=1.0,
                 help='Seconds each nvidia-smi query of the health check '
                      'may take before it is killed and ignored.'),
    cfg.BoolOpt('xid_health', default=True,
                help='Read the kernel log (dmesg) for NVIDIA Xid errors. '
                     'The agent gives each new Xid line to the remediation '
                     'catalog ([remediation]), which says what it does to '
                     'the GPU (ignore, degrade, taint, reset_device, '
                     'reboot_host). The driver\'s own health check (its '
                     'health() alone) reports a GPU with a device-fatal '
                     'Xid (any but 13, 31, 43, 45, 68 and 109) unhealthy '
                     'while the log line is there.'),
    cfg.FloatOpt('gpu_reset_timeout', default=60.0, min=1.0,
                 help='Seconds "nvidia-smi --gpu-reset" may take when the '
                      'remediation catalog resets a GPU; a reset that '
                      'takes longer is killed and counts as failed.'),
    cfg.StrOpt('partition_mode', default='static',
               choices=[
                   ('static', 'Each GPU runs the vGPU type the operator '
                    'configured (enabled_vgpu_types); MIG instances, if '
                    'any, are prepared by the operator.'),
                   ('homogeneous', 'GPUs in MIG mode whose virtual '
                    'functions carry vGPU 17+ type files or MIG-backed '
                    'mdev types (vGPU 13 to 16) serve one MIG profile of '
                    'mig_profiles at a time, created at bind and '
                    'destroyed at unbind; an empty GPU may switch profile '
                    'to follow demand.')],
               help='How GPUs in MIG mode are partitioned. In homogeneous '
                    'mode each such GPU is reported with one child of '
                    'resource class CUSTOM_MIG_<PROFILE> (e.g. '
                    'CUSTOM_MIG_1G_18GB) whose total is the instances it '
                    'holds plus those it can still create (read from '
                    'nvidia-smi mig -lgip), so that every allocation '
                    'Placement grants can be created. The agent owns the '
                    'GPU instances of these GPUs: at start it rolls back '
                    'what a killed agent left half done.'),
    cfg.ListOpt('mig_profiles', default=[],
                help='homogeneous partition_mode: the MIG profiles offered '
                     '(names as nvidia-smi mig -lgip prints them, without '
                     '"MIG ", e.g. 1g.18gb,3g.71gb), in order of preference. '
                     'A profile is offered on a GPU whose virtual functions '
                     'list the MIG-backed vGPU type of that profile (e.g. '
                     'H200X-1-18C for 1g.18gb, or the mdev type named '
                     'A100-3-20C for 3g.20gb).'),
    cfg.IntOpt('mig_min_free', default=1, min=0,
               help='homogeneous partition_mode: an empty GPU switches to '
                    'the first profile of mig_profiles of which the host '
                    'has fewer than this many instances still creatable; '
                    'otherwise it keeps its profile.'),
]

type_opts = [
    cfg.ListOpt('device_addresses', default=[],
                help='PCI addresses of the GPUs (physical functions) that '
                     'offer this vGPU type, e.g. 0000:84:00.0.'),
    cfg.StrOpt('resource_class', default='VGPU',
               regex=r'^(VGPU|CUSTOM_[A-Z0-9_]+)$',
               help='Placement resource class of the vGPUs of this type: '
                    'VGPU or a custom class such as CUSTOM_T4_16Q (as '
                    'Nova\'s mdev_class).'),
    cfg.IntOpt('max_instances', min=1,
               help='At most this many vGPUs of this type per GPU, for GPUs '
                    'whose virtual functions outnumber the vGPUs they can '
                    'run (as Nova\'s max_instances); unset: as many as the '
                    'host offers.'),
]

TYPE_GROUP_PREFIX = 'vgpu_'


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def register_dynamic_opts(conf: cfg.ConfigOpts) -> None:
    """One ``[vgpu_<type>]`` group per ``enabled_vgpu_types`` entry."""
    for type_name in conf.nvidia_gpu.enabled_vgpu_types:
        conf.register_opts(type_opts, group=TYPE_GROUP_PREFIX + type_name)


def type_options(conf: cfg.ConfigOpts, type_name: str):
    """The ``[vgpu_<type>]`` group of an enabled type."""
    return conf[TYPE_GROUP_PREFIX + type_name]


def list_opts():
    # The [vgpu_<type>] groups exist only for the types an operator
    # enables; enabled_vgpu_types' help documents them.
    return {group: opts}
