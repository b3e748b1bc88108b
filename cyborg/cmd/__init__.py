"""Console scripts."""

import warnings

# Libraries pulled in by oslo.messaging import eventlet when it is
# installed; cyborg uses native threads and never monkey-patches.
warnings.filterwarnings('ignore', message=r'(?s).*Eventlet is deprecated')
