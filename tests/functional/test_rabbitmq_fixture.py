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


def test_a_new_vhost_is_usable_by_guest_when_it_is_returned(rabbitmq):
    name = 'fixture-%s' % uuid.uuid4().hex[:8]
    assert not _opens(rabbitmq.url + name)  # none before
    url = rabbitmq.create_vhost(name)
    assert url == rabbitmq.url + name
    # Opening a vhost needs guest's permissions on it, not only the vhost.
    assert _opens(url)
    listed = rabbitmq.rabbitmqctl('list_permissions', '-p', name).stdout
    assert 'guest\t.*\t.*\t.*' in listed


def test_creating_a_vhost_again_keeps_it(rabbitmq):
    name = 'fixture-%s' % uuid.uuid4().hex[:8]
    assert rabbitmq.create_vhost(name) == rabbitmq.create_vhost(name)
    assert _opens(rabbitmq.url + name)
