# Copyright 2026 The Cyborg Authors.
#
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

"""Sphinx configuration of the Cyborg documentation."""

import os

# The generators read their files relative to the repository root.
_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

extensions = [
    'openstackdocstheme',
    'oslo_config.sphinxext',
    'oslo_config.sphinxconfiggen',
    'oslo_policy.sphinxext',
    'oslo_policy.sphinxpolicygen',
]

# openstackdocstheme: where the sources live, for the "report a bug" and
# "edit" links.
openstackdocs_repo_name = 'openstack/cyborg'
openstackdocs_bug_project = 'openstack-cyborg'
openstackdocs_bug_tag = 'docs'
openstackdocs_auto_name = False

# oslo_config.sphinxconfiggen writes _static/cyborg.conf.sample.
config_generator_config_file = os.path.join(
    _ROOT, 'etc', 'cyborg', 'cyborg-config-generator.conf')
sample_config_basename = '_static/cyborg'

# oslo_policy.sphinxpolicygen writes _static/cyborg.policy.yaml.sample.
policy_generator_config_file = os.path.join(
    _ROOT, 'etc', 'cyborg', 'cyborg-policy-generator.conf')
sample_policy_basename = '_static/cyborg'

project = 'Cyborg'
copyright = '2026, The Cyborg Authors'
master_doc = 'index'
source_suffix = {'.rst': 'restructuredtext'}
exclude_patterns = ['_build']
pygments_style = 'native'

html_theme = 'openstackdocs'
html_static_path = ['_static']
