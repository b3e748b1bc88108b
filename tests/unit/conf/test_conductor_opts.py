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

"""``[conductor] workers`` sizes the bind job pool, as its help says."""

from cyborg.conductor import binding
from cyborg.conf import conductor as conductor_opts


def _option(name):
    return next(opt for opt in conductor_opts.opts if opt.name == name)


def test_workers_help_names_the_pool_it_sizes():
    text = _option('workers').help
    assert 'bind jobs' in text
    assert 'executor_thread_pool_size' in text  # RPC: another pool


def test_workers_is_the_number_of_bind_job_threads():
    binder = binding.Binder('c1', 3, 60, None, lambda rows: None)
    try:
        assert binder._executor._max_workers == 3
    finally:
        binder.stop()
