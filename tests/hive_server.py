"""A real Hive metastore, as test infrastructure: Hive 2.3.9's, from the jars pyspark ships
(this module is not named hive_metastore: pyiceberg imports a package of that name).

``hive_metastore`` prepares an embedded Derby database (the metastore's schema is created by
DataNucleus on first use; the transaction and lock tables, which every Hive catalog commit
locks through, by ``scripts/hive/PrepareTxnTables.java``), then runs the metastore's Thrift
server on a free loopback port as a subprocess that logs to a file.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark
from rest_s3 import SCRIPTS, ServerProcess, free_port

PREPARE_TXN_TABLES = SCRIPTS / "hive" / "PrepareTxnTables.java"
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
_JAVA_OPTIONS = [
    "-Xmx512m",
    # Hive 2.3's metastore on Java 17, as Spark runs its Hive client.
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in ("java.lang", "java.net", "java.util", "java.nio", "sun.nio.ch")
    ),
]
_LOG4J = """rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c{1}: %m%n
"""


@dataclass(frozen=True)
class HiveMetastore:
    """A running metastore whose tables live under a local warehouse directory."""

    uri: str
    warehouse: str

    def properties(self) -> dict[str, str]:
        """pyiceberg catalog properties of the metastore; a Hive 2 metastore knows no ``timestamp
        with local time zone`` column type, so pyiceberg stores timestamptz columns as Iceberg
        Java does, ``timestamp``."""
        return {"type": "hive", "uri": self.uri, "warehouse": self.warehouse, "hive.hive2-compatible": "true"}


@contextmanager
def hive_metastore(work_dir: Path) -> Iterator[HiveMetastore]:
    """Run a fresh metastore with its database, warehouse and log (``metastore.log``) in ``work_dir``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "log4j2.properties").write_text(_LOG4J)
    warehouse = (work_dir / "warehouse").resolve()
    warehouse.mkdir(exist_ok=True)
    database = f"jdbc:derby:;databaseName={(work_dir / 'metastore_db').resolve()};create=true"
    java = ["java", f"-Dlog4j.configurationFile={work_dir / 'log4j2.properties'}", *_JAVA_OPTIONS]
    classpath = ["-cp", f"{PYSPARK_JARS}/*"]
    subprocess.run(
        [*java, f"-Djavax.jdo.option.ConnectionURL={database}", *classpath, str(PREPARE_TXN_TABLES)],
        cwd=work_dir,
        capture_output=True,
        check=True,
    )
    port = free_port("127.0.0.1")
    settings = {
        "hive.async.log.enabled": "false",
        "javax.jdo.option.ConnectionURL": database,
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": warehouse.as_uri(),
    }
    command = [*java, *classpath, "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)]
    for key, value in settings.items():
        command += ["--hiveconf", f"{key}={value}"]
    process = ServerProcess("Hive metastore", command, work_dir / "metastore.log")
    try:
        process.wait_for_port("127.0.0.1", port, timeout_s=180)
        yield HiveMetastore(f"thrift://127.0.0.1:{port}", warehouse.as_uri())
    finally:
        process.stop()
