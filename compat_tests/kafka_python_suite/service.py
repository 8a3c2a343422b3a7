"""Stand-in for kafka-python's test/service.py (absent from its sdist).

Their fixtures (test/integration/fixtures.py) import ExternalService and SpawnedService.
Under pybroker every broker is external (KAFKA_URI, set by our plugin), so SpawnedService
only exists to fail loudly if some fixture tries to spawn a Java Kafka or ZooKeeper.
"""

import logging

log = logging.getLogger(__name__)


class ExternalService:
    def __init__(self, host, port):
        log.info("Using already running service at %s:%d", host, port)
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True

    def start(self):
        pass

    def stop(self):
        pass


class SpawnedService:
    def __init__(self, args=None, env=None):
        self.args = args
        self.env = env

    def start(self):
        raise RuntimeError(
            f"pybroker stand-in: spawning {self.args!r} is not supported; the suite runs "
            "against the pybroker process named by KAFKA_URI"
        )

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return False
