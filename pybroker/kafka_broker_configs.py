"""Apache Kafka 3.9's broker config definitions, as data (generated from kafka_2.13-3.9.0.jar:
KafkaConfig.configDef, DynamicBrokerConfig.dynamicConfigUpdateModes by java/DumpBrokerConfigs.java:
``java -cp "$(cat .cache/java/classpath.txt)" java/DumpBrokerConfigs.java``).  Used by pybroker.dynamic_config for DescribeConfigs
(config_type, documentation) and for Kafka's dynamic / static classification.
"""

from __future__ import annotations

# every KafkaConfig name (a name here that is not dynamic is static-only in Kafka)
KAFKA_CONFIG_NAMES: frozenset[str] = frozenset(
    """
    advertised.listeners
    alter.config.policy.class.name
    alter.log.dirs.replication.quota.window.num
    alter.log.dirs.replication.quota.window.size.seconds
    authorizer.class.name
    auto.create.topics.enable
    auto.include.jmx.reporter
    auto.leader.rebalance.enable
    background.threads
    broker.heartbeat.interval.ms
    broker.id
    broker.id.generation.enable
    broker.rack
    broker.session.timeout.ms
    client.quota.callback.class
    compression.gzip.level
    compression.lz4.level
    compression.type
    compression.zstd.level
    connection.failed.authentication.delay.ms
    connections.max.idle.ms
    connections.max.reauth.ms
    control.plane.listener.name
    controlled.shutdown.enable
    controlled.shutdown.max.retries
    controlled.shutdown.retry.backoff.ms
    controller.listener.names
    controller.quorum.append.linger.ms
    controller.quorum.bootstrap.servers
    controller.quorum.election.backoff.max.ms
    controller.quorum.election.timeout.ms
    controller.quorum.fetch.timeout.ms
    controller.quorum.request.timeout.ms
    controller.quorum.retry.backoff.ms
    controller.quorum.voters
    controller.quota.window.num
    controller.quota.window.size.seconds
    controller.socket.timeout.ms
    create.topic.policy.class.name
    default.replication.factor
    delegation.token.expiry.check.interval.ms
    delegation.token.expiry.time.ms
    delegation.token.master.key
    delegation.token.max.lifetime.ms
    delegation.token.secret.key
    delete.records.purgatory.purge.interval.requests
    delete.topic.enable
    early.start.listeners
    eligible.leader.replicas.enable
    fetch.max.bytes
    fetch.purgatory.purge.interval.requests
    group.consumer.assignors
    group.consumer.heartbeat.interval.ms
    group.consumer.max.heartbeat.interval.ms
    group.consumer.max.session.timeout.ms
    group.consumer.max.size
    group.consumer.migration.policy
    group.consumer.min.heartbeat.interval.ms
    group.consumer.min.session.timeout.ms
    group.consumer.session.timeout.ms
    group.coordinator.append.linger.ms
    group.coordinator.new.enable
    group.coordinator.rebalance.protocols
    group.coordinator.threads
    group.initial.rebalance.delay.ms
    group.max.session.timeout.ms
    group.max.size
    group.min.session.timeout.ms
    group.share.delivery.count.limit
    group.share.enable
    group.share.heartbeat.interval.ms
    group.share.max.groups
    group.share.max.heartbeat.interval.ms
    group.share.max.record.lock.duration.ms
    group.share.max.session.timeout.ms
    group.share.max.size
    group.share.min.heartbeat.interval.ms
    group.share.min.record.lock.duration.ms
    group.share.min.session.timeout.ms
    group.share.partition.max.record.locks
    group.share.record.lock.duration.ms
    group.share.session.timeout.ms
    initial.broker.registration.timeout.ms
    inter.broker.listener.name
    inter.broker.protocol.version
    kafka.metrics.polling.interval.secs
    kafka.metrics.reporters
    leader.imbalance.check.interval.seconds
    leader.imbalance.per.broker.percentage
    listener.security.protocol.map
    listeners
    log.cleaner.backoff.ms
    log.cleaner.dedupe.buffer.size
    log.cleaner.delete.retention.ms
    log.cleaner.enable
    log.cleaner.io.buffer.load.factor
    log.cleaner.io.buffer.size
    log.cleaner.io.max.bytes.per.second
    log.cleaner.max.compaction.lag.ms
    log.cleaner.min.cleanable.ratio
    log.cleaner.min.compaction.lag.ms
    log.cleaner.threads
    log.cleanup.policy
    log.dir
    log.dir.failure.timeout.ms
    log.dirs
    log.flush.interval.messages
    log.flush.interval.ms
    log.flush.offset.checkpoint.interval.ms
    log.flush.scheduler.interval.ms
    log.flush.start.offset.checkpoint.interval.ms
    log.index.interval.bytes
    log.index.size.max.bytes
    log.initial.task.delay.ms
    log.local.retention.bytes
    log.local.retention.ms
    log.message.downconversion.enable
    log.message.format.version
    log.message.timestamp.after.max.ms
    log.message.timestamp.before.max.ms
    log.message.timestamp.difference.max.ms
    log.message.timestamp.type
    log.preallocate
    log.retention.bytes
    log.retention.check.interval.ms
    log.retention.hours
    log.retention.minutes
    log.retention.ms
    log.roll.hours
    log.roll.jitter.hours
    log.roll.jitter.ms
    log.roll.ms
    log.segment.bytes
    log.segment.delete.delay.ms
    max.connection.creation.rate
    max.connections
    max.connections.per.ip
    max.connections.per.ip.overrides
    max.incremental.fetch.session.cache.slots
    max.request.partition.size.limit
    message.max.bytes
    metadata.log.dir
    metadata.log.max.record.bytes.between.snapshots
    metadata.log.max.snapshot.interval.ms
    metadata.log.segment.bytes
    metadata.log.segment.min.bytes
    metadata.log.segment.ms
    metadata.max.idle.interval.ms
    metadata.max.retention.bytes
    metadata.max.retention.ms
    metric.reporters
    metrics.num.samples
    metrics.recording.level
    metrics.sample.window.ms
    min.insync.replicas
    node.id
    num.io.threads
    num.network.threads
    num.partitions
    num.recovery.threads.per.data.dir
    num.replica.alter.log.dirs.threads
    num.replica.fetchers
    offset.metadata.max.bytes
    offsets.commit.required.acks
    offsets.commit.timeout.ms
    offsets.load.buffer.size
    offsets.retention.check.interval.ms
    offsets.retention.minutes
    offsets.topic.compression.codec
    offsets.topic.num.partitions
    offsets.topic.replication.factor
    offsets.topic.segment.bytes
    password.encoder.cipher.algorithm
    password.encoder.iterations
    password.encoder.key.length
    password.encoder.keyfactory.algorithm
    password.encoder.old.secret
    password.encoder.secret
    principal.builder.class
    process.roles
    producer.id.expiration.check.interval.ms
    producer.id.expiration.ms
    producer.purgatory.purge.interval.requests
    queued.max.request.bytes
    queued.max.requests
    quota.window.num
    quota.window.size.seconds
    remote.fetch.max.wait.ms
    remote.log.index.file.cache.total.size.bytes
    remote.log.manager.copier.thread.pool.size
    remote.log.manager.copy.max.bytes.per.second
    remote.log.manager.copy.quota.window.num
    remote.log.manager.copy.quota.window.size.seconds
    remote.log.manager.expiration.thread.pool.size
    remote.log.manager.fetch.max.bytes.per.second
    remote.log.manager.fetch.quota.window.num
    remote.log.manager.fetch.quota.window.size.seconds
    remote.log.manager.task.interval.ms
    remote.log.manager.task.retry.backoff.max.ms
    remote.log.manager.task.retry.backoff.ms
    remote.log.manager.task.retry.jitter
    remote.log.manager.thread.pool.size
    remote.log.metadata.custom.metadata.max.bytes
    remote.log.metadata.manager.class.name
    remote.log.metadata.manager.class.path
    remote.log.metadata.manager.impl.prefix
    remote.log.metadata.manager.listener.name
    remote.log.reader.max.pending.tasks
    remote.log.reader.threads
    remote.log.storage.manager.class.name
    remote.log.storage.manager.class.path
    remote.log.storage.manager.impl.prefix
    remote.log.storage.system.enable
    replica.fetch.backoff.ms
    replica.fetch.max.bytes
    replica.fetch.min.bytes
    replica.fetch.response.max.bytes
    replica.fetch.wait.max.ms
    replica.high.watermark.checkpoint.interval.ms
    replica.lag.time.max.ms
    replica.selector.class
    replica.socket.receive.buffer.bytes
    replica.socket.timeout.ms
    replication.quota.window.num
    replication.quota.window.size.seconds
    request.timeout.ms
    reserved.broker.max.id
    sasl.client.callback.handler.class
    sasl.enabled.mechanisms
    sasl.jaas.config
    sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin
    sasl.kerberos.principal.to.local.rules
    sasl.kerberos.service.name
    sasl.kerberos.ticket.renew.jitter
    sasl.kerberos.ticket.renew.window.factor
    sasl.login.callback.handler.class
    sasl.login.class
    sasl.login.connect.timeout.ms
    sasl.login.read.timeout.ms
    sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds
    sasl.login.refresh.window.factor
    sasl.login.refresh.window.jitter
    sasl.login.retry.backoff.max.ms
    sasl.login.retry.backoff.ms
    sasl.mechanism.controller.protocol
    sasl.mechanism.inter.broker.protocol
    sasl.oauthbearer.clock.skew.seconds
    sasl.oauthbearer.expected.audience
    sasl.oauthbearer.expected.issuer
    sasl.oauthbearer.jwks.endpoint.refresh.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms
    sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.scope.claim.name
    sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url
    sasl.server.callback.handler.class
    sasl.server.max.receive.size
    security.inter.broker.protocol
    security.providers
    server.max.startup.time.ms
    socket.connection.setup.timeout.max.ms
    socket.connection.setup.timeout.ms
    socket.listen.backlog.size
    socket.receive.buffer.bytes
    socket.request.max.bytes
    socket.send.buffer.bytes
    ssl.allow.dn.changes
    ssl.allow.san.changes
    ssl.cipher.suites
    ssl.client.auth
    ssl.enabled.protocols
    ssl.endpoint.identification.algorithm
    ssl.engine.factory.class
    ssl.key.password
    ssl.keymanager.algorithm
    ssl.keystore.certificate.chain
    ssl.keystore.key
    ssl.keystore.location
    ssl.keystore.password
    ssl.keystore.type
    ssl.principal.mapping.rules
    ssl.protocol
    ssl.provider
    ssl.secure.random.implementation
    ssl.trustmanager.algorithm
    ssl.truststore.certificates
    ssl.truststore.location
    ssl.truststore.password
    ssl.truststore.type
    telemetry.max.bytes
    transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction.max.timeout.ms
    transaction.partition.verification.enable
    transaction.remove.expired.transaction.cleanup.interval.ms
    transaction.state.log.load.buffer.size
    transaction.state.log.min.isr
    transaction.state.log.num.partitions
    transaction.state.log.replication.factor
    transaction.state.log.segment.bytes
    transactional.id.expiration.ms
    unclean.leader.election.enable
    unclean.leader.election.interval.ms
    unstable.api.versions.enable
    unstable.feature.versions.enable
    zookeeper.clientCnxnSocket
    zookeeper.connect
    zookeeper.connection.timeout.ms
    zookeeper.max.in.flight.requests
    zookeeper.metadata.migration.enable
    zookeeper.metadata.migration.min.batch.size
    zookeeper.session.timeout.ms
    zookeeper.set.acl
    zookeeper.ssl.cipher.suites
    zookeeper.ssl.client.enable
    zookeeper.ssl.crl.enable
    zookeeper.ssl.enabled.protocols
    zookeeper.ssl.endpoint.identification.algorithm
    zookeeper.ssl.keystore.location
    zookeeper.ssl.keystore.password
    zookeeper.ssl.keystore.type
    zookeeper.ssl.ocsp.enable
    zookeeper.ssl.protocol
    zookeeper.ssl.truststore.location
    zookeeper.ssl.truststore.password
    zookeeper.ssl.truststore.type
    """.split()
)

