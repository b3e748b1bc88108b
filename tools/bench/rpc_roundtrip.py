#!/usr/bin/env python3
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

"""Benchmark: conductor RPC call round trips per second.

Compares the all-in-one's in-process transport (inproc://),
oslo.messaging's fake driver (fake://) and a private RabbitMQ node
(rabbit://) with a trivial endpoint, one caller, for a fixed time each.

    .venv/bin/python tools/bench/rpc_roundtrip.py [--duration 5]
"""

import argparse
import os
import sys
import tempfile
import time
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from oslo_config import cfg  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.common import rpc  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402


class Endpoint:
    def ping(self, context, value):
        return value


def measure(url: str, duration: float) -> tuple[float, float]:
    conf = cfg.CONF
    rpc.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('transport_url', url)
    transport = rpc.get_transport(conf)
    server = rpc.get_server(transport, 'bench', 'host', Endpoint())
    server.start()
    client = rpc.get_client(transport, 'bench')
    context = cyborg_context.get_admin_context()
    try:
        client.call(context, 'ping', value=0)
        calls, started = 0, time.monotonic()
        cpu = time.process_time()
        while time.monotonic() - started < duration:
            client.call(context, 'ping', value=calls)
            calls += 1
        elapsed = time.monotonic() - started
        cpu = time.process_time() - cpu
    finally:
        server.stop()
        server.wait()
        rpc.cleanup(transport)
    return calls / elapsed, cpu * 1e6 / max(calls, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--duration', type=float, default=5.0)
    args = parser.parse_args()
    print('%-10s %12s %16s' % ('transport', 'calls/s', 'CPU us/call'))
    for url in ('inproc://', 'fake://'):
        rate, cpu = measure(url, args.duration)
        print('%-10s %12.0f %16.0f' % (url.split(':')[0], rate, cpu),
              flush=True)
    with servers.RabbitMQServer(base_dir=tempfile.mkdtemp()) as rabbit:
        rate, cpu = measure(rabbit.url, args.duration)
        print('%-10s %12.0f %16.0f' % ('rabbit', rate, cpu), flush=True)
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
