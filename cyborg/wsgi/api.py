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

"""WSGI entry point for uWSGI, gunicorn or mod_wsgi.

``cyborg.wsgi.api:application`` reads /etc/cyborg/cyborg.conf (or the
files named in CYBORG_CONFIG_FILES, comma separated).
"""

import os

from cyborg.api import app as api_app
from cyborg.common import config
from cyborg.common import metrics
from cyborg.conf import CONF
from cyborg.db import api as db_api


def init_application():
    files = os.environ.get('CYBORG_CONFIG_FILES')
    default_files = files.split(',') if files else None
    config.prepare_service(['cyborg-api'], default_config_files=default_files)
    db_api.configure(CONF)
    # Several worker processes: see cyborg.common.metrics.
    metrics.prepare_multiprocess_dir()
    return api_app.setup_app(CONF)


application = init_application()
