"""One module per Kafka API, each registering itself with ``@handler`` on import."""

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_") and _m.name != "context":
        importlib.import_module(f"{__name__}.{_m.name}")