# KIP-226: the configs Kafka 3.9 can update dynamically, "per-broker" or "cluster-wide"
DYNAMIC_MODES: dict[str, str] = {
    "advertised.listeners": "per-broker",
    "background.threads": "cluster-wide",
    "compression.gzip.level": "cluster-wide",
    "compression.lz4.level": "cluster-wide",
    "compression.type": "cluster-wide",
    "compression.zstd.level": "cluster-wide",
    "listener.security.protocol.map": "per-broker",
    "listeners": "per-broker",
    "log.cleaner.backoff.ms": "cluster-wide",
    "log.cleaner.dedupe.buffer.size": "cluster-wide",
    "log.cleaner.delete.retention.ms": "cluster-wide",
    "log.cleaner.io.buffer.load.factor": "cluster-wide",
    "log.cleaner.io.buffer.size": "cluster-wide",
    "log.cleaner.io.max.bytes.per.second": "cluster-wide",
    "log.cleaner.max.compaction.lag.ms": "cluster-wide",
    "log.cleaner.min.cleanable.ratio": "cluster-wide",
    "log.cleaner.min.compaction.lag.ms": "cluster-wide",
    "log.cleaner.threads": "cluster-wide",
    "log.cleanup.policy": "cluster-wide",
    "log.flush.interval.messages": "cluster-wide",
    "log.flush.interval.ms": "cluster-wide",
    "log.index.interval.bytes": "cluster-wide",
    "log.index.size.max.bytes": "cluster-wide",
    "log.local.retention.bytes": "cluster-wide",
    "log.local.retention.ms": "cluster-wide",
    "log.message.downconversion.enable": "cluster-wide",
    "log.message.timestamp.after.max.ms": "cluster-wide",
    "log.message.timestamp.before.max.ms": "cluster-wide",
    "log.message.timestamp.difference.max.ms": "cluster-wide",
    "log.message.timestamp.type": "cluster-wide",
    "log.preallocate": "cluster-wide",
    "log.retention.bytes": "cluster-wide",
    "log.retention.ms": "cluster-wide",
    "log.roll.jitter.ms": "cluster-wide",
    "log.roll.ms": "cluster-wide",
    "log.segment.bytes": "cluster-wide",
    "log.segment.delete.delay.ms": "cluster-wide",
    "max.connection.creation.rate": "cluster-wide",
    "max.connections": "cluster-wide",
    "max.connections.per.ip": "cluster-wide",
    "max.connections.per.ip.overrides": "cluster-wide",
    "message.max.bytes": "cluster-wide",
    "metric.reporters": "cluster-wide",
    "min.insync.replicas": "cluster-wide",
    "num.io.threads": "cluster-wide",
    "num.network.threads": "cluster-wide",
    "num.recovery.threads.per.data.dir": "cluster-wide",
    "num.replica.fetchers": "cluster-wide",
    "principal.builder.class": "per-broker",
    "producer.id.expiration.ms": "cluster-wide",
    "remote.fetch.max.wait.ms": "cluster-wide",
    "remote.log.index.file.cache.total.size.bytes": "cluster-wide",
    "remote.log.manager.copy.max.bytes.per.second": "cluster-wide",
    "remote.log.manager.fetch.max.bytes.per.second": "cluster-wide",
    "sasl.enabled.mechanisms": "per-broker",
    "sasl.jaas.config": "per-broker",
    "sasl.kerberos.kinit.cmd": "per-broker",
    "sasl.kerberos.min.time.before.relogin": "per-broker",
    "sasl.kerberos.principal.to.local.rules": "per-broker",
    "sasl.kerberos.service.name": "per-broker",
    "sasl.kerberos.ticket.renew.jitter": "per-broker",
    "sasl.kerberos.ticket.renew.window.factor": "per-broker",
    "sasl.login.refresh.buffer.seconds": "per-broker",
    "sasl.login.refresh.min.period.seconds": "per-broker",
    "sasl.login.refresh.window.factor": "per-broker",
    "sasl.login.refresh.window.jitter": "per-broker",
    "sasl.mechanism.inter.broker.protocol": "per-broker",
    "ssl.cipher.suites": "per-broker",
    "ssl.client.auth": "per-broker",
    "ssl.enabled.protocols": "per-broker",
    "ssl.endpoint.identification.algorithm": "per-broker",
    "ssl.engine.factory.class": "per-broker",
    "ssl.key.password": "per-broker",
    "ssl.keymanager.algorithm": "per-broker",
    "ssl.keystore.certificate.chain": "per-broker",
    "ssl.keystore.key": "per-broker",
    "ssl.keystore.location": "per-broker",
    "ssl.keystore.password": "per-broker",
    "ssl.keystore.type": "per-broker",
    "ssl.protocol": "per-broker",
    "ssl.provider": "per-broker",
    "ssl.secure.random.implementation": "per-broker",
    "ssl.trustmanager.algorithm": "per-broker",
    "ssl.truststore.certificates": "per-broker",
    "ssl.truststore.location": "per-broker",
    "ssl.truststore.password": "per-broker",
    "ssl.truststore.type": "per-broker",
    "transaction.partition.verification.enable": "cluster-wide",
    "unclean.leader.election.enable": "cluster-wide",
}

