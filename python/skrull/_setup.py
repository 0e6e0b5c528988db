"""The prepared form of a configuration: ``skrull_setup_init`` validates a ``skrull_config``
once into a buffer this package owns, and ``skrull_schedule_prepared`` plans every batch with
the handle (the budget and, for ``balanced``, the cost model are not derived again)."""

from __future__ import annotations

import ctypes
from typing import NoReturn

from . import _ffi
from ._errors import Status, from_info


class Prepared:
    """One ``skrull_setup``: its buffer (``skrull_setup_size()`` bytes) and the handle into it.

    The handle points into the buffer, and both live in this object: whoever holds it keeps
    the setup valid. The setup copies what it needs from the configuration (the cost model
    included), so it never dangles when the configuration's structs go; a new configuration
    needs a new ``Prepared``. It is never pickled (a setup is valid only at its own address):
    a pickled Scheduler prepares its configuration again.
    """

    __slots__ = ("buffer", "handle")

    def __init__(self, c_config: _ffi.skrull_config) -> None:
        """Prepares ``c_config``; raises what an invalid configuration raises."""
        self.buffer = ctypes.create_string_buffer(_ffi.lib.skrull_setup_size())
        self.handle = ctypes.POINTER(_ffi.skrull_setup)()
        err = _ffi.skrull_error_info()
        status = _ffi.lib.skrull_setup_init(ctypes.byref(c_config), self.buffer,
                                            len(self.buffer), ctypes.byref(self.handle),
                                            ctypes.byref(err))
        if status != Status.OK:
            raise from_info(err, status, c_config=c_config)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a prepared skrull_setup is valid only at its own address and is "
                        "not pickled: pickle the Scheduler, which prepares it again")
