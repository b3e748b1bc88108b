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

"""The RabbitMQ fixture's virtual hosts."""

import uuid

import kombu


def _opens(url: str) -> bool:
    with kombu.Connection(url.replace('rabbit://', 'amqp://'),
                          connect_timeout=2) as connection:
        try:
            connection.connect()
        except Exception:
            return False
        return connection.connected


def _vhost(url: str) -> str:
    return url.rsplit('/', 1)[1]


def test_a_new_vhost_is_usable_by_guest_when_it_is_returned(rabbitmq):
    # The node made guest and "/" too, as a node without boot
    # definitions does.
    assert _opens(rabbitmq.url)
    url = rabbitmq.create_vhost('fixture-%s' % uuid.uuid4().hex[:8])
    assert url.startswith(rabbitmq.url) and _vhost(url)
    # Opening a vhost needs guest's permissions on it, not only the vhost.
    assert _opens(url)
    listed = rabbitmq.rabbitmqctl('list_permissions', '-p',
                                  _vhost(url)).stdout
    assert 'guest\t.*\t.*\t.*' in listed


def test_creating_a_vhost_again_keeps_it(rabbitmq):
    name = 'fixture-%s' % uuid.uuid4().hex[:8]
    assert rabbitmq.create_vhost(name) == rabbitmq.create_vhost(name)
    assert _opens(rabbitmq.create_vhost(name))


def test_each_name_gets_its_own_vhost_past_those_made_at_boot(rabbitmq):
    """Past the vhosts left from the node's boot, one rabbitmqctl run
    makes more."""
    count = len(rabbitmq._free_vhosts) + 2
    names = ['fixture-%s' % uuid.uuid4().hex[:8] for _n in range(count)]
    urls = [rabbitmq.create_vhost(name) for name in names]
    assert len(set(urls)) == count
    assert all(_opens(url) for url in urls[-3:])


def test_the_node_checks_its_vhosts_seldom(rabbitmq):
    """Its net_ticktime (RabbitMQServer.NET_TICKTIME) is the one set."""
    answer = rabbitmq.rabbitmqctl('eval', 'net_kernel:get_net_ticktime().')
    assert answer.stdout.strip() == str(rabbitmq.NET_TICKTIME)