# DynamicConfig.Broker adds the replication quotas (QuotaConfigs.brokerQuotaConfigs), not KafkaConfig keys
QUOTA_CONFIGS: tuple[str, ...] = (
    "follower.replication.throttled.rate",
    "leader.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)

# (ConfigDef type, documentation) of the keys pybroker describes
DEFINITIONS: dict[str, tuple[str, str]] = {
    "advertised.listeners": (
        "STRING",
        "Listeners to publish to ZooKeeper for clients to use, if different than the <code>listeners</code> config property. In IaaS environments, this may need to be different from the interface to which the broker binds. If this is not set, the value for <code>listeners</code> will be used. Unlike <code>listeners</code>, it is not valid to advertise the 0.0.0.0 meta-address.\n Also unlike <code>listeners</code>, there can be duplicated ports in this property, so that one listener can be configured to advertise another listener's address. This can be useful in some cases where external load balancers are used.",
    ),
    "authorizer.class.name": (
        "STRING",
        "The fully qualified name of a class that implements <code>org.apache.kafka.server.authorizer.Authorizer</code> interface, which is used by the broker for authorization.",
    ),
    "auto.create.topics.enable": ("BOOLEAN", "Enable auto creation of topic on the server."),
    "auto.leader.rebalance.enable": (
        "BOOLEAN",
        "Enables auto leader balancing. A background thread checks the distribution of partition leaders at regular intervals, configurable by leader.imbalance.check.interval.seconds. If the leader imbalance exceeds leader.imbalance.per.broker.percentage, leader rebalance to the preferred leader for partitions is triggered.",
    ),
    "broker.id": (
        "INT",
        "The broker id for this server. If unset, a unique broker id will be generated.To avoid conflicts between ZooKeeper generated broker id's and user configured broker id's, generated broker ids start from reserved.broker.max.id + 1.",
    ),
    "broker.rack": (
        "STRING",
        "Rack of the broker. This will be used in rack aware replication assignment for fault tolerance. Examples: <code>RACK1</code>, <code>us-east-1d</code>",
    ),
    "compression.type": (
        "STRING",
        "Specify the final compression type for a given topic. This configuration accepts the standard compression codecs ('gzip', 'snappy', 'lz4', 'zstd'). It additionally accepts 'uncompressed' which is equivalent to no compression; and 'producer' which means retain the original compression codec set by the producer.",
    ),
    "controlled.shutdown.enable": ("BOOLEAN", "Enable controlled shutdown of the server."),
    "controlled.shutdown.max.retries": (
        "INT",
        "Controlled shutdown can fail for multiple reasons. This determines the number of retries when such failure happens",
    ),
    "controlled.shutdown.retry.backoff.ms": (
        "LONG",
        "Before each retry, the system needs time to recover from the state that caused the previous failure (Controller fail over, replica lag etc). This config determines the amount of time to wait before retrying.",
    ),
    "default.replication.factor": (
        "INT",
        "The replication factor for automatically created topics, and for topics created with -1 as the replication factor",
    ),
    "group.consumer.assignors": (
        "LIST",
        "The server side assignors as a list of full class names. The first one in the list is considered as the default assignor to be used in the case where the consumer does not specify an assignor.",
    ),
    "group.consumer.heartbeat.interval.ms": (
        "INT",
        "The heartbeat interval given to the members of a consumer group.",
    ),
    "group.consumer.max.size": (
        "INT",
        "The maximum number of consumers that a single consumer group can accommodate. This value will only impact the new consumer coordinator. To configure the classic consumer coordinator check group.max.size instead.",
    ),
    "group.consumer.session.timeout.ms": (
        "INT",
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    "group.coordinator.rebalance.protocols": (
        "LIST",
        "The list of enabled rebalance protocols. Supported protocols: consumer,classic,share,unknown. The consumer rebalance protocol is in early access and therefore must not be used in production.",
    ),
    "group.initial.rebalance.delay.ms": (
        "INT",
        "The amount of time the group coordinator will wait for more consumers to join a new group before performing the first rebalance. A longer delay means potentially fewer rebalances, but increases the time until processing begins.",
    ),
    "group.max.session.timeout.ms": (
        "INT",
        "The maximum allowed session timeout for registered consumers. Longer timeouts give consumers more time to process messages in between heartbeats at the cost of a longer time to detect failures.",
    ),
    "group.min.session.timeout.ms": (
        "INT",
        "The minimum allowed session timeout for registered consumers. Shorter timeouts result in quicker failure detection at the cost of more frequent consumer heartbeating, which can overwhelm broker resources.",
    ),
    "inter.broker.listener.name": (
        "STRING",
        "Name of listener used for communication between brokers. If this is unset, the listener name is defined by security.inter.broker.protocolIt is an error to set this and security.inter.broker.protocol properties at the same time.",
    ),
    "leader.imbalance.check.interval.seconds": (
        "LONG",
        "The frequency with which the partition rebalance check is triggered by the controller",
    ),
    "leader.imbalance.per.broker.percentage": (
        "INT",
        "The ratio of leader imbalance allowed per broker. The controller would trigger a leader balance if it goes above this value per broker. The value is specified in percentage.",
    ),
    "listener.security.protocol.map": (
        "STRING",
        "Map between listener names and security protocols. This must be defined for the same security protocol to be usable in more than one port or IP. For example, internal and external traffic can be separated even if SSL is required for both. Concretely, the user could define listeners with names INTERNAL and EXTERNAL and this property as: <code>INTERNAL:SSL,EXTERNAL:SSL</code>. As shown, key and value are separated by a colon and map entries are separated by commas. Each listener name should only appear once in the map. Different security (SSL and SASL) settings can be configured for each listener by adding a normalised prefix (the listener name is lowercased) to the config name. For example, to set a different keystore for the INTERNAL listener, a config with name <code>listener.name.internal.ssl.keystore.location</code> would be set. If the config for the listener name is not set, the config will fallback to the generic config (i.e. <code>ssl.keystore.location</code>). Note that in KRaft a default mapping from the listener names defined by <code>controller.listener.names</code> to PLAINTEXT is assumed if no explicit mapping is provided and no other security protocol is in use.",
    ),
    "listeners": (
        "STRING",
        "Listener List - Comma-separated list of URIs we will listen on and the listener names. If the listener name is not a security protocol, <code>listener.security.protocol.map</code> must also be set.\n Listener names and port numbers must be unique unless %n one listener is an IPv4 address and the other listener is %n an IPv6 address (for the same port).%n Specify hostname as 0.0.0.0 to bind to all interfaces.%n Leave hostname empty to bind to default interface.%n Examples of legal listener lists:%n <code>PLAINTEXT://myhost:9092,SSL://:9091</code>%n <code>CLIENT://0.0.0.0:9092,REPLICATION://localhost:9093</code>%n <code>PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092</code>%n",
    ),
    "log.cleaner.backoff.ms": (
        "LONG",
        "The amount of time to sleep when there are no logs to clean",
    ),
    "log.cleaner.dedupe.buffer.size": (
        "LONG",
        "The total memory used for log deduplication across all cleaner threads",
    ),
    "log.cleaner.delete.retention.ms": (
        "LONG",
        "The amount of time to retain tombstone message markers for log compacted topics. This setting also gives a bound on the time in which a consumer must complete a read if they begin from offset 0 to ensure that they get a valid snapshot of the final stage (otherwise  tombstones messages may be collected before a consumer completes their scan).",
    ),
    "log.cleaner.enable": (
        "BOOLEAN",
        "Enable the log cleaner process to run on the server. Should be enabled if using any topics with a cleanup.policy=compact including the internal offsets topic. If disabled those topics will not be compacted and continually grow in size.",
    ),
    "log.cleaner.io.buffer.load.factor": (
        "DOUBLE",
        "Log cleaner dedupe buffer load factor. The percentage full the dedupe buffer can become. A higher value will allow more log to be cleaned at once but will lead to more hash collisions",
    ),
    "log.cleaner.io.buffer.size": (
        "INT",
        "The total memory used for log cleaner I/O buffers across all cleaner threads",
    ),
    "log.cleaner.max.compaction.lag.ms": (
        "LONG",
        "The maximum time a message will remain ineligible for compaction in the log. Only applicable for logs that are being compacted.",
    ),
    "log.cleaner.min.cleanable.ratio": (
        "DOUBLE",
        "The minimum ratio of dirty log to total log for a log to eligible for cleaning. If the log.cleaner.max.compaction.lag.ms or the log.cleaner.min.compaction.lag.ms configurations are also specified, then the log compactor considers the log eligible for compaction as soon as either: (i) the dirty ratio threshold has been met and the log has had dirty (uncompacted) records for at least the log.cleaner.min.compaction.lag.ms duration, or (ii) if the log has had dirty (uncompacted) records for at most the log.cleaner.max.compaction.lag.ms period.",
    ),
    "log.cleaner.min.compaction.lag.ms": (
        "LONG",
        "The minimum time a message will remain uncompacted in the log. Only applicable for logs that are being compacted.",
    ),
    "log.cleaner.threads": ("INT", "The number of background threads to use for log cleaning"),
    "log.cleanup.policy": (
        "LIST",
        'The default cleanup policy for segments beyond the retention window. A comma separated list of valid policies. Valid policies are: "delete" and "compact"',
    ),
    "log.dir": (
        "STRING",
        "The directory in which the log data is kept (supplemental for log.dirs property)",
    ),
    "log.dirs": (
        "STRING",
        "A comma-separated list of the directories where the log data is stored. If not set, the value in log.dir is used.",
    ),
    "log.flush.interval.messages": (
        "LONG",
        "The number of messages accumulated on a log partition before messages are flushed to disk.",
    ),
    "log.flush.interval.ms": (
        "LONG",
        "The maximum time in ms that a message in any topic is kept in memory before flushed to disk. If not set, the value in log.flush.scheduler.interval.ms is used",
    ),
    "log.index.interval.bytes": (
        "INT",
        "The interval with which we add an entry to the offset index.",
    ),
    "log.index.size.max.bytes": ("INT", "The maximum size in bytes of the offset index"),
    "log.message.timestamp.after.max.ms": (
        "LONG",
        "This configuration sets the allowable timestamp difference between the message timestamp and the broker's timestamp. The message timestamp can be later than or equal to the broker's timestamp, with the maximum allowable difference determined by the value set in this configuration. If log.message.timestamp.type=CreateTime, the message will be rejected if the difference in timestamps exceeds this specified threshold. This configuration is ignored if log.message.timestamp.type=LogAppendTime.",
    ),
    "log.message.timestamp.before.max.ms": (
        "LONG",
        "This configuration sets the allowable timestamp difference between the broker's timestamp and the message timestamp. The message timestamp can be earlier than or equal to the broker's timestamp, with the maximum allowable difference determined by the value set in this configuration. If log.message.timestamp.type=CreateTime, the message will be rejected if the difference in timestamps exceeds this specified threshold. This configuration is ignored if log.message.timestamp.type=LogAppendTime.",
    ),
    "log.message.timestamp.difference.max.ms": (
        "LONG",
        "[DEPRECATED] The maximum difference allowed between the timestamp when a broker receives a message and the timestamp specified in the message. If log.message.timestamp.type=CreateTime, a message will be rejected if the difference in timestamp exceeds this threshold. This configuration is ignored if log.message.timestamp.type=LogAppendTime.The maximum timestamp difference allowed should be no greater than log.retention.ms to avoid unnecessarily frequent log rolling.",
    ),
    "log.message.timestamp.type": (
        "STRING",
        "Define whether the timestamp in the message is message create time or log append time. The value should be either <code>CreateTime</code> or <code>LogAppendTime</code>.",
    ),
    "log.retention.bytes": ("LONG", "The maximum size of the log before deleting it"),
    "log.retention.check.interval.ms": (
        "LONG",
        "The frequency in milliseconds that the log cleaner checks whether any log is eligible for deletion",
    ),
    "log.retention.hours": (
        "INT",
        "The number of hours to keep a log file before deleting it (in hours), tertiary to log.retention.ms property",
    ),
    "log.retention.minutes": (
        "INT",
        "The number of minutes to keep a log file before deleting it (in minutes), secondary to log.retention.ms property. If not set, the value in log.retention.hours is used",
    ),
    "log.retention.ms": (
        "LONG",
        "The number of milliseconds to keep a log file before deleting it (in milliseconds), If not set, the value in log.retention.minutes is used. If set to -1, no time limit is applied.",
    ),
    "log.roll.hours": (
        "INT",
        "The maximum time before a new log segment is rolled out (in hours), secondary to log.roll.ms property",
    ),
    "log.roll.ms": (
        "LONG",
        "The maximum time before a new log segment is rolled out (in milliseconds). If not set, the value in log.roll.hours is used",
    ),
    "log.segment.bytes": ("INT", "The maximum size of a single log file"),
    "max.connections": (
        "INT",
        "The maximum number of connections we allow in the broker at any time. This limit is applied in addition to any per-ip limits configured using max.connections.per.ip. Listener-level limits may also be configured by prefixing the config name with the listener prefix, for example, <code>listener.name.internal.max.connections.per.ip</code>. Broker-wide limit should be configured based on broker capacity while listener limits should be configured based on application requirements. New connections are blocked if either the listener or broker limit is reached. Connections on the inter-broker listener are permitted even if broker-wide limit is reached. The least recently used connection on another listener will be closed in this case.",
    ),
    "max.incremental.fetch.session.cache.slots": (
        "INT",
        "The maximum number of total incremental fetch sessions that we will maintain. FetchSessionCache is sharded into 8 shards and the limit is equally divided among all shards. Sessions are allocated to each shard in round-robin. Only entries within a shard are considered eligible for eviction.",
    ),
    "max.request.partition.size.limit": (
        "INT",
        "The maximum number of partitions can be served in one request.",
    ),
    "message.max.bytes": (
        "INT",
        "The largest record batch size allowed by Kafka (after compression if compression is enabled). If this is increased and there are consumers older than 0.10.2, the consumers' fetch size must also be increased so that they can fetch record batches this large. In the latest message format version, records are always grouped into batches for efficiency. In previous message format versions, uncompressed records are not grouped into batches and this limit only applies to a single record in that case.This can be set per topic with the topic level <code>max.message.bytes</code> config.",
    ),
    "min.insync.replicas": (
        "INT",
        'When a producer sets acks to "all" (or "-1"), <code>min.insync.replicas</code> specifies the minimum number of replicas that must acknowledge a write for the write to be considered successful. If this minimum cannot be met, then the producer will raise an exception (either <code>NotEnoughReplicas</code> or <code>NotEnoughReplicasAfterAppend</code>).<br>When used together, <code>min.insync.replicas</code> and acks allow you to enforce greater durability guarantees. A typical scenario would be to create a topic with a replication factor of 3, set <code>min.insync.replicas</code> to 2, and produce with acks of "all". This will ensure that the producer raises an exception if a majority of replicas do not receive a write.',
    ),
    "num.partitions": ("INT", "The default number of log partitions per topic"),
    "offset.metadata.max.bytes": (
        "INT",
        "The maximum size for a metadata entry associated with an offset commit.",
    ),
    "offsets.retention.check.interval.ms": (
        "LONG",
        "Frequency at which to check for stale offsets",
    ),
    "offsets.retention.minutes": (
        "INT",
        "For subscribed consumers, committed offset of a specific partition will be expired and discarded when 1) this retention period has elapsed after the consumer group loses all its consumers (i.e. becomes empty); 2) this retention period has elapsed since the last time an offset is committed for the partition and the group is no longer subscribed to the corresponding topic. For standalone consumers (using manual assignment), offsets will be expired after this retention period has elapsed since the time of last commit. Note that when a group is deleted via the delete-group request, its committed offsets will also be deleted without extra retention period; also when a topic is deleted via the delete-topic request, upon propagated metadata update any group's committed offsets for that topic will also be deleted without extra retention period.",
    ),
    "replica.lag.time.max.ms": (
        "LONG",
        "If a follower hasn't sent any fetch requests or hasn't consumed up to the leaders log end offset for at least this time, the leader will remove the follower from isr",
    ),
    "security.inter.broker.protocol": (
        "STRING",
        "Security protocol used to communicate between brokers. Valid values are: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL. It is an error to set this and inter.broker.listener.name properties at the same time.",
    ),
    "socket.request.max.bytes": ("INT", "The maximum number of bytes in a socket request"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "INT",
        "The interval at which to rollback transactions that have timed out",
    ),
    "transaction.max.timeout.ms": (
        "INT",
        "The maximum allowed timeout for transactions. If a client’s requested transaction time exceed this, then the broker will return an error in InitProducerIdRequest. This prevents a client from too large of a timeout, which can stall consumers reading from topics included in the transaction.",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "INT",
        "The interval at which to remove transactions that have expired due to <code>transactional.id.expiration.ms</code> passing",
    ),
    "transactional.id.expiration.ms": (
        "INT",
        "The time in ms that the transaction coordinator will wait without receiving any transaction status updates for the current transaction before expiring its transactional id. Transactional IDs will not expire while a the transaction is still ongoing.",
    ),
    "unclean.leader.election.enable": (
        "BOOLEAN",
        "Indicates whether to enable replicas not in the ISR set to be elected as leader as a last resort, even though doing so may result in data loss<p>Note: In KRaft mode, when enabling this config dynamically, it needs to wait for the unclean leader election thread to trigger election periodically (default is 5 minutes). Please run `kafka-leader-election.sh` with `unclean` option to trigger the unclean leader election immediately if needed.</p>",
    ),
    "zookeeper.connect": (
        "STRING",
        "Specifies the ZooKeeper connection string in the form <code>hostname:port</code> where host and port are the host and port of a ZooKeeper server. To allow connecting through other ZooKeeper nodes when that ZooKeeper machine is down you can also specify multiple hosts in the form <code>hostname1:port1,hostname2:port2,hostname3:port3</code>.\nThe server can also have a ZooKeeper chroot path as part of its ZooKeeper connection string which puts its data under some path in the global ZooKeeper namespace. For example to give a chroot path of <code>/chroot/path</code> you would give the connection string as <code>hostname1:port1,hostname2:port2,hostname3:port3/chroot/path</code>.",
    ),
    "zookeeper.connection.timeout.ms": (
        "INT",
        "The max time that the client waits to establish a connection to ZooKeeper. If not set, the value in zookeeper.session.timeout.ms is used",
    ),
    "zookeeper.session.timeout.ms": ("INT", "Zookeeper session timeout"),
}
