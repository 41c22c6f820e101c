"""Write Sluice process-function handlers in Python.

A handler subclasses :class:`Handler` and implements :meth:`Handler.process`,
which receives a :class:`Call` (one Arrow record batch with a row per
activation) and returns :class:`Results`. The engine owns every value and
timer: a handler proposes state mutations, timer operations and output rows
per activation, and the engine validates the whole answer before applying
any of it. A call holds at most one activation per key.

Columns of ``Call.activations`` (see docs/remote-protocol.md):

* ``id`` (uint64), ``key`` (binary, canonical key encoding);
* ``state`` (uint8: 0 absent, 1 present null, 2 value), ``state_value`` (int64);
* ``watermark`` (int64, ms);
* ``timer_name`` (string, null for an input row), ``timer_at`` (int64);
* ``in.<column>`` for each input column (null for a timer).
"""

from .call import Call, Results, STATE_ABSENT, STATE_NULL, STATE_VALUE
from .handler import Handler

__all__ = ["Call", "Handler", "Results", "STATE_ABSENT", "STATE_NULL", "STATE_VALUE", "SDK_VERSION"]

#: The SDK version; part of a deployment's environment binding.
SDK_VERSION = "0.1.0"
