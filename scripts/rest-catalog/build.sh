#!/usr/bin/env bash
# Fetches, once, Iceberg's REST catalog test server and everything it needs to run, for tests
# that need a real Iceberg REST catalog (JDBC on SQLite behind it, tables on S3 through
# S3FileIO), into:
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/rest-catalog/<key>/lib/*.jar
# <key> is the Iceberg version and a hash of this script and of the launcher it compiles, so a
# changed recipe makes a new directory. The jars come from Maven Central through `mvn`:
# iceberg-open-api's test-fixtures (RESTCatalogServer) and iceberg-core's tests (the servlet and
# adapter it serves with) with their runtime dependencies (iceberg-core, Jetty 12, Hadoop's
# client), iceberg-aws with iceberg-aws-bundle (S3FileIO and the AWS SDK), sqlite-jdbc and
# slf4j-simple (logs on stderr). FloeRESTCatalogServer.java, next to this script, is compiled
# into lib/ too: it serves the same catalog bound to one address (RESTCatalogServer listens on
# every interface). Run it with
#   java -cp 'LIB/*' org.apache.iceberg.rest.FloeRESTCatalogServer HOST PORT
# and the backend catalog in CATALOG_* variables (CATALOG_URI=jdbc:sqlite:..., CATALOG_WAREHOUSE,
# CATALOG_IO__IMPL, CATALOG_S3_ENDPOINT...; `__` stands for `-` and `_` for `.`); tests/rest_s3.py
# does so. A run that finds the jars cached does nothing else.
#
# Usage: build.sh          fetch if needed; print the lib directory on stdout
#        build.sh --check  print that directory and exit 0 if complete, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR        cache root (default $HOME/.cache/floe)
set -euo pipefail

# 1.11 is the first whose test server answers a load with an ETag and a matching If-None-Match with
# 304 Not Modified, as the REST spec lets a server do: floe's refreshes rely on it.
ICEBERG_VERSION=1.11.0
# Iceberg 1.11's REST servlet is written against Jetty 12's ee10 servlets (jakarta.servlet).
JETTY_VERSION=12.1.8
HADOOP_VERSION=3.4.1
SQLITE_JDBC_VERSION=3.46.1.3
SLF4J_VERSION=2.0.17
SERVER_CLASS=org.apache.iceberg.rest.RESTCatalogServer

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LAUNCHER_SOURCE="$HERE/FloeRESTCatalogServer.java"
RECIPE_HASH="$(cat "${BASH_SOURCE[0]}" "$LAUNCHER_SOURCE" | sha256sum | cut -c1-12)"

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/rest-catalog"
TARGET_DIR="$CACHE_ROOT/$ICEBERG_VERSION-$RECIPE_HASH"
LIB_DIR="$TARGET_DIR/lib"

LOG_TAG=rest-catalog-env
RESULT="$LIB_DIR"
is_built() { [[ -f "$LIB_DIR/floe-rest-catalog-launcher.jar" && -f "$TARGET_DIR/.complete" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$HERE/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
cached_build_lock

for tool in mvn javac jar; do
    command -v "$tool" >/dev/null || die "$tool is not on PATH (Maven and a JDK 17 are needed)"
done

staging="$(mktemp -d "$CACHE_ROOT/.staging-XXXXXX")"
trap 'rm -rf "$staging"' EXIT

dependency() { # group artifact version [classifier]
    printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version>%s</dependency>\n' \
        "$1" "$2" "$3" "${4:+<classifier>$4</classifier>}"
}
{
    cat <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe.test</groupId>
  <artifactId>rest-catalog-server</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
POM
    dependency org.apache.iceberg iceberg-open-api "$ICEBERG_VERSION" test-fixtures
    dependency org.apache.iceberg iceberg-core "$ICEBERG_VERSION" tests
    dependency org.apache.iceberg iceberg-core "$ICEBERG_VERSION"
    dependency org.apache.iceberg iceberg-aws "$ICEBERG_VERSION"
    dependency org.apache.iceberg iceberg-aws-bundle "$ICEBERG_VERSION"
    dependency org.eclipse.jetty.ee10 jetty-ee10-servlet "$JETTY_VERSION"
    dependency org.apache.hadoop hadoop-client-api "$HADOOP_VERSION"
    dependency org.apache.hadoop hadoop-client-runtime "$HADOOP_VERSION"
    dependency org.xerial sqlite-jdbc "$SQLITE_JDBC_VERSION"
    dependency org.slf4j slf4j-simple "$SLF4J_VERSION"
    printf '  </dependencies>\n</project>\n'
} >"$staging/pom.xml"

log "fetching Iceberg $ICEBERG_VERSION's REST catalog server and its dependencies with Maven"
# Maven 3.8 writes colour codes even in batch mode; they are stripped from its output.
(cd "$staging" && nice -n 10 mvn -B -q dependency:copy-dependencies \
    -DoutputDirectory="$staging/out/lib" -DincludeScope=runtime 2>&1 | sed $'s/\e\\[[0-9;]*m//g' >&2) ||
    die "mvn dependency:copy-dependencies failed"

fixtures="$staging/out/lib/iceberg-open-api-$ICEBERG_VERSION-test-fixtures.jar"
[[ -f "$fixtures" ]] || die "Maven did not fetch $(basename "$fixtures")"
jar tf "$fixtures" | grep -qx "${SERVER_CLASS//.//}.class" || die "$SERVER_CLASS is not in $(basename "$fixtures")"

log "compiling $(basename "$LAUNCHER_SOURCE")"
mkdir -p "$staging/classes"
javac -nowarn -d "$staging/classes" -cp "$staging/out/lib/*" "$LAUNCHER_SOURCE" >&2 || die "javac failed"
jar cf "$staging/out/lib/floe-rest-catalog-launcher.jar" -C "$staging/classes" . || die "jar failed"

touch "$staging/out/.complete"
rm -rf "$TARGET_DIR"
mv "$staging/out" "$TARGET_DIR"
log "done: $LIB_DIR ($(find "$LIB_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$LIB_DIR" | cut -f1))"
echo "$LIB_DIR"
