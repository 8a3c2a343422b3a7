"""One module per Kafka API declaring its request/response layouts; importing this package
registers them all in ``pybroker.wire.schema.SCHEMAS``."""

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
